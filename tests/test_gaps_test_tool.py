"""Gaps of tools/test.py: ``--tta`` with ``--cfg-options`` for the test pipeline (refused) or for
``tta_model`` / ``tta_pipeline`` (now acting), ``--tta --show-dir`` (drew nothing: a crash
mid-test; now each sample's first TTA view), ``--interval`` / ``--wait-time`` without the flag
they serve (refused), and the ``--out`` check shared with tools/deployment/pytorch2onnx.py
(:func:`mmpoly.utils.startup.out_file_problem`).

The runs call ``main(argv)`` in-process on the first 8 Fashion-MNIST test images, with a
configs/ Fashion-MNIST classifier and a checkpoint of its initial weights made here.
"""
import os
import pickle
from pathlib import Path
from typing import Any, List

import cv2
import numpy as np
import pytest
import torch
from helpers import (CONFIGS, FASHION_MNIST, experiment_name, fashion_mnist_test_images,
                     load_tool)
from mmengine.config import Config
from mmpretrain.visualization import UniversalVisualizer

from mmpoly.utils.complexity import build_model
from mmpoly.utils.startup import StartupError, folder_problem, out_file_problem

FASHION = str(CONFIGS / 'pdc_resnet8_1xb128-1400i_fashion-mnist.py')
NUM_IMAGES = 8
needs_fashion_mnist = pytest.mark.skipif(
    not (FASHION_MNIST / 't10k-images-idx3-ubyte.gz').is_file(),
    reason='tools/setup_env.sh installs Fashion-MNIST')
#: The (only) test pipeline step of the tiny config, so that the TTA pipeline derived from it
#: is known here: [TestTimeAug(transforms=[[flip prob 1, flip prob 0], [PackInputs]])].
TINY_TEST = f'''\
_base_ = [{FASHION!r}]
test_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                       dataset=dict(indices={NUM_IMAGES}, pipeline=[dict(type='PackInputs')]))
'''


@pytest.fixture(scope='module')
def test_tool() -> Any:
    return load_tool('test')


@pytest.fixture(scope='module')
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The tiny config and a checkpoint of its model's initial weights."""
    root = tmp_path_factory.mktemp('test_tool')
    config = root / 'tiny_fashion.py'
    config.write_text(TINY_TEST)
    checkpoint = root / 'initial.pth'
    model = build_model(Config.fromfile(str(config)), 'model')
    torch.save(dict(meta=dict(epoch=0), state_dict=model.state_dict()), checkpoint)
    return dict(config=str(config), checkpoint=str(checkpoint))


def merged(tool: Any, config: str, *flags: str) -> Config:
    """``merge_args`` of ``tools/test.py CONFIG c.pth FLAGS``."""
    return tool.merge_args(Config.fromfile(config), tool.parse_args([config, 'c.pth', *flags]))


def usage_error(tool: Any, argv: List[str], capsys: pytest.CaptureFixture) -> str:
    """The message of the usage error (exit status 2) that ``parse_args(argv)`` ends in."""
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def startup_error(tool: Any, argv: List[str], capsys: pytest.CaptureFixture) -> List[str]:
    """The lines that ``main(argv)`` prints to stderr as it exits with status 1."""
    with pytest.raises(SystemExit) as exit_info:
        tool.main(argv)
    assert exit_info.value.code == 1
    return capsys.readouterr().err.splitlines()


# --------------------------------------------------------------------------- 1: --tta options


PIPELINE_OPTIONS = [  # (option, the value as the message shows it, what it suggests instead)
    ('test_dataloader.dataset.pipeline=[PackInputs]', "['PackInputs']", 'tta_pipeline=...'),
    ('test_dataloader.dataset.pipeline.0.meta_keys=[img_path]', "['img_path']",
     'tta_pipeline.0.meta_keys=...'),
]


@pytest.mark.parametrize('option, shown, suggestion', PIPELINE_OPTIONS)
def test_tta_refuses_an_option_that_would_override_its_pipeline(
        test_tool: Any, tiny: dict, tmp_path: Path, capsys: pytest.CaptureFixture, option: str,
        shown: str, suggestion: str) -> None:
    """Merged after --tta had set the TTA pipeline, such an option replaced (or edited) it
    without a word: the TTA model then got no views, or other ones."""
    key = option.split('=')[0]
    lines = startup_error(test_tool, [tiny['config'], tiny['checkpoint'], '--work-dir',
                                      str(tmp_path), '--tta', '--cfg-options', option], capsys)
    assert lines == [
        f'tools/test.py: error: --cfg-options {key}={shown}: with --tta the test data go '
        "through tta_pipeline (the config's, or else the test pipeline with horizontal-flip "
        'TTA), which replaces test_dataloader.dataset.pipeline, and this would override it '
        'without a word. Set tta_pipeline instead, in the config or with --cfg-options '
        f'{suggestion}']
    assert not any(tmp_path.iterdir())  # refused before anything was built or written


def test_without_tta_the_test_pipeline_options_act(test_tool: Any, tiny: dict) -> None:
    """Only --tta refuses them: otherwise they set the test pipeline, as in mmpretrain."""
    replace, edit = (option for option, _, _ in PIPELINE_OPTIONS)
    cfg = merged(test_tool, tiny['config'], '--cfg-options', replace)
    assert cfg.test_dataloader.dataset.pipeline == ['PackInputs']
    cfg = merged(test_tool, tiny['config'], '--cfg-options', edit)
    assert cfg.test_dataloader.dataset.pipeline == [dict(type='PackInputs',
                                                         meta_keys=['img_path'])]


def test_tta_options_for_tta_model_and_tta_pipeline_act(test_tool: Any, tiny: dict) -> None:
    """They were merged after the model had been wrapped in tta_model and the test pipeline set
    to tta_pipeline, so they changed neither."""
    cfg = merged(test_tool, tiny['config'], '--tta', '--cfg-options',
                 'tta_model.type=mmpretrain.AverageClsScoreTTA',
                 'tta_pipeline.0.transforms.0.0.direction=vertical',
                 'test_dataloader.batch_size=2')
    assert cfg.model.type == 'mmpretrain.AverageClsScoreTTA'
    assert cfg.model.module.type == 'ImageClassifier'
    tta_step = cfg.test_dataloader.dataset.pipeline[0]
    assert tta_step.type == 'TestTimeAug'
    assert [dict(view) for view in tta_step.transforms[0]] == [
        dict(type='RandomFlip', prob=1., direction='vertical'), dict(type='RandomFlip', prob=0.)]
    assert cfg.test_dataloader.batch_size == 2  # the other options are merged as before
    cfg = merged(test_tool, tiny['config'], '--tta', '--cfg-options', 'tta_model.type=MyTTA')
    assert cfg.model.type == 'MyTTA' and cfg.model.module.type == 'ImageClassifier'
    # the TTA options are checked as the others: a typo is named with its close match
    with pytest.raises(StartupError, match=r"tta_pipeline\.0\.transfroms: .*'transfroms'.*"
                       r'close matches: transforms'):
        merged(test_tool, tiny['config'], '--tta', '--cfg-options',
               'tta_pipeline.0.transfroms=[]')
    with pytest.raises(StartupError, match=r'--tta: tta_pipeline must be a list of transforms, '
                       r"got 'none'"):
        merged(test_tool, tiny['config'], '--tta', '--cfg-options', 'tta_pipeline=none')


def test_with_tta_a_model_option_for_the_inner_model_says_where_it_is(test_tool: Any,
                                                                      tiny: dict) -> None:
    """--tta wraps the config's model before the other options are merged: model.head.topk is
    refused as a key of the TTA model, and the message now says the config's model is
    model.module (where the option acts)."""
    with pytest.raises(StartupError) as error:
        merged(test_tool, tiny['config'], '--tta', '--cfg-options', 'model.head.topk=1')
    assert str(error.value).endswith(
        "(with --tta, model is the TTA model 'mmpretrain.AverageClsScoreTTA' around the "
        "config's model, which is model.module: e.g. model.module.head.topk)")
    cfg = merged(test_tool, tiny['config'], '--tta', '--cfg-options', 'model.module.head.topk=1')
    assert cfg.model.module.head.topk == 1
    with pytest.raises(StartupError) as error:  # without --tta: the message as before
        merged(test_tool, tiny['config'], '--cfg-options', 'model.hed.topk=1')
    assert 'model.module' not in str(error.value)


def test_tta_options_without_tta_are_refused(test_tool: Any, tiny: dict) -> None:
    """Merged into a config that never uses them: no effect, so one start-up message."""
    with pytest.raises(StartupError) as error:
        merged(test_tool, tiny['config'], '--cfg-options', 'tta_model.type=MyTTA',
               'test_dataloader.batch_size=2')
    assert str(error.value) == ("--cfg-options tta_model.type='MyTTA': has no effect without "
                                '--tta (tta_model and tta_pipeline are used only for test-time '
                                'augmentation); add --tta, or drop it')
    cfg = merged(test_tool, tiny['config'], '--cfg-options', 'test_dataloader.batch_size=2')
    assert cfg.test_dataloader.batch_size == 2 and cfg.model.type == 'ImageClassifier'


# --------------------------------------------------------------------------- 2: --tta --show-dir


@needs_fashion_mnist
@pytest.mark.parametrize('first_view', ['horizontal', 'vertical'])
def test_tta_show_dir_draws_the_first_view_of_each_sample(
        test_tool: Any, tiny: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        first_view: str) -> None:
    """mmpretrain's VisualizationHook took the TTA batch's list of views for the images and
    failed on the first batch (permute of a 4-d tensor). Now each sample's first view is drawn
    (horizontal flip TTA: the mirrored image; its direction set through tta_pipeline) with the
    merged prediction."""
    drawn = []
    visualize_cls = UniversalVisualizer.visualize_cls

    def spy(self: UniversalVisualizer, image: np.ndarray, data_sample: Any,
            **kwargs: Any) -> np.ndarray:
        drawn.append((kwargs['name'], image.copy(), data_sample))
        return visualize_cls(self, image, data_sample, **kwargs)

    monkeypatch.setattr(UniversalVisualizer, 'visualize_cls', spy)
    vis = tmp_path / 'vis'
    test_tool.main([tiny['config'], tiny['checkpoint'], '--work-dir', str(tmp_path / 'work'),
                    '--tta', '--show-dir', str(vis), '--cfg-options',
                    f'tta_pipeline.0.transforms.0.0.direction={first_view}',
                    f'experiment_name={experiment_name("tta_show_dir")}'])
    names = [f'{i}_0.png' for i in range(NUM_IMAGES)]
    assert sorted(os.listdir(vis)) == names
    for name in names:
        assert cv2.imread(str(vis / name)).shape == (28, 28, 3)
    flip = np.fliplr if first_view == 'horizontal' else np.flipud
    images, _ = fashion_mnist_test_images(NUM_IMAGES)
    assert [name for name, _, _ in drawn] == [str(i) for i in range(NUM_IMAGES)]
    for i, (_, image, data_sample) in enumerate(drawn):
        assert image.shape == (28, 28, 1)
        np.testing.assert_array_equal(image[..., 0], flip(images[i]))
        assert data_sample.pred_score.shape == (10, )  # the average of the two views' scores
        assert torch.isclose(data_sample.pred_score.sum(), torch.tensor(1.))


# --------------------------------------------------------------------------- 3: --interval, ...


@pytest.mark.parametrize('flags, message', [
    (['--interval', '3'], '--interval 3 has no effect without --show or --show-dir (it picks '
     'the samples to visualize): add one of them, or drop --interval'),
    (['--interval', '1'], '--interval 1 has no effect without --show or --show-dir'),
    (['--wait-time', '0.5'], '--wait-time 0.5 has no effect without --show (it is how long '
     'each window stays open; --show-dir only writes files): add --show, or drop --wait-time'),
    (['--wait-time', '2', '--show-dir', 'vis'], '--wait-time 2 has no effect without --show'),
])
def test_interval_and_wait_time_need_the_flag_they_serve(
        test_tool: Any, flags: List[str], message: str, capsys: pytest.CaptureFixture) -> None:
    """They used to be accepted and do nothing; given with their default value too."""
    line = usage_error(test_tool, [FASHION, 'c.pth', *flags], capsys)
    assert line.startswith(f'tools/test.py: error: {message}'), line


def test_interval_and_wait_time_defaults_reach_the_hook(test_tool: Any, tiny: dict) -> None:
    args = test_tool.parse_args([FASHION, 'c.pth'])
    assert (args.interval, args.wait_time) == (1, 2.0)  # mmpretrain's defaults
    vis = merged(test_tool, tiny['config'], '--show-dir', 'v', '--interval', '3') \
        .default_hooks.visualization
    assert (vis.type, vis.enable, vis.out_dir, vis.interval, vis.wait_time, vis.show) == \
        ('VisualizationHook', True, 'v', 3, 2.0, False)
    vis = merged(test_tool, tiny['config'], '--show', '--wait-time', '0', '--tta') \
        .default_hooks.visualization
    assert (vis.type, vis.interval, vis.wait_time, vis.show) == \
        ('TTAVisualizationHook', 1, 0.0, True)


# --------------------------------------------------------------------------- 4: --out


def test_out_file_problem_names_why_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / 'file').write_text('')
    (tmp_path / 'dangling').symlink_to(tmp_path / 'gone')
    before = sorted(tmp_path.iterdir())
    assert out_file_problem(str(tmp_path), '--out') == f"--out '{tmp_path}': is a folder"
    assert out_file_problem('new/', '--x') == \
        "--x 'new/': ends in a path separator, so it names a folder"
    for path, blocker, kind in [(tmp_path / 'file' / 'p.pkl', tmp_path / 'file', 'a file'),
                                (tmp_path / 'file' / 'a' / 'b' / 'p.pkl', tmp_path / 'file',
                                 'a file'),
                                (tmp_path / 'dangling' / 'p.pkl', tmp_path / 'dangling',
                                 'a broken link')]:
        assert out_file_problem(str(path), '--out') == (
            f"--out '{path}': {blocker} is {kind}, not a folder, so the file cannot be created "
            'or written to')
    # writable: the file's folder, or the nearest existing one where folders are missing
    assert out_file_problem(str(tmp_path / 'p.pkl'), '--out') is None
    assert out_file_problem(str(tmp_path / 'a' / 'b' / 'p.pkl'), '--out') is None
    assert sorted(tmp_path.iterdir()) == before  # no folder, no probe left behind
    # /proc takes no new entry, even from root (to whom os.access says it is writable)
    for path in ('/proc/p.pkl', '/proc/a/b/p.pkl'):
        assert out_file_problem(path, '--out').startswith(
            f"--out '{path}': the folder /proc is not writable (")


def test_test_tool_out_problems_are_one_message(test_tool: Any, tiny: dict, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / 'file'
    blocker.write_text('')
    for out, why in [(blocker / 'sub' / 'p.pkl', f'{blocker} is a file, not a folder'),
                     ('/proc/p.pkl', 'the folder /proc is not writable (')]:
        lines = startup_error(test_tool, [tiny['config'], tiny['checkpoint'], '--work-dir',
                                          str(tmp_path / 'work'), '--out', str(out)], capsys)
        assert len(lines) == 1 and lines[0].startswith(
            f"tools/test.py: error: --out '{out}': {why}"), lines
        assert lines[0].endswith('cannot be created or written to; give a file in a writable '
                                 'folder')


def test_test_tool_show_dir_problems_are_one_message_before_the_test(
        test_tool: Any, tiny: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--show-dir is written into as the test runs: a file there, or a folder that cannot be
    made, was a traceback from the first drawing, after the model had been built and tested."""
    blocker = tmp_path / 'file'
    blocker.write_text('')
    for show_dir, why in [(blocker, 'is a file, not a folder'),
                          (blocker / 'vis', f'{blocker} is a file, not a folder, so the folder '
                           'cannot be created'),
                          ('/proc/vis', 'the folder /proc is not writable (')]:
        lines = startup_error(test_tool, [tiny['config'], tiny['checkpoint'], '--work-dir',
                                          str(tmp_path / 'work'), '--show-dir', str(show_dir)],
                              capsys)
        assert len(lines) == 1 and lines[0].startswith(
            f"tools/test.py: error: --show-dir '{show_dir}': {why}"), lines
        assert lines[0].endswith('; give a folder that can be written to'), lines
    assert folder_problem(str(tmp_path / 'new' / 'vis'), '--show-dir') is None
    assert folder_problem(str(tmp_path), '--show-dir') is None
    assert not (tmp_path / 'new').exists()  # nothing created


def test_pytorch2onnx_out_problems_are_one_message(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    """The tool's own check said yes to root for /proc (os.access)."""
    tool = load_tool('deployment/pytorch2onnx')
    for out in ('/proc/m.onnx', '/proc/a/m.onnx'):
        line = usage_error(tool, [FASHION, '--out', out], capsys)
        assert f"error: --out '{out}': the folder /proc is not writable (" in line
        assert line.endswith('so the file cannot be created or written to; give the .onnx file '
                             'to write, in a writable folder')
    assert tool.parse_args([FASHION, '--out', str(tmp_path / 'a' / 'm.onnx')]).out == \
        str(tmp_path / 'a' / 'm.onnx')
    assert not any(tmp_path.iterdir())  # checked, nothing created


@needs_fashion_mnist
def test_test_tool_writes_out_into_missing_folders(test_tool: Any, tiny: dict,
                                                   tmp_path: Path) -> None:
    """The check no longer creates --out's folders up front (a refused or failed run left them
    behind); writing the predictions at the end creates them."""
    out = tmp_path / 'a' / 'b' / 'preds.pkl'
    test_tool.main([tiny['config'], tiny['checkpoint'], '--work-dir', str(tmp_path / 'work'),
                    '--out', str(out), '--cfg-options',
                    f'experiment_name={experiment_name("out_folders")}'])
    with open(out, 'rb') as f:
        predictions = pickle.load(f)
    assert len(predictions) == NUM_IMAGES
    assert all(p['pred_score'].shape == (10, ) for p in predictions)
