"""Per-class subsets of a classification dataset: the data regimes of arXiv:2104.07916.

* :class:`LongTailedDataset` — the long-tailed version of a dataset (§4.4 "Image
  classification on long-tailed distributions", Table "CIFAR10-LT"): class ``i`` of ``C``
  keeps ``n_i = floor(n_max · IF^(−i/(C−1)))`` images, the exponential profile of Cui et al.
  (2019) used by the CIFAR-LT literature; the imbalance factor ``IF = n_0 / n_{C−1}``.
* :class:`LimitedDataset` — ``k`` images of every class (appendix "Image classification with
  limited data": CIFAR10 reduced from 5,000 to 50 images per class).

Both are dataset wrappers (as mmengine's ``ClassBalancedDataset`` and mmpretrain's
``KFoldDataset``): they take a dataset config or object, keep its ``metainfo`` and serve the
chosen samples through index mapping. The images of a class are chosen by a seeded random
permutation of that class's indices and the first ``n`` are kept, so for one seed the subsets
are nested: the 50-per-class subset lies inside the 500-per-class one, and the IF-200 subset
inside the IF-100 one. Only the training split is meant to be wrapped; the test split stays
balanced.
"""
import copy
import logging
import math
import numbers
from abc import ABC, abstractmethod
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from mmengine.dataset import BaseDataset, force_full_init
from mmengine.logging import print_log

from mmpoly.registry import DATASETS
from .local import check_flags

__all__ = ['LongTailedDataset', 'LimitedDataset', 'long_tailed_counts']


def long_tailed_counts(max_images: int, num_classes: int, imbalance_factor: float) -> List[int]:
    """The exponential long-tailed profile: ``[floor(max_images · IF^(−i/(C−1))) for i < C]``.

    Computed as ``max_images * (1 / IF) ** (i / (C − 1))``, the CIFAR-LT generator's form, which
    gives e.g. 5000 2997 1796 1077 645 387 232 139 83 50 for CIFAR-10 at IF 100. One class
    keeps ``max_images``.
    """
    _check_imbalance_factor(imbalance_factor, 'long_tailed_counts')
    if num_classes < 1:
        raise ValueError(f'long_tailed_counts: num_classes must be >= 1, got {num_classes!r}')
    if num_classes == 1:
        return [int(max_images)]
    ratio = 1.0 / float(imbalance_factor)
    return [int(math.floor(max_images * ratio**(i / (num_classes - 1.0))))
            for i in range(num_classes)]


def _check_imbalance_factor(value: object, owner: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(float(value)) or float(value) < 1:
        raise ValueError(f'{owner}: imbalance_factor must be a finite number >= 1 (the ratio of '
                         f'the largest class to the smallest), got {value!r}')


def _empty_tail_problem(max_images: int, imbalance_factor: float, owner: str,
                        largest: str = '') -> Optional[str]:
    """Why ``max_images`` head images with ``imbalance_factor`` leave the tail class empty (its
    target, ``floor(max_images / IF)``, is 0), if they do; ``largest`` says where ``max_images``
    came from."""
    if max_images < 1 or long_tailed_counts(max_images, 2, imbalance_factor)[-1] > 0:
        return None
    need = max(max_images, math.ceil(float(imbalance_factor)))
    while long_tailed_counts(need, 2, imbalance_factor)[-1] < 1:  # float rounding at n = IF
        need += 1
    return (f'{owner}: imbalance_factor={imbalance_factor} with max_images_per_class='
            f'{max_images}{largest} gives the tail class floor({max_images} / '
            f'{imbalance_factor}) = 0 images: the last classes would be left out of training, '
            'not made rare. Give max_images_per_class >= '
            f'{need} or imbalance_factor <= {max_images}')


def _counts_text(counts: Sequence[int], most: int = 12) -> str:
    """Per-class counts for a message: all of them, or the first and last few."""
    if len(counts) <= most:
        return ' '.join(map(str, counts))
    return ' '.join(map(str, counts[:most // 2])) + ' ... ' + \
        ' '.join(map(str, counts[-(most // 2):]))


def _check_int(value: object, name: str, owner: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f'{owner}: {name} must be an integer >= {minimum}, got {value!r}')


class _PerClassSubset(ABC):
    """Base of the per-class subset wrappers.

    Args:
        dataset: the wrapped single-label classification dataset (a config for mmpretrain's
            ``DATASETS`` or a :class:`~mmengine.dataset.BaseDataset`).
        seed: seed of the per-class permutations (an integer >= 0).
        lazy_init: defer loading and choosing until :meth:`full_init` (the Runner calls it).

    Subclasses define :meth:`_target_counts`, the number of images to keep per class.
    """

    def __init__(self,
                 dataset: Union[BaseDataset, dict],
                 seed: int = 0,
                 lazy_init: bool = False) -> None:
        owner = type(self).__name__
        _check_int(seed, 'seed', owner, 0)
        check_flags(owner, lazy_init=lazy_init)
        if isinstance(dataset, dict):
            self.dataset = DATASETS.build(dataset)
        elif isinstance(dataset, BaseDataset) or hasattr(dataset, 'get_cat_ids'):
            self.dataset = dataset
        else:
            raise TypeError(f'{owner}: dataset must be a dataset config (dict) or a BaseDataset, '
                            f'got {type(dataset).__name__}')
        self.seed = int(seed)
        self._metainfo = copy.deepcopy(getattr(self.dataset, 'metainfo', {}) or {})
        self.class_counts: List[int] = []  # images kept per class, after full_init
        self.class_sizes: List[int] = []  # images per class in the wrapped dataset
        self._indices = np.zeros(0, dtype=np.int64)
        self._labels_all = np.zeros(0, dtype=np.int64)
        self._fully_initialized = False
        if not lazy_init:
            self.full_init()

    # ------------------------------------------------------------------ choosing

    @abstractmethod
    def _target_counts(self, class_sizes: np.ndarray) -> np.ndarray:
        """Images to keep per class, shape (C,), from the class sizes, shape (C,)."""

    def _describe(self) -> str:
        """The wrapper's settings, for log lines and errors."""
        return f'seed={self.seed}'

    def _labels(self) -> np.ndarray:
        """The wrapped dataset's labels, shape (N,), int64; one label per sample."""
        if hasattr(self.dataset, 'get_gt_labels'):
            labels = np.asarray(self.dataset.get_gt_labels())
        else:
            labels = np.asarray([self._single_label(i) for i in range(len(self.dataset))])
        if labels.ndim != 1:
            raise ValueError(f'{type(self).__name__}: needs one label per sample (single-label '
                             f'classification), got labels of shape {labels.shape}')
        return labels.astype(np.int64)

    def _single_label(self, idx: int) -> int:
        cat_ids = list(self.dataset.get_cat_ids(idx))
        if len(cat_ids) != 1:
            raise ValueError(f'{type(self).__name__}: sample {idx} has labels {cat_ids}; only '
                             'single-label datasets can be subset per class')
        return int(cat_ids[0])

    def _num_classes(self, labels: np.ndarray) -> int:
        classes = self._metainfo.get('classes')
        num_classes = len(classes) if classes is not None else \
            (int(labels.max()) + 1 if labels.size else 0)
        if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            raise ValueError(f'{type(self).__name__}: labels range over [{labels.min()}, '
                             f'{labels.max()}] but the dataset has {num_classes} classes')
        return num_classes

    def full_init(self) -> None:
        """Load the wrapped dataset, choose the images of every class and log the counts."""
        if self._fully_initialized:
            return
        if hasattr(self.dataset, 'full_init'):
            self.dataset.full_init()
        labels = self._labels()
        num_classes = self._num_classes(labels)
        per_class = [np.flatnonzero(labels == c) for c in range(num_classes)]
        sizes = np.array([len(idx) for idx in per_class], dtype=np.int64)
        self.class_sizes = sizes.tolist()
        targets = self._target_counts(sizes)
        # One permutation per class, drawn in class order whatever the targets: for a given
        # seed, a smaller target keeps a prefix of a larger one (nested subsets).
        rng = np.random.default_rng(self.seed)
        kept = []
        counts = []
        for c, indices in enumerate(per_class):
            order = rng.permutation(indices)
            count = int(min(targets[c], len(indices)))
            kept.append(order[:count])
            counts.append(count)
        self.class_counts = counts
        self._labels_all = labels
        self._indices = np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
        self._fully_initialized = True
        self._log_counts()

    def _log_counts(self) -> None:
        classes = self._metainfo.get('classes') or [str(c) for c in range(len(self.class_counts))]
        per_class = ', '.join(f'{name}: {count}' for name, count in zip(classes,
                                                                        self.class_counts))
        print_log(f'{type(self).__name__} ({self._describe()}) over '
                  f'{type(self.dataset).__name__}: keeps {len(self._indices)} of '
                  f'{sum(self.class_sizes)} images; per class: {per_class}',
                  logger='current', level=logging.INFO)

    # ------------------------------------------------------------------ dataset interface

    @property
    def metainfo(self) -> dict:
        """The wrapped dataset's meta information (a copy)."""
        return copy.deepcopy(self._metainfo)

    @property
    def indices(self) -> np.ndarray:
        """The kept indices of the wrapped dataset, sorted, shape (len(self),)."""
        if not self._fully_initialized:
            self.full_init()
        return self._indices.copy()

    @force_full_init
    def _get_ori_dataset_idx(self, idx: int) -> int:
        """The index in the wrapped dataset of sample ``idx`` of the subset."""
        return int(self._indices[idx])

    @force_full_init
    def get_data_info(self, idx: int) -> dict:
        return self.dataset.get_data_info(self._get_ori_dataset_idx(idx))

    @force_full_init
    def get_cat_ids(self, idx: int) -> List[int]:
        return self.dataset.get_cat_ids(self._get_ori_dataset_idx(idx))

    @force_full_init
    def get_gt_labels(self) -> np.ndarray:
        """The labels of the kept samples, shape (len(self),)."""
        return self._labels_all[self._indices].copy()

    @force_full_init
    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, idx: int) -> dict:
        if not self._fully_initialized:
            print_log('Please call `full_init` method manually to accelerate the speed.',
                      logger='current', level=logging.WARNING)
            self.full_init()
        return self.dataset[self._get_ori_dataset_idx(idx)]

    def get_subset_(self, indices: Union[Sequence[int], int]) -> None:
        """Not supported: subset the wrapped dataset (its ``indices``) instead."""
        raise NotImplementedError(
            f'{type(self).__name__} does not support get_subset_/get_subset; set `indices` on '
            'the wrapped dataset instead')

    def get_subset(self, indices: Union[Sequence[int], int]) -> BaseDataset:
        """Not supported: subset the wrapped dataset (its ``indices``) instead."""
        self.get_subset_(indices)

    def __repr__(self) -> str:
        lines = [f'Dataset {type(self).__name__} ({self._describe()})',
                 f'    Wrapped dataset: {type(self.dataset).__name__}']
        if self._fully_initialized:
            lines.append(f'    Number of samples: {len(self)}')
            lines.append(f'    Per class: {self.class_counts}')
        else:
            lines.append("    Haven't been initialized")
        return '\n'.join(lines)


@DATASETS.register_module()
class LongTailedDataset(_PerClassSubset):
    """A long-tailed subset: class ``i`` of ``C`` keeps ``floor(n_max · IF^(−i/(C−1)))`` images.

    arXiv:2104.07916 §4.4 (CIFAR10-LT, IF 200 / 100 / 50 / 20 / 10). Class 0 is the head,
    class ``C−1`` the tail; ``C`` is ``len(metainfo['classes'])``. For CIFAR-10 (5,000 images
    per class) and IF 100 the classes keep 5000 2997 1796 1077 645 387 232 139 83 50 images.

    Args:
        dataset: the balanced training set to subsample (config dict or dataset).
        imbalance_factor: IF = n_0 / n_{C−1}, a finite number >= 1 (1 keeps ``n_max`` images of
            every class).
        max_images_per_class: ``n_max``, the head class's count; None: the size of the largest
            class of the wrapped dataset. A class with fewer images than its target keeps all of
            them (logged as a warning) as long as the largest and smallest kept classes keep the
            profile's ratio; a request whose imbalance the classes cannot give (e.g. a head class
            smaller than ``n_max``, or an empty class) is a ValueError naming the classes and
            a ``max_images_per_class`` that works. So is a profile whose tail class gets no
            image (``n_max < IF``: the last classes would be left out, not made rare).
        seed: seed of the per-class permutations that choose the images.
        lazy_init: defer loading until :meth:`full_init`.
    """

    def __init__(self,
                 dataset: Union[BaseDataset, dict],
                 imbalance_factor: float = 100,
                 max_images_per_class: Optional[int] = None,
                 seed: int = 0,
                 lazy_init: bool = False) -> None:
        _check_imbalance_factor(imbalance_factor, type(self).__name__)
        if max_images_per_class is not None:
            _check_int(max_images_per_class, 'max_images_per_class', type(self).__name__, 1)
            problem = _empty_tail_problem(max_images_per_class, imbalance_factor,
                                          type(self).__name__)
            if problem:
                raise ValueError(problem)
        self.imbalance_factor = imbalance_factor
        self.max_images_per_class = max_images_per_class
        super().__init__(dataset=dataset, seed=seed, lazy_init=lazy_init)

    def _describe(self) -> str:
        return f'imbalance_factor={self.imbalance_factor}, seed={self.seed}'

    def _target_counts(self, class_sizes: np.ndarray) -> np.ndarray:
        n_max = self.max_images_per_class
        if n_max is None:
            n_max = int(class_sizes.max()) if class_sizes.size else 0
            problem = _empty_tail_problem(n_max, self.imbalance_factor, type(self).__name__,
                                          ' (None: the largest class of the wrapped dataset)')
            if problem:
                raise ValueError(problem)
        targets = np.array(long_tailed_counts(n_max, len(class_sizes), self.imbalance_factor),
                           dtype=np.int64)
        short = [(c, int(t), int(s)) for c, (t, s) in enumerate(zip(targets, class_sizes))
                 if s < t]
        if short:
            self._check_imbalance_is_met(targets, class_sizes, short)
            print_log(f'{type(self).__name__} ({self._describe()}): '
                      + '; '.join(f'class {c} has {s} images, fewer than its target {t}, and '
                                  'keeps all of them' for c, t, s in short),
                      logger='current', level=logging.WARNING)
        return targets

    def _check_imbalance_is_met(self, targets: np.ndarray, class_sizes: np.ndarray,
                                short: List[Tuple[int, int, int]]) -> None:
        """Refuse classes too small for the profile when they change the imbalance.

        The kept counts are ``min(target, class size)``. The request is met when the largest
        and the smallest kept class have the ratio of the profile's largest and smallest
        targets (``targets[0] / targets[-1]``, the imbalance factor up to the flooring): short
        classes between them only log a warning. Otherwise, e.g. a head class shorter than
        ``max_images_per_class`` or an empty class, the subset would silently have another
        imbalance (Fashion-MNIST's test split, 1000 images per class, with IF 10 and
        ``max_images_per_class=10000`` would stay balanced): a ValueError.
        """
        kept = np.minimum(targets, class_sizes)
        largest, smallest = int(kept.max()), int(kept.min())
        if largest * int(targets[-1]) == int(targets[0]) * smallest:
            return
        names: Dict[int, str] = dict(enumerate(self._metainfo.get('classes') or []))

        def name(c: int) -> str:
            return f'class {c}' + (f' {names[c]!r}' if c in names else '')

        owner = type(self).__name__
        achieved = f'{largest / smallest:.4g}' if smallest else 'infinite'
        n_max = self.max_images_per_class
        request = f'imbalance_factor={self.imbalance_factor}, max_images_per_class={n_max}'
        if n_max is None:
            request += f' (the largest class, {int(targets[0])} images)'
        listed = '; '.join(f'{name(c)} has {s} (target {t})' for c, t, s in short[:5])
        if len(short) > 5:
            listed += f'; ... ({len(short)} classes in all)'
        fewest, smallest_class = int(class_sizes.min()), name(int(class_sizes.argmin()))
        if fewest > 0:
            example = long_tailed_counts(fewest, len(targets), self.imbalance_factor)
            fix = (f'max_images_per_class <= {fewest}, the smallest class of the wrapped dataset '
                   f'({smallest_class}), a profile every class can give (e.g. '
                   f'max_images_per_class={fewest} keeps {_counts_text(example)})')
        else:
            fix = f'a dataset in which every class has images ({smallest_class} has none)'
        raise ValueError(
            f'{owner}: {request} cannot be met by {type(self.dataset).__name__}: the profile '
            f'asks {_counts_text(targets.tolist())} images per class, but {listed}. The '
            f'subset would keep {largest} to {smallest} images per class, an imbalance of '
            f'{achieved} instead of the profile\'s {int(targets[0]) / int(targets[-1]):.4g} '
            f'({int(targets[0])}/{int(targets[-1])}). '
            f'What works: {fix}')


@DATASETS.register_module()
class LimitedDataset(_PerClassSubset):
    """``images_per_class`` images of every class (arXiv:2104.07916 appendix, limited data).

    Args:
        dataset: the training set to subsample (config dict or dataset).
        images_per_class: k >= 1, at most the size of the smallest class.
        seed: seed of the per-class permutations; for one seed the k-subset is inside every
            larger k'-subset.
        lazy_init: defer loading until :meth:`full_init`.
    """

    def __init__(self,
                 dataset: Union[BaseDataset, dict],
                 images_per_class: int = 50,
                 seed: int = 0,
                 lazy_init: bool = False) -> None:
        _check_int(images_per_class, 'images_per_class', type(self).__name__, 1)
        self.images_per_class = int(images_per_class)
        super().__init__(dataset=dataset, seed=seed, lazy_init=lazy_init)

    def _describe(self) -> str:
        return f'images_per_class={self.images_per_class}, seed={self.seed}'

    def _target_counts(self, class_sizes: np.ndarray) -> np.ndarray:
        if class_sizes.size == 0:
            raise ValueError(f'{type(self).__name__}: the wrapped dataset has no classes')
        smallest = int(class_sizes.argmin())
        if self.images_per_class > class_sizes[smallest]:
            classes: Dict[int, str] = dict(enumerate(self._metainfo.get('classes') or []))
            raise ValueError(
                f'{type(self).__name__}: images_per_class={self.images_per_class} exceeds the '
                f'smallest class, {class_sizes[smallest]} images (class {smallest}'
                f'{" " + repr(classes[smallest]) if smallest in classes else ""}); allowed: '
                f'an integer from 1 to the smallest class size ({class_sizes[smallest]})')
        return np.full(len(class_sizes), self.images_per_class, dtype=np.int64)
