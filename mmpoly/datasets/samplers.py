"""Data samplers that mmpoly registers in mmpretrain's ``DATA_SAMPLERS`` (a child of mmengine's)."""
import math
import numbers
from typing import Iterator, Optional, Sized

import numpy as np
import torch
from mmengine.dist import get_dist_info, sync_random_seed
from mmpretrain.registry import DATA_SAMPLERS
from torch.utils.data import Sampler

__all__ = ['ClassBalancedSampler']


def dataset_labels(dataset: Sized) -> np.ndarray:
    """The class index of every sample, (N, ), from ``get_gt_labels`` or ``get_cat_ids``."""
    if hasattr(dataset, 'full_init'):
        dataset.full_init()
    if hasattr(dataset, 'get_gt_labels'):
        return np.asarray(dataset.get_gt_labels(), dtype=np.int64)
    if hasattr(dataset, 'get_cat_ids'):
        labels = []
        for i in range(len(dataset)):
            ids = dataset.get_cat_ids(i)
            if len(ids) != 1:
                raise ValueError(f'ClassBalancedSampler: sample {i} has labels {ids}; a '
                                 'single-label dataset is needed')
            labels.append(int(ids[0]))
        return np.asarray(labels, dtype=np.int64)
    raise TypeError(f'ClassBalancedSampler: {type(dataset).__name__} has neither get_gt_labels '
                    'nor get_cat_ids, so its classes are unknown')


@DATA_SAMPLERS.register_module()
class ClassBalancedSampler(Sampler):
    """Draw samples with replacement, each with probability ∝ 1 / (size of its class).

    Every class present is then drawn equally often in expectation (PyTorch's
    ``WeightedRandomSampler`` with weights 1/count, the sampler of the speech experiments of
    arXiv:2104.07916). Classes without samples get no draws. In distributed runs the draws of an
    epoch are made once from the shared seed and split between the ranks.

    Args:
        dataset: a single-label dataset (``get_gt_labels`` or ``get_cat_ids``).
        num_samples: draws per epoch over all ranks (default: ``len(dataset)``).
        seed: base random seed (default: synchronised between ranks); the epoch is added
            (``set_epoch``, called by mmengine's ``DistSamplerSeedHook``).
    """

    def __init__(self, dataset: Sized, num_samples: Optional[int] = None,
                 seed: Optional[int] = None) -> None:
        labels = dataset_labels(dataset)
        if len(labels) == 0:
            raise ValueError('ClassBalancedSampler: the dataset is empty')
        if num_samples is None:
            num_samples = len(labels)
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f'ClassBalancedSampler: num_samples must be a positive int, got '
                             f'{num_samples!r}')
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise ValueError(f'ClassBalancedSampler: seed must be None or an int, got {seed!r}')
        if labels.min() < 0:
            raise ValueError(f'ClassBalancedSampler: sample {int(labels.argmin())} has the '
                             f'negative label {int(labels.min())}; labels must be class indices '
                             '>= 0')
        counts = np.bincount(labels)
        self.weights = torch.as_tensor(1.0 / counts[labels], dtype=torch.float64)
        self.rank, self.world_size = get_dist_info()
        self.seed = sync_random_seed() if seed is None else int(seed)
        self.total_size = int(math.ceil(num_samples / self.world_size)) * self.world_size
        self.num_samples = self.total_size // self.world_size
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        draws = torch.multinomial(self.weights, self.total_size, replacement=True,
                                  generator=generator)
        return iter(draws[self.rank::self.world_size].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use a new draw for ``epoch``."""
        self.epoch = epoch
