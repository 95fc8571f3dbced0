"""mmpretrain's dataset formats, read from local files that are never downloaded at run time.

Each class keeps the upstream on-disk format and loader, and adds what an offline machine needs:
a missing ``data_root`` or file raises a FileNotFoundError that names the path and says how to
get the data (``check_data`` raises it from a dataset config, before the Runner is built);
checksums can be switched off (small files made in the same format, for tests).
"""
import numbers
import os.path as osp
from typing import Any, List, Mapping, Optional

import numpy as np
from mmengine.fileio import exists, join_path
from mmengine.utils import is_abs
from mmpretrain.datasets import CIFAR10, CIFAR100, FashionMNIST
from mmpretrain.datasets.mnist import read_sn3_pascalvincent_tensor
from mmpretrain.datasets.utils import check_md5

from mmpoly.registry import DATASETS


def _missing_data_error(dataset: str, root: str, missing: List[str], how_to_get: str) -> Exception:
    what = 'does not exist' if not osp.isdir(root) else \
        f'lacks {", ".join(missing[:4])}{" ..." if len(missing) > 4 else ""}'
    return FileNotFoundError(f'{dataset}: data_root {root!r} {what}. {how_to_get}')


def _check_split(dataset: str, split: object) -> None:
    """``split`` must be 'train' or 'test' (mmpretrain only asserts it)."""
    if not isinstance(split, str) or split not in ('train', 'test'):
        raise ValueError(f"{dataset}: split must be 'train' or 'test', got {split!r}")


def check_flags(dataset: str, **flags: object) -> None:
    """Each flag must be a bool: a string such as 'no' would count as true."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f'{dataset}: {name} must be True or False, got {value!r}')


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_indices(dataset: str, indices: object) -> None:
    """``indices`` (mmengine's: the first N samples, or the samples at these indices) must be
    None, an int >= 1 or a non-empty list of ints >= 0; mmengine fails on the others with
    errors naming neither the dataset nor the option."""
    if indices is None:
        return
    if is_int(indices):
        if indices >= 1:
            return
    elif isinstance(indices, (list, tuple)) and indices and all(
            is_int(i) and i >= 0 for i in indices):
        return
    raise ValueError(f'{dataset}: indices must be None (every sample), an int N >= 1 (the first '
                     f'N samples) or a non-empty list of sample indices >= 0, got {indices!r}')


def check_indices_range(dataset: str, indices: object, num_samples: int) -> None:
    """A list of ``indices`` must name samples of the ``num_samples`` loaded, and an int (the
    first N) must not be more than them (mmengine would silently take the whole split)."""
    if is_int(indices) and indices > num_samples:
        raise ValueError(f'{dataset}: indices {indices} (the first N samples) is more than the '
                         f'{num_samples} samples of this split; allowed: 1 to {num_samples}')
    if isinstance(indices, (list, tuple)):
        outside = [i for i in indices if i >= num_samples]
        if outside:
            raise ValueError(f'{dataset}: indices {outside[:5]} are outside the {num_samples} '
                             f'samples of this split; allowed: 0 to {num_samples - 1}')


def join_to_root(data_root: str, path: str) -> str:
    """``path`` as mmengine's ``BaseDataset._join_prefix`` joins a ``data_prefix`` value to
    ``data_root``: under it unless it is absolute or there is no ``data_root``."""
    return join_path(data_root, path) if data_root and not is_abs(path) else path


def _config_root(cfg: Mapping, default: str = '') -> Optional[str]:
    """The folder a dataset config's files are read from, as the dataset joins it
    (``data_root`` / ``data_prefix``, see ``BaseDataset._join_prefix``); None when it cannot be
    checked without building the dataset: no folder given (the dataset reports that), a value
    that is not a string, or a remote one (``s3://...``)."""
    data_root, prefix = cfg.get('data_root', default), cfg.get('data_prefix', '')
    if not isinstance(data_root, str) or not isinstance(prefix, str) \
            or '://' in data_root + prefix:
        return None
    root = join_to_root(data_root, prefix)
    return root or None


class _FixedClassesMixin:
    """Refuses ``metainfo.classes`` that are not one name per label of the files (mmpretrain
    would take any number and name the labels wrongly)."""

    @classmethod
    def _load_metainfo(cls, metainfo: Optional[Mapping] = None) -> dict:
        """mmengine's metainfo, whose ``classes`` must be as many as the class's own."""
        loaded = super()._load_metainfo(metainfo)
        classes, count = loaded.get('classes'), len(cls.METAINFO['classes'])
        if not isinstance(classes, (list, tuple)) or len(classes) != count:
            got = f'{len(classes)} names' if isinstance(classes, (list, tuple)) \
                else repr(classes)
            raise ValueError(f'{cls.__name__}: metainfo.classes must be {count} class names '
                             f'(one per label 0 to {count - 1} of the files), got {got}')
        return loaded


class _LocalCIFARMixin(_FixedClassesMixin):
    """CIFAR in the "python version" format: pickled batches under ``data_root/base_folder``.

    Args:
        verify_checksums: compare every file with the official md5 (True for real data; False
            for files made in the same format, e.g. in tests).
        download: must be False: the files are read where they are, never downloaded (True
            is refused instead of silently ignored).
        metainfo: as mmpretrain's; its ``classes`` must be one name per class of the files
            (10 / 100), else a ValueError naming ``metainfo.classes``.
        Other args: as mmpretrain's CIFAR datasets; ``split`` is 'train' or 'test'. A flag that
        is not a bool (e.g. ``verify_checksums='no'``) is a ValueError naming it.
    """

    archive_url: str

    def __init__(self,
                 data_root: str = '',
                 split: str = 'train',
                 metainfo: Optional[dict] = None,
                 download: bool = False,
                 verify_checksums: bool = True,
                 data_prefix: str = '',
                 test_mode: bool = False,
                 pipeline: tuple = (),
                 indices: Optional[int] = None,
                 lazy_init: bool = False) -> None:
        name = type(self).__name__
        _check_split(name, split)
        check_flags(name, verify_checksums=verify_checksums, download=download,
                    test_mode=test_mode, lazy_init=lazy_init)
        check_indices(name, indices)
        if download:
            raise ValueError(
                f'{name}: download=True is not supported: {name} reads local files and never '
                f'downloads. Download {self.filename} ("CIFAR python version") from '
                f'{self.archive_url}, extract it under data_root and leave download=False')
        self.verify_checksums = bool(verify_checksums)
        super().__init__(data_root=data_root, split=split, metainfo=metainfo, download=download,
                         data_prefix=data_prefix, test_mode=test_mode, pipeline=pipeline,
                         indices=indices, lazy_init=lazy_init)

    def _check_integrity(self) -> bool:
        # mmpretrain's loader calls this after load_data_list has verified the checksums
        return not self._missing_files(check_checksums=False)

    def _missing_files(self, check_checksums: bool) -> List[str]:
        root = self.data_prefix['root']
        missing = []
        for filename, md5 in self.train_list + self.test_list + [
            (self.meta['filename'], self.meta.get('md5'))
        ]:
            path = join_path(root, self.base_folder, filename)
            if not exists(path):
                missing.append(join_path(self.base_folder, filename))
            elif check_checksums and md5 is not None and not check_md5(path, md5):
                raise ValueError(f'{type(self).__name__}: {path} does not match the md5 of the '
                                 f'official archive ({md5}); re-extract {self.filename} or set '
                                 f'verify_checksums=False for a file you made yourself')
        return missing

    def load_data_list(self) -> List[dict]:
        missing = self._missing_files(check_checksums=self.verify_checksums)
        if missing:
            raise _missing_data_error(type(self).__name__, self.data_prefix['root'], missing,
                                      self._how_to_get(self.data_prefix['root']))
        data_list = super().load_data_list()
        check_indices_range(type(self).__name__, self._indices, len(data_list))
        return data_list

    @classmethod
    def _how_to_get(cls, root: str) -> str:
        return (f'Download {cls.filename} ("CIFAR python version") from {cls.archive_url} and '
                f'extract it so that {join_path(root, cls.base_folder)}/ holds its files, or '
                'set data_root to where they are.')

    @classmethod
    def check_data(cls, cfg: Mapping) -> None:
        """Raise the FileNotFoundError of a missing data folder or file of dataset config
        ``cfg`` without building the dataset or reading the files (``tools/train.py`` and
        ``tools/test.py`` call it before the Runner is built; checksums are compared later)."""
        root = _config_root(cfg)
        if root is None:
            return
        names = [name for name, _ in cls.train_list + cls.test_list] + [cls.meta['filename']]
        missing = [join_path(cls.base_folder, name) for name in names
                   if not exists(join_path(root, cls.base_folder, name))]
        if missing:
            raise _missing_data_error(cls.__name__, root, missing, cls._how_to_get(root))

    def _load_meta(self) -> None:
        # the meta file's md5 was checked with the others in load_data_list
        meta, self.meta = self.meta, {k: v for k, v in self.meta.items() if k != 'md5'}
        try:
            super()._load_meta()
        finally:
            self.meta = meta


@DATASETS.register_module()
class LocalCIFAR10(_LocalCIFARMixin, CIFAR10):
    """CIFAR-10 from ``data_root/cifar-10-batches-py`` (see
    :class:`mmpretrain.datasets.CIFAR10`)."""

    archive_url = 'https://www.cs.toronto.edu/~kriz/cifar.html'


@DATASETS.register_module()
class LocalCIFAR100(_LocalCIFARMixin, CIFAR100):
    """CIFAR-100 from ``data_root/cifar-100-python`` (fine labels); args as
    :class:`LocalCIFAR10`."""

    archive_url = LocalCIFAR10.archive_url


@DATASETS.register_module()
class LocalFashionMNIST(_FixedClassesMixin, FashionMNIST):
    """Fashion-MNIST from idx-ubyte files, gzip-compressed (``*.gz``) or extracted.

    The default ``data_root`` is where Debian's ``dataset-fashion-mnist`` package puts the four
    ``*-ubyte.gz`` files. 60,000 train / 10,000 test 28×28 grey images, 10 classes.
    """

    DEBIAN_ROOT = '/usr/share/datasets/fashion-mnist'

    def __init__(self,
                 data_root: str = DEBIAN_ROOT,
                 split: str = 'train',
                 metainfo: Optional[dict] = None,
                 data_prefix: str = '',
                 test_mode: bool = False,
                 pipeline: tuple = (),
                 indices: Optional[int] = None,
                 lazy_init: bool = False) -> None:
        _check_split(type(self).__name__, split)
        check_flags(type(self).__name__, test_mode=test_mode, lazy_init=lazy_init)
        check_indices(type(self).__name__, indices)
        super().__init__(data_root=data_root, split=split, metainfo=metainfo, download=False,
                         data_prefix=data_prefix, test_mode=bool(test_mode), pipeline=pipeline,
                         indices=indices, lazy_init=bool(lazy_init))

    def _find(self, filename: str) -> Optional[str]:
        """The path of ``filename`` (``*.gz``) or of its extracted copy, if either exists."""
        root = self.data_prefix['root']
        for name in (filename, filename[:-3] if filename.endswith('.gz') else filename):
            path = join_path(root, name)
            if exists(path):
                return path
        return None

    def _check_exists(self) -> bool:
        return all(self._find(name) for name, _ in self.train_list + self.test_list)

    @classmethod
    def _how_to_get(cls) -> str:
        return ('On Debian/Ubuntu: apt-get install dataset-fashion-mnist (files land in '
                f'{cls.DEBIAN_ROOT}); or put the four *-ubyte(.gz) files from '
                'https://github.com/zalandoresearch/fashion-mnist in data_root.')

    @classmethod
    def check_data(cls, cfg: Mapping) -> None:
        """Raise the FileNotFoundError of a missing data folder or file of dataset config
        ``cfg`` (its split's images and labels, ``*.gz`` or extracted) without building the
        dataset or reading the files (``tools/train.py`` and ``tools/test.py`` call it before
        the Runner is built)."""
        root = _config_root(cfg, cls.DEBIAN_ROOT)
        if root is None:
            return
        files = cls.test_list if cfg.get('split', 'train') == 'test' else cls.train_list
        missing = [name for name, _ in files
                   if not any(exists(join_path(root, candidate)) for candidate in
                              (name, name[:-3] if name.endswith('.gz') else name))]
        if missing:
            raise _missing_data_error(cls.__name__, root, missing, cls._how_to_get())

    def load_data_list(self) -> List[dict]:
        # by split (mmpretrain's MNIST picks the files by test_mode, so split='test' alone
        # would silently load the training images)
        files = self.test_list if self.split == 'test' else self.train_list
        paths = [self._find(name) for name, _ in files]
        if None in paths:
            missing = [name for (name, _), p in zip(files, paths) if p is None]
            raise _missing_data_error(type(self).__name__, self.data_prefix['root'], missing,
                                      self._how_to_get())
        images = read_sn3_pascalvincent_tensor(paths[0]).numpy()
        labels = read_sn3_pascalvincent_tensor(paths[1], strict=False).numpy()
        if images.ndim != 3 or labels.shape != (images.shape[0], ):
            raise ValueError(f'{type(self).__name__}: {paths[0]} holds {images.shape} and '
                             f'{paths[1]} holds {labels.shape}; expected N×28×28 and N labels')
        check_indices_range(type(self).__name__, self._indices, len(labels))
        return [{'img': img, 'gt_label': int(label)} for img, label in zip(images, labels)]
