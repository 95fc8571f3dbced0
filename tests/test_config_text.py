"""A runner's config renders its text once (mmpoly.engine.config_text): the same text as
mmengine's ``Config.pretty_text``, rendered again only when the config changes, and once in a run
that saves a checkpoint every epoch (mmengine renders it at every checkpoint); its dump to the
work_dir is atomic."""
import copy
import json
import pickle
from pathlib import Path
from typing import List

import pytest
import torch
from helpers import REPO, disk_full_at_fsync
from mmengine.config import Config
from mmengine.config import config as mmengine_config
from test_tools import make_fashion_mnist_subset, write_config

from mmpoly.engine import TextCachingConfig, build_runner, caching_pretty_text
from mmpoly.utils import register_all_modules

DETECTOR = REPO / 'configs' / 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py'


@pytest.fixture
def renderings(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """The texts yapf formats from now on (each is one rendering of a ``pretty_text``)."""
    calls: List[str] = []
    format_code = mmengine_config.FormatCode

    def counting(text, **kwargs):
        calls.append(text)
        return format_code(text, **kwargs)

    monkeypatch.setattr(mmengine_config, 'FormatCode', counting)
    return calls


def test_text_is_mmengine_s_and_rendered_once_per_content(renderings: List[str]) -> None:
    plain = Config.fromfile(str(DETECTOR))
    expected = plain.pretty_text
    assert len(renderings) == 1
    cached = caching_pretty_text(plain)
    assert isinstance(cached, TextCachingConfig) and caching_pretty_text(cached) is cached
    assert [cached.pretty_text for _ in range(3)] == [expected] * 3
    assert len(renderings) == 2  # the three reads rendered once
    copied = copy.deepcopy(cached)  # as the Runner stores its cfg
    assert type(copied) is TextCachingConfig and copied.pretty_text == expected
    assert len(renderings) == 2
    copied.model.backbone.frozen_stages = 3  # an edited config is rendered again
    edited = copied.pretty_text
    assert len(renderings) == 3 and edited != expected and 'frozen_stages=3' in edited
    assert edited == Config(copied.to_dict()).pretty_text
    assert cached.pretty_text == expected  # the original is untouched
    restored = pickle.loads(pickle.dumps(copied))
    assert type(restored) is TextCachingConfig and restored.pretty_text == edited


def test_dump_writes_mmengine_s_text_complete_or_not_at_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner's config dumps the text mmengine dumps, atomically (a failed write keeps the
    previous file); other formats and ``dump()`` without a file are mmengine's."""
    plain = Config.fromfile(str(DETECTOR))
    cached = caching_pretty_text(plain)
    plain.dump(str(tmp_path / 'plain.py'))
    assert cached.dump(str(tmp_path / 'cached.py')) is None
    assert (tmp_path / 'cached.py').read_text() == (tmp_path / 'plain.py').read_text()
    assert cached.dump() == plain.dump()
    cached.dump(str(tmp_path / 'cached.json'))
    assert json.loads((tmp_path / 'cached.json').read_text()) == \
        json.loads(json.dumps(plain.to_dict()))
    (tmp_path / 'cached.py').write_text('previous')
    disk_full_at_fsync(monkeypatch)
    with pytest.raises(OSError, match='No space left'):
        cached.dump(str(tmp_path / 'cached.py'))
    assert (tmp_path / 'cached.py').read_text() == 'previous'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['cached.json', 'cached.py', 'plain.py']


@pytest.mark.slow
def test_a_run_renders_its_config_once(tmp_path: Path, renderings: List[str]) -> None:
    """Two epochs with a checkpoint after each: a plain Runner renders the config six times
    (its log, its dump, RuntimeInfoHook, each checkpoint); through build_runner it is rendered
    once, and each checkpoint's meta holds mmengine's text."""
    register_all_modules()
    config = write_config(tmp_path, make_fashion_mnist_subset(tmp_path / 'fashion-mnist'))
    cfg = Config.fromfile(str(config))
    cfg.work_dir = str(tmp_path / 'work')
    cfg.train_cfg.max_epochs = 2
    cfg.train_cfg.val_interval = 10
    renderings.clear()
    runner = build_runner(cfg)
    runner.train()
    assert len(renderings) == 1, len(renderings)
    expected = Config(runner.cfg.to_dict()).pretty_text
    assert (tmp_path / 'work' / config.name).read_text() == expected  # the run's dumped config
    for epoch in (1, 2):
        checkpoint = torch.load(tmp_path / 'work' / f'epoch_{epoch}.pth', weights_only=False)
        assert checkpoint['meta']['cfg'] == expected
