"""Tests of the dataset loaders and dataset configs on small files written in the real formats.

CIFAR and ImageNet cannot be downloaded here, so each test writes a few images in the on-disk
format the loaders read (CIFAR "python version" pickles, idx-ubyte files, an ImageNet folder with
``meta/*.txt``) and checks that they come back exactly. The real Fashion-MNIST files of Debian's
``dataset-fashion-mnist`` package (installed by tools/setup_env.sh) are read where present.
"""
import gzip
import struct
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import cv2
import numpy as np
import pytest
import torch
from helpers import REPO, write_pickle
from mmengine.config import Config, ConfigDict
from mmengine.dataset import pseudo_collate
from mmpretrain.registry import DATASETS, MODELS

from mmpoly.datasets import LocalCIFAR10, LocalCIFAR100, LocalFashionMNIST

DATASET_CONFIGS = sorted((REPO / 'configs' / '_base_' / 'datasets').glob('*.py'))
IMAGENET_BASE = 'mmpretrain::_base_/datasets/imagenet_bs32.py'
DEBIAN_FASHION_MNIST = Path('/usr/share/datasets/fashion-mnist')

# --------------------------------------------------------------------------- data writers

CIFAR10_FILES = {'train': [f'data_batch_{i}' for i in range(1, 6)], 'test': ['test_batch']}
CIFAR100_FILES = {'train': ['train'], 'test': ['test']}


def make_cifar10(root: Path, per_file: int = 3, seed: int = 0) -> Dict[str, Tuple[np.ndarray,
                                                                                  np.ndarray]]:
    """``root/cifar-10-batches-py`` with 5 train batches, the test batch and batches.meta.

    Returns: split -> (images N×3072 uint8 in the file's CHW-flattened order, labels).
    """
    rng = np.random.default_rng(seed)
    folder = root / 'cifar-10-batches-py'
    folder.mkdir(parents=True)
    out = {}
    for split, names in CIFAR10_FILES.items():
        datas, labels = [], []
        for name in names:
            data = rng.integers(0, 256, size=(per_file, 3072), dtype=np.uint8)
            label = rng.integers(0, 10, size=per_file).tolist()
            write_pickle(folder / name, {'batch_label': f'{name} of 5', 'labels': label,
                                         'data': data, 'filenames': [f'{name}_{i}.png'
                                                                     for i in range(per_file)]})
            datas.append(data)
            labels += label
        out[split] = (np.concatenate(datas), np.array(labels))
    write_pickle(folder / 'batches.meta', {
        'label_names': ['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse',
                        'ship', 'truck'],
        'num_cases_per_batch': per_file, 'num_vis': 3072})
    return out


def make_cifar100(root: Path, count: int = 6, seed: int = 1) -> Dict[str, Tuple[np.ndarray,
                                                                                np.ndarray]]:
    """``root/cifar-100-python`` with train, test (fine and coarse labels) and meta."""
    rng = np.random.default_rng(seed)
    folder = root / 'cifar-100-python'
    folder.mkdir(parents=True)
    out = {}
    for split, (name, ) in CIFAR100_FILES.items():
        data = rng.integers(0, 256, size=(count, 3072), dtype=np.uint8)
        fine = rng.integers(0, 100, size=count).tolist()
        write_pickle(folder / name, {'filenames': [f'{i}.png' for i in range(count)],
                                     'batch_label': f'{split} batch', 'fine_labels': fine,
                                     'coarse_labels': [f // 5 for f in fine], 'data': data})
        out[split] = (data, np.array(fine))
    write_pickle(folder / 'meta', {'fine_label_names': [f'class{i}' for i in range(100)],
                                   'coarse_label_names': [f'super{i}' for i in range(20)]})
    return out


FASHION_MNIST_FILES = {  # split: (images, labels), as the files are named
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}


def _idx_bytes(array: np.ndarray) -> bytes:
    """An idx-ubyte file: magic 0x0000 08 NDIM, big-endian int32 dims, then the uint8 data."""
    header = struct.pack('>BBBB', 0, 0, 0x08, array.ndim)
    header += struct.pack(f'>{array.ndim}I', *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def make_fashion_mnist(root: Path, gz: bool = True, counts: Tuple[int, int] = (6, 4),
                       seed: int = 2) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """The four idx files, gzip-compressed (``*.gz``, as Debian ships them) or extracted.

    Train and test hold different counts and value ranges, so a mixed-up split shows."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for (split, (images_name, labels_name)), count, offset in zip(
            FASHION_MNIST_FILES.items(), counts, (0, 128)):
        images = rng.integers(0, 128, size=(count, 28, 28), dtype=np.uint8) + offset
        labels = rng.integers(0, 10, size=count, dtype=np.uint8)
        for name, array in ((images_name, images), (labels_name, labels)):
            if gz:
                (root / f'{name}.gz').write_bytes(gzip.compress(_idx_bytes(array)))
            else:
                (root / name).write_bytes(_idx_bytes(array))
        out[split] = (images.astype(np.uint8), labels)
    return out


IMAGENET_CLASSES = {'n01440764': 0, 'n01443537': 1}  # tench, goldfish: ImageNet labels 0, 1
IMAGENET_SIZES = {'train': [(300, 400), (260, 240)], 'val': [(500, 375), (256, 300)]}  # (H, W)


def make_imagenet(root: Path, seed: int = 3) -> Dict[str, List[Tuple[str, int]]]:
    """``train/<wnid>/<wnid>_<i>.JPEG``, ``val/...`` and ``meta/{train,val}.txt``
    ("relative/path label" lines), mmpretrain's ImageNet layout with annotation files."""
    rng = np.random.default_rng(seed)
    (root / 'meta').mkdir(parents=True)
    out = {}
    for split, sizes in IMAGENET_SIZES.items():
        entries = []
        for i, (wnid, label) in enumerate(IMAGENET_CLASSES.items()):
            rel = f'{wnid}/{wnid}_{i}.JPEG' if split == 'train' else \
                f'{wnid}/ILSVRC2012_val_{i:08d}.JPEG'
            (root / split / wnid).mkdir(parents=True, exist_ok=True)
            image = rng.integers(0, 256, size=(*sizes[i], 3), dtype=np.uint8)
            assert cv2.imwrite(str(root / split / rel), image)
            entries.append((rel, label))
        (root / 'meta' / f'{split}.txt').write_text(
            ''.join(f'{rel} {label}\n' for rel, label in entries))
        out[split] = entries
    return out


def _hwc(flat: np.ndarray) -> np.ndarray:
    """CIFAR's row layout (1024 R, 1024 G, 1024 B, each row-major 32×32) as N×32×32×3."""
    return flat.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


# --------------------------------------------------------------------------- CIFAR


@pytest.mark.parametrize('split', ['train', 'test'])
def test_local_cifar10_round_trips_images_and_labels(tmp_path: Path, split: str) -> None:
    written = make_cifar10(tmp_path)
    dataset = LocalCIFAR10(data_root=str(tmp_path), split=split, verify_checksums=False)
    images, labels = written[split]
    assert len(dataset) == len(labels) == (15 if split == 'train' else 3)
    expected = _hwc(images)
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        assert info['img'].shape == (32, 32, 3) and info['img'].dtype == np.uint8
        np.testing.assert_array_equal(info['img'], expected[i])
        assert info['gt_label'] == labels[i]
    # the first pixel of an image is (R, G, B) = bytes 0, 1024, 2048 of its row
    assert tuple(dataset.get_data_info(0)['img'][0, 0]) == tuple(images[0, [0, 1024, 2048]])
    assert len(dataset.metainfo['classes']) == 10


@pytest.mark.parametrize('split', ['train', 'test'])
def test_local_cifar100_round_trips_images_and_fine_labels(tmp_path: Path, split: str) -> None:
    written = make_cifar100(tmp_path)
    dataset = LocalCIFAR100(data_root=str(tmp_path), split=split, verify_checksums=False)
    images, labels = written[split]
    assert len(dataset) == len(labels)
    for i, expected in enumerate(_hwc(images)):
        np.testing.assert_array_equal(dataset.get_data_info(i)['img'], expected)
        assert dataset.get_data_info(i)['gt_label'] == labels[i]
    assert len(dataset.metainfo['classes']) == 100


@pytest.mark.parametrize('cls, make', [(LocalCIFAR10, make_cifar10),
                                       (LocalCIFAR100, make_cifar100)])
def test_local_cifar_checksums_reject_made_up_files(tmp_path: Path, cls: type,
                                                    make: Callable) -> None:
    make(tmp_path)
    with pytest.raises(ValueError, match='md5') as info:
        cls(data_root=str(tmp_path), split='train', verify_checksums=True)
    assert 'verify_checksums=False' in str(info.value)


@pytest.mark.parametrize('cls, archive', [(LocalCIFAR10, 'cifar-10-python.tar.gz'),
                                          (LocalCIFAR100, 'cifar-100-python.tar.gz')])
def test_local_cifar_missing_root_names_path_and_source(tmp_path: Path, cls: type,
                                                        archive: str) -> None:
    root = tmp_path / 'no_such_dir'
    with pytest.raises(FileNotFoundError) as info:
        cls(data_root=str(root), split='train', verify_checksums=False)
    message = str(info.value)
    assert str(root) in message and 'does not exist' in message
    assert archive in message and 'cs.toronto.edu' in message


def test_local_cifar_missing_file_is_named(tmp_path: Path) -> None:
    make_cifar10(tmp_path)
    (tmp_path / 'cifar-10-batches-py' / 'test_batch').unlink()
    with pytest.raises(FileNotFoundError, match='test_batch'):
        LocalCIFAR10(data_root=str(tmp_path), split='train', verify_checksums=False)


# --------------------------------------------------------------------------- Fashion-MNIST


@pytest.mark.parametrize('gz', [True, False], ids=['gz', 'extracted'])
def test_local_fashion_mnist_reads_the_split(tmp_path: Path, gz: bool) -> None:
    written = make_fashion_mnist(tmp_path, gz=gz)
    for split in ('train', 'test'):
        # by split alone: mmpretrain's own FashionMNIST would need test_mode=True for the
        # t10k files
        dataset = LocalFashionMNIST(data_root=str(tmp_path), split=split)
        images, labels = written[split]
        assert len(dataset) == len(labels)
        for i in range(len(dataset)):
            info = dataset.get_data_info(i)
            np.testing.assert_array_equal(info['img'], images[i])
            assert info['gt_label'] == labels[i]
    assert len(LocalFashionMNIST(data_root=str(tmp_path), split='test')) == 4


def test_local_fashion_mnist_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        LocalFashionMNIST(data_root=str(tmp_path / 'none'), split='train')
    assert str(tmp_path / 'none') in str(info.value)
    assert 'dataset-fashion-mnist' in str(info.value)
    make_fashion_mnist(tmp_path / 'partial')
    (tmp_path / 'partial' / 't10k-labels-idx1-ubyte.gz').unlink()
    with pytest.raises(FileNotFoundError, match='t10k-labels-idx1-ubyte'):
        LocalFashionMNIST(data_root=str(tmp_path / 'partial'), split='test')


@pytest.mark.skipif(not (DEBIAN_FASHION_MNIST / 'train-images-idx3-ubyte.gz').is_file(),
                    reason=f'{DEBIAN_FASHION_MNIST} missing (tools/setup_env.sh installs the '
                    'Debian package dataset-fashion-mnist)')
def test_debian_fashion_mnist_files() -> None:
    for split, count in (('train', 60000), ('test', 10000)):
        # the default data_root is Debian's; lazy_init + load_data_list: the loader without
        # mmengine's serialisation of 70,000 samples
        dataset = LocalFashionMNIST(split=split, lazy_init=True)
        data_list = dataset.load_data_list()
        assert len(data_list) == count
        labels = np.array([info['gt_label'] for info in data_list])
        assert labels.min() == 0 and labels.max() == 9
        assert np.bincount(labels).tolist() == [count // 10] * 10  # balanced classes
        assert data_list[0]['img'].shape == (28, 28) and data_list[0]['img'].dtype == np.uint8


# --------------------------------------------------------------------------- configs


@pytest.fixture
def cached_mim_metafiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read each metafile of an installed package once per test.

    mmengine resolves every ``mmpretrain::`` base config by loading all of mmpretrain's
    metafiles (~85 YAML files, ~0.35 s) each time; the ImageNet configs have two such bases.
    """
    import mmengine.config.utils as config_utils
    if not hasattr(config_utils, 'load'):
        return
    load, cache = config_utils.load, {}

    def cached_load(path, *args, **kwargs):
        key = (str(path), args, tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = load(path, *args, **kwargs)
        return cache[key]

    monkeypatch.setattr(config_utils, 'load', cached_load)


DataMaker = Callable[[Path], object]


def make_speech_commands(root: Path, per_split: int = 1, seed: int = 5) -> None:
    """Speech Commands v0.02's layout: ``<word>/<speaker>_nohash_<i>.wav`` (16 kHz mono int16,
    1 s), ``validation_list.txt`` / ``testing_list.txt`` and ``_background_noise_/``."""
    from scipy.io import wavfile

    from mmpoly.datasets import SPEECH_COMMANDS_WORDS
    rng = np.random.default_rng(seed)
    rate, t = 16000, np.arange(16000) / 16000
    lists: Dict[str, List[str]] = {'validation': [], 'testing': []}
    for k, word in enumerate(SPEECH_COMMANDS_WORDS):
        (root / word).mkdir(parents=True)
        for split in ('train', 'validation', 'testing'):
            for i in range(per_split):
                rel = f'{word}/{split}{i:04x}_nohash_0.wav'
                tone = np.sin(2 * np.pi * (200 + 40 * k) * t) * np.hanning(len(t))
                wave = 0.3 * tone + 0.01 * rng.standard_normal(len(t))
                wavfile.write(root / rel, rate, (wave * 32767).astype(np.int16))
                if split != 'train':
                    lists[split].append(rel)
    for split, rels in lists.items():
        (root / f'{split}_list.txt').write_text(''.join(f'{rel}\n' for rel in rels))
    (root / '_background_noise_').mkdir()
    noise = 0.1 * rng.standard_normal(3 * rate)
    wavfile.write(root / '_background_noise_' / 'white_noise.wav', rate,
                  (noise * 32767).astype(np.int16))


DATA_MAKERS: Dict[str, DataMaker] = {  # dataset type -> writer of data under a data_root
    'LocalCIFAR10': make_cifar10,
    'LocalCIFAR100': make_cifar100,
    'LocalFashionMNIST': make_fashion_mnist,
    'ImageNet': make_imagenet,
    'LocalImageNet': make_imagenet,
    'SpeechCommands': make_speech_commands,
}
EXTRA_ARGS = {'LocalCIFAR10': dict(verify_checksums=False),
              'LocalCIFAR100': dict(verify_checksums=False)}


def _leaf_dataset(cfg: ConfigDict) -> ConfigDict:
    """The dataset a wrapper (RepeatDataset, ClassBalancedDataset, ...) holds."""
    while 'dataset' in cfg:
        cfg = cfg['dataset']
    return cfg


# Per-class subset wrappers need many images per class; tests/test_data_regimes.py builds them on
# suitable CIFAR files. Here their wrapped dataset is checked.
SUBSET_WRAPPERS = ('LongTailedDataset', 'LimitedDataset')


def _dataset_cfg(loader_cfg: ConfigDict, data_root: Path) -> ConfigDict:
    """The loader's dataset config with data_root pointed at ``data_root`` (a per-class subset
    wrapper is left out)."""
    cfg = loader_cfg.dataset.copy()
    while cfg.get('type') in SUBSET_WRAPPERS:
        cfg = cfg.dataset.copy()
    leaf = _leaf_dataset(cfg)
    leaf.data_root = str(data_root)
    leaf.update(EXTRA_ARGS.get(leaf.type, {}))
    return cfg


def _data_root_for(dataset_type: str, tmp_path: Path) -> Path:
    if dataset_type not in DATA_MAKERS:
        pytest.skip(f'no generated data for dataset type {dataset_type!r}: add a writer to '
                    'DATA_MAKERS in tests/test_datasets.py')
    root = tmp_path / dataset_type
    if not root.exists():
        DATA_MAKERS[dataset_type](root)
    return root


def _preprocessor(cfg: Config) -> torch.nn.Module:
    """The data preprocessor the Runner gives the model (top-level ``data_preprocessor``
    merged into ``model``; an ImageClassifier defaults its type to ClsDataPreprocessor)."""
    pre = dict(cfg.get('model', {}).get('data_preprocessor') or cfg.get('data_preprocessor')
               or {})
    pre.setdefault('type', 'ClsDataPreprocessor')
    return MODELS.build(pre)


def _check_batch(cfg: Config, loader: str, data_root: Path, training: bool,
                 expected_shape: Optional[Tuple[int, int, int]] = None) -> List[dict]:
    """Build the loader's dataset on the data, pack two samples and preprocess them;
    returns the two packed samples."""
    dataset = DATASETS.build(_dataset_cfg(cfg[loader], data_root))
    assert len(dataset) >= 2
    samples = [dataset[i] for i in range(2)]
    packed = samples[0]['inputs']
    if expected_shape is not None:
        assert tuple(packed.shape) == expected_shape, (loader, packed.shape)
    batch = _preprocessor(cfg)(pseudo_collate(samples), training=training)
    inputs = batch['inputs']
    assert inputs.dtype == torch.float32 and inputs.shape == (2, *packed.shape)
    assert torch.isfinite(inputs).all()
    # normalisation: (x - mean) / std per channel, after BGR -> RGB where asked
    pre = cfg.get('data_preprocessor') or {}
    if 'mean' in pre:
        raw = torch.stack([s['inputs'] for s in samples]).float()
        if pre.get('to_rgb') and raw.shape[1] == 3:
            raw = raw.flip(1)
        mean = torch.tensor(pre['mean']).view(1, -1, 1, 1)
        std = torch.tensor(pre['std']).view(1, -1, 1, 1)
        assert mean.shape[1] == raw.shape[1], 'mean/std do not match the image channels'
        torch.testing.assert_close(inputs, (raw - mean) / std)
    labels = [int(s.gt_label) for s in batch['data_samples']]
    assert labels == [dataset.get_data_info(i)['gt_label'] for i in range(2)]
    return samples


@pytest.mark.parametrize('config', DATASET_CONFIGS, ids=[p.stem for p in DATASET_CONFIGS])
def test_dataset_config_builds_and_preprocesses(config: Path, tmp_path: Path) -> None:
    import mmpoly.datasets  # noqa: F401  (registers the Local* datasets)
    cfg = Config.fromfile(str(config))
    for loader, training in (('train_dataloader', True), ('val_dataloader', False),
                             ('test_dataloader', False)):
        root = _data_root_for(_leaf_dataset(cfg[loader].dataset).type, tmp_path)
        _check_batch(cfg, loader, root, training)


def test_cifar_configs_use_the_test_split_for_validation(tmp_path: Path) -> None:
    written = make_cifar10(tmp_path)
    cfg = Config.fromfile(str(REPO / 'configs/_base_/datasets/cifar10_bs128.py'))
    val = DATASETS.build(_dataset_cfg(cfg.val_dataloader, tmp_path))
    assert len(val) == len(written['test'][1])
    np.testing.assert_array_equal(val.get_data_info(0)['img'], _hwc(written['test'][0])[0])
    packed = val[0]['inputs']  # no augmentation at test time: the image itself, CHW
    np.testing.assert_array_equal(packed.numpy(), _hwc(written['test'][0])[0].transpose(2, 0, 1))


def test_fashion_mnist_config_validates_on_the_test_images(tmp_path: Path) -> None:
    written = make_fashion_mnist(tmp_path)
    cfg = Config.fromfile(str(REPO / 'configs/_base_/datasets/fashion-mnist_bs128.py'))
    val = DATASETS.build(_dataset_cfg(cfg.val_dataloader, tmp_path))
    assert len(val) == len(written['test'][1])
    np.testing.assert_array_equal(val[0]['inputs'][0].numpy(), written['test'][0][0])


def _imagenet_cfg(tmp_path: Path) -> Config:
    path = tmp_path / 'imagenet_data.py'
    path.write_text(f'_base_ = [{IMAGENET_BASE!r}]\n')
    return Config.fromfile(str(path))


def test_mmpretrain_packaged_imagenet_config_pipelines(tmp_path: Path,
                                                       cached_mim_metafiles: None) -> None:
    """The ImageNet data settings mmpoly's ImageNet configs inherit (mmpretrain's packaged
    ``imagenet_bs32.py``, as ``_base_``): RandomResizedCrop 224 / ResizeEdge 256 + CenterCrop
    224, read from an ImageNet folder with meta/*.txt."""
    written = make_imagenet(tmp_path / 'imagenet')
    cfg = _imagenet_cfg(tmp_path)
    for loader, training in (('train_dataloader', True), ('val_dataloader', False)):
        split = 'train' if training else 'val'
        dataset = DATASETS.build(_dataset_cfg(cfg[loader], tmp_path / 'imagenet'))
        assert len(dataset) == len(written[split])
        for i, (rel, label) in enumerate(written[split]):
            info = dataset.get_data_info(i)
            assert info['img_path'] == str(tmp_path / 'imagenet' / split / rel)
            assert info['gt_label'] == label
        _check_batch(cfg, loader, tmp_path / 'imagenet', training, expected_shape=(3, 224, 224))


def _top_level_configs() -> List[Path]:
    return sorted((REPO / 'configs').glob('*.py'))


def test_top_level_configs_fit_their_data(tmp_path: Path,
                                          cached_mim_metafiles: None) -> None:
    """Every distinct data setting of the top-level configs: the dataset builds on generated
    data, one batch goes through the data preprocessor, and the model's input channels and
    class count fit the data."""
    import mmpoly.datasets  # noqa: F401
    seen: Dict[str, str] = {}
    checked, skipped = [], []
    for config in _top_level_configs():
        cfg = Config.fromfile(str(config), import_custom_modules=False)  # imported above
        if 'train_dataloader' not in cfg or 'model' not in cfg:
            continue
        dataset_type = _leaf_dataset(cfg.train_dataloader.dataset).type
        if dataset_type not in DATA_MAKERS:
            skipped.append(f'{config.name} ({dataset_type})')
            continue
        backbone, head = cfg.model.get('backbone', {}), cfg.model.get('head', {})
        key = repr((cfg.train_dataloader.dataset, cfg.val_dataloader.dataset,
                    cfg.get('data_preprocessor'), head.get('num_classes'),
                    backbone.get('in_channels', 3)))
        if key in seen:
            continue
        seen[key] = config.name
        root = _data_root_for(dataset_type, tmp_path)
        for loader, training in (('train_dataloader', True), ('val_dataloader', False)):
            samples = _check_batch(cfg, loader, root, training=training)
            assert samples[0]['inputs'].shape[0] == backbone.get('in_channels', 3), config.name
        classes = DATASETS.build(_dataset_cfg(cfg.val_dataloader, root)).metainfo['classes']
        assert head.get('num_classes') == len(classes), config.name
        assert cfg.data_preprocessor.get('num_classes', len(classes)) == len(classes), config.name
        checked.append(config.name)
    if not checked:
        pytest.skip(f'no top-level config with generated data (skipped: {skipped})')
