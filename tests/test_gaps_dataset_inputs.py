"""Dataset inputs that were accepted silently or failed far from their cause: each is now a
ValueError (FileNotFoundError for a path) that names the field, the value and what is allowed,
while valid inputs read the same data as before. All on small files written in the real formats
(the writers of tests/test_datasets.py).

* ``LocalCIFAR10/100`` and ``LocalFashionMNIST`` with ``metainfo=dict(classes=...)`` of another
  length than the files' 10 / 100 classes (the labels got wrong names, or none).
* ``LocalCocoDataset`` given a folder as ``ann_file`` (or a file as a folder): it said "does
  not exist".
* ``LocalImageNet``: an unknown ``split`` (mmpretrain's AssertionError), a malformed
  ``ann_file`` line (an unpacking or int() error without file or line), a label outside the
  classes (read silently), class folders that are not one per class (an AssertionError).
* An int ``indices`` (the first N) larger than the split silently took the whole split.
"""
from pathlib import Path
from typing import Any, Callable, List

import numpy as np
import pytest
from test_datasets import make_cifar10, make_cifar100, make_fashion_mnist, make_imagenet

from mmpoly.datasets import LocalCIFAR10, LocalCIFAR100, LocalCocoDataset, LocalFashionMNIST
from mmpoly.datasets.imagenet import LocalImageNet

CIFARS = [(LocalCIFAR10, make_cifar10, 10), (LocalCIFAR100, make_cifar100, 100)]
#: (class, file writer, classes, its other arguments): the datasets of fixed classes
FIXED_CLASSES = [(cls, make, count, dict(verify_checksums=False)) for cls, make, count in CIFARS] \
    + [(LocalFashionMNIST, make_fashion_mnist, 10, {})]


# --------------------------------------------------------------------------- metainfo classes


@pytest.mark.parametrize('cls, make, count, options', FIXED_CLASSES)
def test_metainfo_classes_must_be_one_per_class(tmp_path: Path, cls: type, make: Callable,
                                                count: int, options: dict) -> None:
    written = make(tmp_path)
    classes_file = tmp_path / 'classes.txt'
    classes_file.write_text('a\nb\nc\n')  # mmengine reads a file name as its lines
    for classes, got in [(('a', 'b', 'c'), '3 names'),
                         ([f'c{i}' for i in range(count + 1)], f'{count + 1} names'),
                         ((), '0 names'), (str(classes_file), '3 names'), (None, 'None')]:
        for lazy_init in (True, False):  # refused when built, before the files are read
            with pytest.raises(ValueError) as exc:
                cls(data_root=str(tmp_path), split='test', metainfo=dict(classes=classes),
                    lazy_init=lazy_init, **options)
            assert str(exc.value) == (
                f'{cls.__name__}: metainfo.classes must be {count} class names (one per label '
                f'0 to {count - 1} of the files), got {got}')
    # the right number of other names is allowed: they name the same labels
    names = tuple(f'class_{i}' for i in range(count))
    dataset = cls(data_root=str(tmp_path), split='test', metainfo=dict(classes=names),
                  **options)
    assert dataset.metainfo['classes'] == names
    assert [dataset.get_data_info(i)['gt_label'] for i in range(len(dataset))] == \
        written['test'][1].tolist()
    assert len(cls(data_root=str(tmp_path), split='test', **options).metainfo['classes']) == \
        count


# --------------------------------------------------------------------------- COCO paths


def coco_cfg(root: Path) -> dict:
    """A LocalCocoDataset config of COCO's layout under ``root``."""
    return dict(data_root=f'{root}/', ann_file='annotations/instances_val2017.json',
                data_prefix=dict(img='val2017/'))


@pytest.mark.parametrize('field, change, kind', [
    ('ann_file', dict(ann_file='annotations'), 'a folder, not a COCO annotation JSON file'),
    ('data_prefix.img', dict(data_prefix=dict(img='annotations/instances_val2017.json')),
     'a file, not a folder of images'),
])
def test_coco_path_of_the_wrong_kind_is_named(tmp_path: Path, field: str, change: dict,
                                              kind: str) -> None:
    root = tmp_path / 'coco'
    (root / 'annotations').mkdir(parents=True)
    (root / 'annotations' / 'instances_val2017.json').write_text('{}')
    (root / 'val2017').mkdir()
    LocalCocoDataset.check_data(coco_cfg(root))  # the complete layout passes
    cfg = dict(coco_cfg(root), **change)
    path = f"{root}/{change['ann_file'] if field == 'ann_file' else change['data_prefix']['img']}"
    expected = (f"LocalCocoDataset: {field} '{path}' is {kind}. COCO 2017's layout is "
                f'{root}/train2017/, {root}/val2017/ and {root}/annotations/instances_'
                '{train,val}2017.json: set data_root to its folder, ann_file to one of its JSON '
                'files and data_prefix.img to one of its image folders.')
    with pytest.raises(FileNotFoundError) as checked:  # what tools/train.py reports at start-up
        LocalCocoDataset.check_data(cfg)
    with pytest.raises(FileNotFoundError) as loaded:
        LocalCocoDataset(**cfg)
    assert str(checked.value) == str(loaded.value) == expected


def test_coco_ann_file_with_a_slash_at_its_end_is_named(tmp_path: Path) -> None:
    root = tmp_path / 'coco'
    (root / 'annotations').mkdir(parents=True)
    (root / 'annotations' / 'instances_val2017.json').write_text('{}')
    (root / 'val2017').mkdir()
    cfg = dict(coco_cfg(root), ann_file='annotations/instances_val2017.json/')
    with pytest.raises(FileNotFoundError) as exc:
        LocalCocoDataset.check_data(cfg)
    assert str(exc.value).startswith(
        f"LocalCocoDataset: ann_file '{root}/annotations/instances_val2017.json/' is a file "
        "given with a '/' at its end: remove the '/'. COCO 2017's layout ")


def test_coco_data_root_that_is_a_file_is_named(tmp_path: Path) -> None:
    root = tmp_path / 'coco'
    root.write_text('')
    with pytest.raises(FileNotFoundError) as exc:
        LocalCocoDataset(**coco_cfg(root))
    assert str(exc.value).startswith(
        f"LocalCocoDataset: data_root '{root}/' is a file, not a folder. COCO 2017's layout ")


# --------------------------------------------------------------------------- ImageNet


@pytest.fixture
def imagenet(tmp_path: Path) -> Path:
    """mmpretrain's ImageNet layout with 2 classes, class folders and meta/{train,val}.txt."""
    make_imagenet(tmp_path / 'imagenet')
    return tmp_path / 'imagenet'


@pytest.mark.parametrize('split', ['valid', 'Train', 'training', 1])
def test_imagenet_unknown_split_is_refused(imagenet: Path, split: Any) -> None:
    with pytest.raises(ValueError) as exc:
        LocalImageNet(data_root=str(imagenet), split=split)
    assert str(exc.value) == ("LocalImageNet: split must be 'train', 'val', 'test' or '' "
                              f'(data_prefix and ann_file as given), got {split!r}')


def test_imagenet_split_none_and_a_flat_test_split_read_as_mmpretrain_reads_them(
        imagenet: Path) -> None:
    """split=None is mmpretrain's '' (data_prefix and ann_file as given); split='test' reads
    image names without labels from a flat test/ (mmpretrain's layout has no meta/test.txt)."""
    dataset = LocalImageNet(data_root=str(imagenet), split=None, data_prefix='val',
                            ann_file='meta/val.txt')
    assert dataset.split == '' and len(dataset) > 0
    (imagenet / 'test').mkdir()
    for name in ('b.JPEG', 'a.JPEG'):  # names only: no image is read
        (imagenet / 'test' / name).write_bytes(b'')
    test = LocalImageNet(data_root=str(imagenet), split='test')
    assert [Path(test.get_data_info(i)['img_path']).name for i in range(len(test))] == [
        'a.JPEG', 'b.JPEG']
    assert 'gt_label' not in test.get_data_info(0)


def write_train_txt(root: Path, lines: List[str]) -> str:
    """``meta/train.txt`` of these lines; returns its path as the dataset names it."""
    (root / 'meta' / 'train.txt').write_text(''.join(f'{line}\n' for line in lines))
    return f'{root}/meta/train.txt'


GOOD = 'n01440764/n01440764_0.JPEG 0'


@pytest.mark.parametrize('line', [
    'n01443537/n01443537_1.JPEG',  # no label
    'n01443537/n01443537_1.JPEG one',
    'n01443537/n01443537_1.JPEG 1.0',
    'n01443537/n01443537_1.JPEG\t1',  # mmpretrain splits at the last space
    '',
    ' 1',  # a label without an image path
])
def test_imagenet_malformed_ann_file_line_is_named(imagenet: Path, line: str) -> None:
    path = write_train_txt(imagenet, [GOOD, line])
    with pytest.raises(ValueError) as exc:
        LocalImageNet(data_root=str(imagenet), split='train')
    assert str(exc.value) == (f"LocalImageNet: ann_file '{path}' line 2: {line!r} is not "
                              "'<image path> <label>' with an integer label")


@pytest.mark.parametrize('label, classes, allowed', [
    (1000, None, 'outside the 1000 classes of metainfo; allowed: 0 to 999'),
    (-1, None, 'outside the 1000 classes of metainfo; allowed: 0 to 999'),
    (2, ('tench', 'goldfish'), 'outside the 2 classes of metainfo; allowed: 0 to 1'),
])
def test_imagenet_label_outside_the_classes_is_named(imagenet: Path, label: int, classes: Any,
                                                     allowed: str) -> None:
    path = write_train_txt(imagenet, [GOOD, GOOD, f'n01443537/n01443537_1.JPEG {label}'])
    with pytest.raises(ValueError) as exc:
        LocalImageNet(data_root=str(imagenet), split='train',
                      metainfo=None if classes is None else dict(classes=classes))
    assert str(exc.value) == f"LocalImageNet: ann_file '{path}' line 3: label {label} is {allowed}"


def test_imagenet_valid_ann_file_reads_as_mmpretrain_reads_it(imagenet: Path) -> None:
    lines = ['n01440764/n01440764_0.JPEG 0', 'n01443537/n01443537_1.JPEG +1',  # int('+1')
             'name with spaces.JPEG 1']  # split at the last space, as mmpretrain splits it
    write_train_txt(imagenet, lines)
    dataset = LocalImageNet(data_root=str(imagenet), split='train',
                            metainfo=dict(classes=('tench', 'goldfish')))
    infos = [dataset.get_data_info(i) for i in range(len(dataset))]
    assert [(info['img_path'], info['gt_label']) for info in infos] == [
        (f'{imagenet}/train/n01440764/n01440764_0.JPEG', 0),
        (f'{imagenet}/train/n01443537/n01443537_1.JPEG', 1),
        (f'{imagenet}/train/name with spaces.JPEG', 1)]


def test_imagenet_class_folders_must_be_one_per_class(imagenet: Path) -> None:
    (imagenet / 'meta' / 'val.txt').unlink()  # the labels come from val/'s class folders
    with pytest.raises(ValueError) as exc:
        LocalImageNet(data_root=str(imagenet), split='val')  # 1000 classes, 2 folders
    assert str(exc.value) == (
        f"LocalImageNet: '{imagenet}/val' has 2 class folders but metainfo.classes has 1000 "
        "names (the labels are the folders' indices in sorted order); allowed: one class "
        'folder per name, metainfo=dict(classes=...) with one name per folder, or an ann_file')
    dataset = LocalImageNet(data_root=str(imagenet), split='val',
                            metainfo=dict(classes=('tench', 'goldfish')))
    assert [dataset.get_data_info(i)['gt_label'] for i in range(len(dataset))] == [0, 1]


# --------------------------------------------------------------------------- indices


@pytest.mark.parametrize('cls, make, extra, split, size', [
    (LocalCIFAR10, make_cifar10, dict(verify_checksums=False), 'test', 3),
    (LocalCIFAR100, make_cifar100, dict(verify_checksums=False), 'train', 6),
    (LocalFashionMNIST, make_fashion_mnist, {}, 'test', 4),
])
def test_int_indices_larger_than_the_split_are_refused(tmp_path: Path, cls: type,
                                                       make: Callable, extra: dict, split: str,
                                                       size: int) -> None:
    make(tmp_path)
    for indices in (size + 1, np.int64(size + 1), 10 ** 6):
        with pytest.raises(ValueError) as exc:
            cls(data_root=str(tmp_path), split=split, indices=indices, **extra)
        assert str(exc.value) == (
            f'{cls.__name__}: indices {indices} (the first N samples) is more than the {size} '
            f'samples of this split; allowed: 1 to {size}')
    for indices, length in ((size, size), (1, 1)):  # up to the whole split
        assert len(cls(data_root=str(tmp_path), split=split, indices=indices, **extra)) == length
