"""Recompute the BatchNorm running statistics before they are used: validation and checkpoints.

During training BN normalises with the batch's statistics, while the running averages it keeps
for eval mode trail the changing weights (momentum 0.1). Early in training, or after a high
learning rate, they can be far from the statistics of the current weights, and a polynomial
block multiplies the mismatch of its factors: eval-mode accuracy falls to chance or the logits
turn NaN while the same weights are fine with batch statistics.

:class:`RecomputeBNHook` recomputes them (PreciseBN, "Rethinking Batch in BatchNorm",
arXiv:2105.07576 §3) with mmpretrain's ``update_bn_stats``: the mean over a few batches of
training images of each batch's mean and variance, with the weights fixed. It runs only where the
running statistics are about to be used or stored: before each validation, before each checkpoint
``CheckpointHook`` saves, and after the last iteration (the checkpoint a detector is initialised
from). The training trajectory does not change: the batches come from a separate loader over a
seeded subset, and the random number generators are restored afterwards.
"""
import random
import time
from typing import List, Optional

import mmengine.dist as dist
import numpy as np
import torch
from mmengine.hooks import CheckpointHook, Hook
from mmengine.logging import print_log
from mmengine.runner import EpochBasedTrainLoop, IterBasedTrainLoop
from mmpretrain.engine.hooks.precise_bn_hook import update_bn_stats
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.data import DataLoader

from mmpoly.registry import DET_HOOKS, HOOKS, register_in_mmdet

from .checkpoint import unwrap_model
from .hooks import strict_options
from .non_finite import NonFiniteError

__all__ = ['RecomputeBNHook', 'recompute_bn_statistics']


def _batch_size(loader: DataLoader) -> int:
    if loader.batch_size is not None:
        return loader.batch_size
    return loader.batch_sampler.batch_size  # e.g. mmdet's AspectRatioBatchSampler


def recompute_bn_statistics(model: torch.nn.Module, loader: DataLoader, num_samples: int,
                            seed: int = 0, logger: str = 'current') -> int:
    """Set the running statistics of ``model``'s BN layers in train mode to the average batch
    statistics over ``num_samples`` images (per all ranks) of ``loader``'s dataset.

    The images are a seeded random subset, split between ranks; batches have the loader's batch
    size (smaller only if the subset is). Layers in eval mode (e.g. ``norm_eval=True``) keep
    theirs. The global random number generators are left as they were.

    Returns:
        The number of images used on this rank.

    Raises:
        NonFiniteError: if a recomputed statistic is not finite (naming the layer).
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f'num_samples must be a positive int, got {num_samples!r}')
    rank, world_size = dist.get_dist_info()
    dataset = loader.dataset
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))
    mine = order[:min(num_samples, len(dataset))][rank::world_size].tolist()
    batch_size = min(_batch_size(loader), len(mine))
    if batch_size < 1:
        raise ValueError(f'the training set ({len(dataset)} images) is too small to recompute '
                         f'BN statistics on {world_size} rank(s)')
    subset = DataLoader(dataset, batch_size=batch_size, sampler=mine, drop_last=True,
                        num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                        worker_init_fn=loader.worker_init_fn, pin_memory=loader.pin_memory)
    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        # update_bn_stats takes len(loader) batches when num_samples asks for at least as many
        update_bn_stats(model, subset, num_samples=len(subset) * batch_size * world_size,
                        logger=logger)
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
    for name, module in unwrap_model(model).named_modules():
        if isinstance(module, _BatchNorm) and module.training and module.track_running_stats \
                and not (torch.isfinite(module.running_mean).all()
                         and torch.isfinite(module.running_var).all()):
            raise NonFiniteError(
                f'recomputed BN statistics of {name} are not finite on training batches: the '
                f'weights themselves give a non-finite forward pass. '
                f'{NonFiniteError.ADVICE[NonFiniteError.DIVERGING_STEP]}',
                cause=NonFiniteError.DIVERGING_STEP, where=name)
    return len(subset) * batch_size


@HOOKS.register_module()
@strict_options
class RecomputeBNHook(Hook):
    """Recompute the BN running statistics before each validation, each checkpoint and the end.

    Args:
        num_samples: training images (all ranks together) the statistics are averaged over;
            the whole training set if it is smaller. Default 2048.
        seed: the subset of images is drawn with ``seed + training iterations so far``.
    """

    priority = 'ABOVE_NORMAL'  # before CheckpointHook (and before the validation loop)

    def __init__(self, num_samples: int = 2048, seed: int = 0) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
            raise ValueError(f'RecomputeBNHook: num_samples must be a positive int, got '
                             f'{num_samples!r}')
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f'RecomputeBNHook: seed must be an int, got {seed!r}')
        self.num_samples = num_samples
        self.seed = seed
        self._done_at: Optional[int] = None
        self.seconds: List[float] = []  # time of each recomputation

    def _checkpoint_hooks(self, runner) -> List[CheckpointHook]:
        return [h for h in runner.hooks if isinstance(h, CheckpointHook)]

    def _checkpoint_due(self, runner, by_epoch: bool) -> bool:
        """Whether a ``CheckpointHook`` saving by epoch (``by_epoch``) or by iteration saves
        after the current one, by the hook's own schedule (``interval``, ``save_begin``,
        ``save_last``; called before the hook, as mmengine's counters still stand)."""
        for hook in self._checkpoint_hooks(runner):
            if hook.by_epoch != by_epoch:
                continue
            if by_epoch and (hook.every_n_epochs(runner, hook.interval, hook.save_begin)
                             or (hook.save_last and hook.is_last_train_epoch(runner))):
                return True
            if not by_epoch and (
                    hook.every_n_train_iters(runner, hook.interval, hook.save_begin)
                    or (hook.save_last and hook.is_last_train_iter(runner))):
                return True
        return False

    def _due(self, runner, done: int, max_done: int, by_epoch: bool) -> bool:
        """Whether the running statistics are used or saved after ``done`` epochs/iterations."""
        if done >= max_done:
            return True
        loop = runner.train_loop
        if runner.val_loop is not None and done >= loop.val_begin and \
                done % loop.val_interval == 0:
            return True
        return self._checkpoint_due(runner, by_epoch)

    def recompute(self, runner, at: int) -> None:
        """Recompute, unless already done at ``at`` training iterations."""
        if self._done_at == at:
            return
        start = time.perf_counter()
        used = recompute_bn_statistics(runner.model, runner.train_loop.dataloader,
                                       self.num_samples, seed=self.seed + at,
                                       logger=runner.logger)
        self.seconds.append(time.perf_counter() - start)
        self._done_at = at
        print_log(f'RecomputeBNHook: BN running statistics recomputed on {used} training images '
                  f'per rank in {self.seconds[-1]:.2f} s', logger=runner.logger)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        loop = runner.train_loop
        done = runner.iter + 1  # runner.iter counts this iteration only after the hooks
        if isinstance(loop, IterBasedTrainLoop):
            due = self._due(runner, done, loop.max_iters, by_epoch=False)
        else:  # iteration checkpoints in an epoch-based loop (mid-epoch iter_*.pth)
            due = self._checkpoint_due(runner, by_epoch=False)
        if due:
            self.recompute(runner, done)

    def after_train_epoch(self, runner) -> None:
        loop = runner.train_loop
        if isinstance(loop, EpochBasedTrainLoop) and \
                self._due(runner, runner.epoch + 1, loop.max_epochs, by_epoch=True):
            self.recompute(runner, runner.iter)

    def before_val_epoch(self, runner) -> None:
        """Covers validations the schedule above did not foresee (e.g. dynamic intervals)."""
        loop = getattr(runner, '_train_loop', None)
        if isinstance(loop, (EpochBasedTrainLoop, IterBasedTrainLoop)) and runner.iter > 0:
            self.recompute(runner, runner.iter)


register_in_mmdet(HOOKS, DET_HOOKS)
