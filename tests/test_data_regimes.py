"""The data regimes of arXiv:2104.07916: long-tailed CIFAR-10 (§4.4, Table "CIFAR10-LT") and
limited data (appendix, 50 images per class).

Fast tests: the per-class counts of CIFAR10-LT for every imbalance factor on a labels-only
dataset of 5,000 images per class, seeding and nesting, the errors, every shipped config built on
small CIFAR files in the real format, and the plot tool on work_dirs written in mmengine's
format. Slow tests: both wrappers on the real Fashion-MNIST through ``tools/train.py``.
"""
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List, Tuple

import numpy as np
import pytest
from helpers import (CONFIGS, FASHION_MNIST, REPO, TINY_PDC_MODEL, disk_full_at_fsync, load_tool,
                     runtime_tail, write_pickle)
from mmengine.config import Config
from mmengine.dataset import BaseDataset
from mmengine.logging import MMLogger
from mmpretrain.registry import DATASETS

from mmpoly.datasets import LimitedDataset, LongTailedDataset, long_tailed_counts

CIFAR10_CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse',
                   'ship', 'truck')

# CIFAR10-LT per-class counts, floor(5000 · IF^(−i/9)) (the CIFAR-LT generator of Cui et al.)
CIFAR10_LT_COUNTS: Dict[int, List[int]] = {
    200: [5000, 2775, 1540, 854, 474, 263, 146, 81, 45, 25],
    100: [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50],
    50: [5000, 3237, 2096, 1357, 878, 568, 368, 238, 154, 100],
    20: [5000, 3584, 2569, 1842, 1320, 946, 678, 486, 348, 250],
    10: [5000, 3871, 2997, 2320, 1796, 1391, 1077, 834, 645, 500],
}
CIFAR10_LT_TOTALS = {200: 11203, 100: 12406, 50: 13996, 20: 17023, 10: 20431}
# Table "CIFAR10-LT" rows and the limited-data comparison of the appendix: model config stems
LT_MODELS = ['resnet18', 'se_resnet18', 'pinet_resnet18', 'pdc-comp_resnet18',
             'pdc-param_resnet18']
LIMITED_MODELS = ['resnet18', 'se_resnet18', 'pinet_resnet18', 'pdc-comp_resnet18']
LT_CONFIGS = [f'{m}_1xb128_cifar10-lt-if{f}.py' for m in LT_MODELS for f in CIFAR10_LT_COUNTS]
LIMITED_CONFIGS = [f'{m}_1xb128_cifar10-50perclass.py' for m in LIMITED_MODELS]
DATA_BASES = [f'_base_/datasets/cifar10-lt-if{f}_bs128.py' for f in CIFAR10_LT_COUNTS] + \
    ['_base_/datasets/cifar10-50perclass_bs128.py']


class LabelsOnly(BaseDataset):
    """A classification dataset of labels only: ``labels`` is the (N,) label array."""

    METAINFO = {'classes': CIFAR10_CLASSES}

    def __init__(self, labels: np.ndarray, **kwargs) -> None:
        self._labels = np.asarray(labels)
        super().__init__(**kwargs)

    def load_data_list(self) -> List[dict]:
        return [{'gt_label': int(label), 'index': i} for i, label in enumerate(self._labels)]

    def get_cat_ids(self, idx: int) -> List[int]:
        return [int(self.get_data_info(idx)['gt_label'])]


def cifar10_like(per_class: int = 5000, seed: int = 0) -> LabelsOnly:
    """``per_class`` labels of each of 10 classes, shuffled (CIFAR-10's train set is 5000)."""
    labels = np.repeat(np.arange(10), per_class)
    np.random.default_rng(seed).shuffle(labels)
    return LabelsOnly(labels)


@pytest.fixture(scope='module')
def cifar10_labels() -> LabelsOnly:
    return cifar10_like()


def kept_per_class(wrapper) -> List[int]:
    return np.bincount(wrapper.get_gt_labels(), minlength=10).tolist()


# --------------------------------------------------------------------------- long-tailed


@pytest.mark.parametrize('imbalance_factor', list(CIFAR10_LT_COUNTS))
def test_cifar10_lt_counts(cifar10_labels: LabelsOnly, imbalance_factor: int) -> None:
    expected = CIFAR10_LT_COUNTS[imbalance_factor]
    assert long_tailed_counts(5000, 10, imbalance_factor) == expected
    lt = LongTailedDataset(dataset=cifar10_labels, imbalance_factor=imbalance_factor, seed=0)
    assert lt.class_counts == expected
    assert len(lt) == sum(expected) == CIFAR10_LT_TOTALS[imbalance_factor]
    assert kept_per_class(lt) == expected
    assert expected[0] / expected[-1] == pytest.approx(imbalance_factor, rel=1e-9)
    # every sample is served from the wrapped dataset, each at most once
    originals = [lt.get_data_info(i)['index'] for i in range(len(lt))]
    assert len(set(originals)) == len(lt)
    assert [lt.get_cat_ids(i)[0] for i in range(0, len(lt), 997)] == \
        [int(cifar10_labels._labels[o]) for o in originals[::997]]


def test_long_tailed_explicit_head_size_and_short_classes(cifar10_labels: LabelsOnly) -> None:
    lt = LongTailedDataset(dataset=cifar10_labels, imbalance_factor=10, max_images_per_class=300)
    assert lt.class_counts == [300, 232, 179, 139, 107, 83, 64, 50, 38, 30]
    # n_max above a class's size: that class keeps what it has (and the rest follow the profile)
    small = LabelsOnly(np.repeat(np.arange(10), [40, 5] + [40] * 8))
    lt = LongTailedDataset(dataset=small, imbalance_factor=10)
    assert lt.class_counts == [40, 5] + long_tailed_counts(40, 10, 10)[2:]
    assert LongTailedDataset(dataset=cifar10_labels, imbalance_factor=1).class_counts == \
        [5000] * 10


def test_long_tailed_logs_the_counts_and_keeps_metainfo(cifar10_labels: LabelsOnly) -> None:
    records: List[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        lt = LongTailedDataset(dataset=cifar10_labels, imbalance_factor=100, seed=3)
    finally:
        logger.removeHandler(handler)
    (message, ) = [r.getMessage() for r in records if 'LongTailedDataset' in r.getMessage()]
    assert 'imbalance_factor=100' in message and 'seed=3' in message
    assert 'keeps 12406 of 50000' in message
    counts = [int(c) for c in re.findall(r': (\d+)', message.split('per class:')[1])]
    assert counts == CIFAR10_LT_COUNTS[100]
    assert 'airplane: 5000' in message and 'truck: 50' in message
    assert lt.metainfo == cifar10_labels.metainfo
    lt.metainfo['classes'] = ()  # a copy: the wrapper's metainfo is unchanged
    assert lt.metainfo['classes'] == CIFAR10_CLASSES


def test_long_tailed_is_seeded_and_nested(cifar10_labels: LabelsOnly) -> None:
    def indices(factor: int, seed: int) -> set:
        return set(LongTailedDataset(dataset=cifar10_labels, imbalance_factor=factor,
                                     seed=seed).indices.tolist())

    assert indices(100, 0) == indices(100, 0)
    assert indices(100, 0) != indices(100, 1)
    assert indices(200, 0) < indices(100, 0) < indices(50, 0) < indices(20, 0) < indices(10, 0)
    # the tail classes are random draws, not the first images of the class
    lt = LongTailedDataset(dataset=cifar10_labels, imbalance_factor=100, seed=0)
    tail = [i for i in lt.indices if cifar10_labels._labels[i] == 9]
    first = np.flatnonzero(cifar10_labels._labels == 9)[:50].tolist()
    assert len(tail) == 50 and tail != first


def test_a_profile_that_empties_the_tail_is_refused(cifar10_labels: LabelsOnly) -> None:
    """floor(n_max / IF) = 0 images for the tail left the last classes out of training (no
    error: 99 head images at IF 100 kept 99 ... 1, 0), or divided by zero when a class was
    short; the smallest n_max that works is named."""
    assert long_tailed_counts(99, 10, 100)[-1] == 0 and long_tailed_counts(100, 10, 100)[-1] == 1
    with pytest.raises(ValueError, match=(
            r'^LongTailedDataset: imbalance_factor=100 with max_images_per_class=99 gives the '
            r'tail class floor\(99 / 100\) = 0 images: the last classes would be left out of '
            r'training, not made rare\. Give max_images_per_class >= 100 or imbalance_factor '
            r'<= 99$')):
        LongTailedDataset(dataset=cifar10_labels, imbalance_factor=100, max_images_per_class=99,
                          lazy_init=True)  # refused before any data is read
    assert LongTailedDataset(dataset=cifar10_labels, imbalance_factor=100,
                             max_images_per_class=100).class_counts[-1] == 1
    small = LabelsOnly(np.repeat(np.arange(10), 150))  # n_max None: the largest class, 150
    with pytest.raises(ValueError, match=r'max_images_per_class=150 \(None: the largest class '
                       r'of the wrapped dataset\) gives the tail class floor\(150 / 200\) = 0'):
        LongTailedDataset(dataset=small, imbalance_factor=200)


@pytest.mark.parametrize('bad', [0.5, 0, -100, float('nan'), float('inf'), '100', True, None])
def test_bad_imbalance_factor(cifar10_labels: LabelsOnly, bad: object) -> None:
    with pytest.raises(ValueError) as info:
        LongTailedDataset(dataset=cifar10_labels, imbalance_factor=bad)
    message = str(info.value)
    assert 'imbalance_factor' in message and repr(bad) in message and '>= 1' in message


def test_bad_seed_and_dataset(cifar10_labels: LabelsOnly) -> None:
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0, got -1"):
        LongTailedDataset(dataset=cifar10_labels, imbalance_factor=10, seed=-1)
    with pytest.raises(ValueError, match=r"max_images_per_class .* got 0"):
        LongTailedDataset(dataset=cifar10_labels, imbalance_factor=10, max_images_per_class=0)
    with pytest.raises(TypeError, match='dataset must be'):
        LimitedDataset(dataset=[1, 2, 3], images_per_class=1)


# --------------------------------------------------------------------------- limited data


def test_limited_keeps_k_per_class_seeded_and_nested(cifar10_labels: LabelsOnly) -> None:
    def subset(k: int, seed: int = 0) -> LimitedDataset:
        return LimitedDataset(dataset=cifar10_labels, images_per_class=k, seed=seed)

    fifty = subset(50)
    assert len(fifty) == 500 and fifty.class_counts == [50] * 10
    assert kept_per_class(fifty) == [50] * 10
    assert fifty.metainfo == cifar10_labels.metainfo
    sets = {k: set(subset(k).indices.tolist()) for k in (1, 50, 500, 5000)}
    assert sets[1] < sets[50] < sets[500] < sets[5000] == set(range(50000))
    assert set(subset(50).indices.tolist()) == sets[50]
    assert set(subset(50, seed=1).indices.tolist()) != sets[50]


@pytest.mark.parametrize('bad', [0, -5, 2.5, '50', None])
def test_limited_bad_images_per_class(cifar10_labels: LabelsOnly, bad: object) -> None:
    with pytest.raises(ValueError, match=f"images_per_class must be an integer >= 1, got "
                       f"{re.escape(repr(bad))}"):
        LimitedDataset(dataset=cifar10_labels, images_per_class=bad)


def test_limited_above_the_smallest_class_names_it() -> None:
    uneven = LabelsOnly(np.repeat(np.arange(10), [60] * 3 + [42] + [60] * 6))
    assert LimitedDataset(dataset=uneven, images_per_class=42).class_counts == [42] * 10
    with pytest.raises(ValueError) as info:
        LimitedDataset(dataset=uneven, images_per_class=43)
    message = str(info.value)
    assert 'images_per_class=43' in message
    assert 'smallest class, 42 images' in message and "class 3 'cat'" in message


# --------------------------------------------------------------------------- configs


def make_balanced_cifar10(root: Path, train_per_class: int = 60,
                          test_per_class: int = 4) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """``root/cifar-10-batches-py`` in the real format (5 train batches, the test batch,
    batches.meta) with ``train_per_class`` / ``test_per_class`` images of every class.

    Returns: split -> (images N×3072 uint8, labels (N,)).
    """
    rng = np.random.default_rng(0)
    folder = root / 'cifar-10-batches-py'
    folder.mkdir(parents=True)
    out = {}
    for split, names, per_class in (('train', [f'data_batch_{i}' for i in range(1, 6)],
                                     train_per_class), ('test', ['test_batch'], test_per_class)):
        labels = np.repeat(np.arange(10), per_class)
        rng.shuffle(labels)
        data = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
        for name, part in zip(names, np.array_split(np.arange(len(labels)), len(names))):
            write_pickle(folder / name, {
                'batch_label': name, 'labels': labels[part].tolist(), 'data': data[part],
                'filenames': [f'{name}_{i}.png' for i in range(len(part))]})
        out[split] = (data, labels)
    write_pickle(folder / 'batches.meta', {'label_names': list(CIFAR10_CLASSES),
                                           'num_cases_per_batch': 1, 'num_vis': 3072})
    return out


#: Images of each class in the generated training batches: 200, so that every long-tailed
#: config (IF up to 200) keeps at least one image of its tail class.
TRAIN_PER_CLASS = 200


@pytest.fixture(scope='module')
def balanced_cifar10(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp('cifar10')
    make_balanced_cifar10(root, train_per_class=TRAIN_PER_CLASS)
    return root


@pytest.fixture(scope='module')
def plain_cifar10() -> Dict[str, dict]:
    """The loaders of the balanced CIFAR-10 data base."""
    cfg = Config.fromfile(str(CONFIGS / '_base_/datasets/cifar10_bs128.py'))
    return {loader: cfg[loader].to_dict() for loader in ('val_dataloader', 'test_dataloader')}


def _point_at(dataset_cfg: dict, root: Path) -> dict:
    """A copy of a dataset config whose innermost dataset reads ``root``."""
    cfg = dataset_cfg.copy()
    leaf = cfg
    while 'dataset' in leaf:
        leaf['dataset'] = leaf['dataset'].copy()
        leaf = leaf['dataset']
    leaf.update(data_root=str(root), verify_checksums=False)
    return cfg


def test_every_data_regime_row_has_a_config() -> None:
    shipped = {p.name for p in CONFIGS.glob('*_cifar10-lt-if*.py')} | \
        {p.name for p in CONFIGS.glob('*_cifar10-50perclass.py')}
    assert shipped == set(LT_CONFIGS) | set(LIMITED_CONFIGS)
    assert len(LT_CONFIGS) == 25 and all((CONFIGS / b).is_file() for b in DATA_BASES)


@pytest.mark.parametrize('config', LT_CONFIGS + LIMITED_CONFIGS + DATA_BASES)
def test_config_builds_on_cifar10_files(config: str, balanced_cifar10: Path,
                                        plain_cifar10: Dict[str, dict]) -> None:
    cfg = Config.fromfile(str(CONFIGS / config))
    train = cfg.train_dataloader.dataset
    if 'lt-if' in config:
        factor = int(re.search(r'lt-if(\d+)', config).group(1))
        assert train.type == 'LongTailedDataset' and train.imbalance_factor == factor
        expected = long_tailed_counts(TRAIN_PER_CLASS, 10, factor)
    else:
        assert train.type == 'LimitedDataset' and train.images_per_class == 50
        expected = [50] * 10
    assert train.seed == 0 and train.dataset.type == 'LocalCIFAR10'
    assert train.dataset.split == 'train'
    dataset = DATASETS.build(_point_at(train, balanced_cifar10))
    assert dataset.class_counts == expected and len(dataset) == sum(expected)
    assert kept_per_class(dataset) == expected
    assert len(dataset.metainfo['classes']) == 10
    sample = dataset[0]  # through the training pipeline: crop 32 (pad 4), flip, pack
    assert tuple(sample['inputs'].shape) == (3, 32, 32)
    assert int(sample['data_samples'].gt_label) == dataset.get_gt_labels()[0]
    # the test split stays the plain, balanced CIFAR-10 test set
    for loader in ('val_dataloader', 'test_dataloader'):
        val = cfg[loader].dataset
        assert val.type == 'LocalCIFAR10' and val.split == 'test'
        assert cfg[loader].to_dict() == plain_cifar10[loader]
        if config.startswith('_base_'):  # built once per data base (each build takes 0.3 s)
            built = DATASETS.build(_point_at(val, balanced_cifar10))
            assert np.bincount(built.get_gt_labels()).tolist() == [4] * 10
    if config.startswith('_base_'):
        return
    # the models and the recipe are the paper's CIFAR-10 ones, unchanged
    model = config.split('_1xb128_')[0]
    reference = CONFIGS / f'{model}_1xb128_cifar10.py'
    if not reference.is_file():  # PDC-param has no T-C10 row: its T-C100 config, 10 classes
        reference = CONFIGS / f'{model}_1xb128_cifar100.py'
    ref = Config.fromfile(str(reference))
    ref.model.head.num_classes = 10
    ref.model.head.topk = cfg.model.head.topk
    assert cfg.model.to_dict() == ref.model.to_dict()
    assert cfg.optim_wrapper.optimizer.lr == 0.1 and cfg.train_cfg.max_epochs == 120
    assert cfg.param_scheduler.milestones == [40, 60, 80, 100]
    assert cfg.train_dataloader.batch_size == 128


# --------------------------------------------------------------------------- plot tool


def load_plot_tool() -> ModuleType:
    return load_tool('analysis_tools/plot_data_regimes')


def write_work_dir(root: Path, config: str, accuracies: List[float],
                   timestamp: str = '20260101_120000') -> Path:
    """A finished work_dir as tools/train.py leaves it: the dumped config and
    ``<timestamp>/vis_data/scalars.json`` with train lines and one val line per epoch."""
    work_dir = root / Path(config).stem
    vis = work_dir / timestamp / 'vis_data'
    vis.mkdir(parents=True)
    Config.fromfile(str(CONFIGS / config)).dump(str(work_dir / config))
    lines = []
    for epoch, accuracy in enumerate(accuracies, start=1):
        lines.append({'lr': 0.1, 'data_time': 0.01, 'loss': 2.0 / epoch, 'time': 0.2,
                      'epoch': epoch, 'iter': 10 * epoch, 'memory': 0, 'step': 10 * epoch})
        lines.append({'accuracy/top1': accuracy, 'data_time': 0.005, 'time': 0.1,
                      'step': epoch})
    (vis / 'scalars.json').write_text(''.join(json.dumps(line) + '\n' for line in lines))
    return work_dir


def test_plot_tool_groups_runs_and_draws_the_lines(tmp_path: Path) -> None:
    tool = load_plot_tool()
    work_dirs = tmp_path / 'work_dirs'
    expected_lt: Dict[str, Tuple[List[float], List[float]]] = {}
    for m, model in enumerate(['resnet18', 'pdc-comp_resnet18']):
        xs, ys = [], []
        for f, factor in enumerate(sorted(CIFAR10_LT_COUNTS)):
            accuracy = 60.0 + 5 * f + m
            write_work_dir(work_dirs, f'{model}_1xb128_cifar10-lt-if{factor}.py',
                           [10.0, accuracy])  # the last validation counts
            xs.append(float(factor))
            ys.append(accuracy)
        expected_lt[f'{model}'] = (xs, ys)
    limited = write_work_dir(work_dirs, 'se_resnet18_1xb128_cifar10-50perclass.py', [20.0, 35.5])
    # an older run of the same work_dir is ignored: the newest timestamp with a metric counts
    old = limited / '20250101_000000' / 'vis_data'
    old.mkdir(parents=True)
    (old / 'scalars.json').write_text(json.dumps({'accuracy/top1': 99.0, 'step': 1}) + '\n')
    # a plain CIFAR-10 run and an unfinished run are skipped
    write_work_dir(work_dirs, 'resnet18_1xb128_cifar10.py', [90.0])
    unfinished = write_work_dir(work_dirs, 'pinet_resnet18_1xb128_cifar10-lt-if10.py', [])

    skipped: List[str] = []
    runs = tool.collect_runs([str(work_dirs)], skipped=skipped)
    assert len(runs) == 11 and len(skipped) == 2
    assert any(str(unfinished) in s and 'accuracy/top1' in s for s in skipped)
    out = tmp_path / 'plots' / 'regimes.png'
    drawn = tool.plot_data_regimes(runs, str(out))
    assert drawn['imbalance_factor'] == expected_lt
    assert drawn['images_per_class'] == {'se_resnet18': ([50.0], [35.5])}
    assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and out.stat().st_size > 10_000

    # the command line, as a user runs it
    cli_out = tmp_path / 'cli.png'
    proc = subprocess.run([sys.executable, str(REPO / 'tools/analysis_tools/plot_data_regimes.py'),
                           str(work_dirs), '--out', str(cli_out)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert 'images_per_class se_resnet18: 50 -> 35.50' in proc.stdout
    assert 'imbalance_factor pdc-comp_resnet18: 10 -> 61.00, 20 -> 66.00' in proc.stdout
    assert cli_out.is_file()
    empty = subprocess.run([sys.executable, str(REPO / 'tools/analysis_tools/plot_data_regimes.py'),
                            str(tmp_path / 'plots')], capture_output=True, text=True, timeout=120)
    assert empty.returncode == 1 and 'no finished run' in empty.stderr


def test_plot_tool_averages_repeated_runs(tmp_path: Path) -> None:
    tool = load_plot_tool()
    runs = [tool.Run('a', 'resnet18', 'images_per_class', 50.0, 30.0),
            tool.Run('b', 'resnet18', 'images_per_class', 50.0, 40.0),
            tool.Run('c', 'resnet18', 'images_per_class', 500.0, 60.0)]
    drawn = tool.plot_data_regimes(runs, str(tmp_path / 'p.png'))
    assert drawn == {'imbalance_factor': {},
                     'images_per_class': {'resnet18': ([50.0, 500.0], [35.0, 60.0])}}


def test_plot_tool_writes_the_image_complete_or_not_at_all(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed write leaves the previous image and no temporary file."""
    tool = load_plot_tool()
    runs = [tool.Run('a', 'resnet18', 'images_per_class', 50.0, 30.0)]
    out = tmp_path / 'p.png'
    out.write_bytes(b'previous')

    disk_full_at_fsync(monkeypatch, min_bytes=10_000)  # the whole image is written
    with pytest.raises(OSError, match='No space left'):
        tool.plot_data_regimes(runs, str(out))
    assert out.read_bytes() == b'previous' and [p.name for p in tmp_path.iterdir()] == ['p.png']
    monkeypatch.undo()
    tool.plot_data_regimes(runs, str(out))
    assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


# --------------------------------------------------------------------------- real runs

TRAIN_CONFIG = '''\
# A small self-contained config: a tiny PDC ResNet on a {what} Fashion-MNIST training set.
default_scope = 'mmpretrain'
custom_imports = dict(imports=['mmpoly.models', 'mmpoly.datasets', 'mmpoly.engine'],
                      allow_failed_imports=False)
# as configs/_base_/default_runtime.py: the BN running statistics are recomputed before the
# validation (with 500 images and 8 epochs they lag far behind the weights: eval-mode top-1
# fell to chance without it), and a non-finite validation is an error
custom_hooks = [dict(type='RecomputeBNHook', num_samples=2048),
                dict(type='NonFiniteValidationHook')]

''' + TINY_PDC_MODEL + '''
pipeline = [dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=32, num_workers=0, persistent_workers=False,
    dataset=dict({wrapper}, seed=0,
                 dataset=dict(type='LocalFashionMNIST', split='train', pipeline=pipeline)),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=250, num_workers=0, persistent_workers=False,
    dataset=dict(type='LocalFashionMNIST', split='test', indices=1000, pipeline=pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=1e-4))
param_scheduler = dict(type='MultiStepLR', by_epoch=True, milestones=[100], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs={epochs}, val_interval={epochs})
val_cfg = dict()
test_cfg = dict()

''' + runtime_tail('{epochs}')

REAL_RUNS = {  # config name -> (wrapper, epochs, expected per-class counts)
    'tiny-pdc_resnet_1xb32_fashion-mnist-lt-if10': (
        "type='LongTailedDataset', imbalance_factor=10, max_images_per_class=300", 3,
        [300, 232, 179, 139, 107, 83, 64, 50, 38, 30]),
    'tiny-pdc_resnet_1xb32_fashion-mnist-50perclass': (
        "type='LimitedDataset', images_per_class=50", 8, [50] * 10),
}


def train_real(tmp_path: Path, name: str) -> Tuple[Path, subprocess.CompletedProcess]:
    wrapper, epochs, _ = REAL_RUNS[name]
    config = tmp_path / f'{name}.py'
    config.write_text(TRAIN_CONFIG.format(what=name.split('fashion-mnist-')[1], wrapper=wrapper,
                                          epochs=epochs))
    work_dir = tmp_path / 'work_dirs' / name
    proc = subprocess.run([sys.executable, str(REPO / 'tools' / 'train.py'), str(config),
                           '--work-dir', str(work_dir)], cwd=REPO, text=True,
                          # one thread: ~3x faster for this tiny model on a shared 2-core box
                          env={**os.environ, 'OMP_NUM_THREADS': '1'},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return work_dir, proc


def train_losses(work_dir: Path) -> np.ndarray:
    (scalars, ) = work_dir.glob('*/vis_data/scalars.json')
    records = [json.loads(line) for line in scalars.read_text().splitlines() if line.strip()]
    return np.array([r['loss'] for r in records if 'loss' in r])


@pytest.mark.slow
@pytest.mark.skipif(not (FASHION_MNIST / 'train-images-idx3-ubyte.gz').is_file(),
                    reason='tools/setup_env.sh installs Fashion-MNIST (dataset-fashion-mnist)')
@pytest.mark.parametrize('name', list(REAL_RUNS))
def test_real_fashion_mnist_run(tmp_path: Path, name: str) -> None:
    """IF 10 (head class 300 images) or 50 images per class of the real Fashion-MNIST: trains
    through tools/train.py with a falling loss, logs its per-class counts, and the plot tool
    reads the work_dir."""
    _, _, counts = REAL_RUNS[name]
    work_dir, proc = train_real(tmp_path, name)
    per_class = re.search(r'keeps (\d+) of 60000 images; per class: (.*)', proc.stdout)
    assert per_class, proc.stdout[-3000:]
    assert int(per_class.group(1)) == sum(counts)
    assert [int(c) for c in re.findall(r': (\d+)', per_class.group(2))] == counts
    losses = train_losses(work_dir)
    assert len(losses) >= 6 and np.isfinite(losses).all()
    assert losses[-3:].mean() < 0.75 * losses[:3].mean(), losses

    tool = load_plot_tool()
    drawn = tool.plot_data_regimes(tool.collect_runs([str(work_dir)]),
                                   str(tmp_path / 'regimes.png'))
    regime = 'imbalance_factor' if 'lt-if' in name else 'images_per_class'
    ((xs, ys), ) = drawn[regime].values()
    assert xs == [10.0 if regime == 'imbalance_factor' else 50.0]
    assert 10.0 < ys[0] <= 100.0  # top-1 in %, above chance on 1,000 test images
