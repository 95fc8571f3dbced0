"""Say when a run's batch differs from the one its learning rate was set for, and is not scaled.

A config's learning rate belongs to a total batch (``auto_scale_lr.base_batch_size``: 256 for
the ImageNet configs, 8 GPUs × 32 images; 16 for the COCO detectors). mmengine scales it to the
real batch only with ``--auto-scale-lr`` (``auto_scale_lr.enable=True``) and is silent otherwise,
so a run on 1 process × 32 images trains at 8× the intended rate per image.
"""
import logging

import mmengine.dist as dist
from mmengine.hooks import Hook
from mmengine.logging import print_log

from mmpoly.registry import DET_HOOKS, HOOKS, register_in_mmdet

from .hooks import strict_options
from .precise_bn import _batch_size

__all__ = ['LrScaleCheckHook', 'real_batch_size']


def real_batch_size(runner) -> int:
    """Images per optimizer step over all processes: batch size × world size."""
    return _batch_size(runner.train_dataloader) * dist.get_world_size()


@HOOKS.register_module()
@strict_options
class LrScaleCheckHook(Hook):
    """Before training: warn if the real batch is not ``auto_scale_lr.base_batch_size`` and the
    learning rate is not scaled to it (no ``--auto-scale-lr``)."""

    priority = 'VERY_LOW'

    def before_train(self, runner) -> None:
        auto = runner.auto_scale_lr or {}
        base = auto.get('base_batch_size')
        if base is None or auto.get('enable', False):
            return  # nothing to compare with, or mmengine scaled it (and logged so)
        real = real_batch_size(runner)
        if real != base:
            print_log(
                f'the learning rate was set for {base} images per step '
                f'(auto_scale_lr.base_batch_size) and this run uses {real} '
                f'({_batch_size(runner.train_dataloader)} per process × '
                f'{dist.get_world_size()}); it is NOT scaled. Pass --auto-scale-lr to scale it '
                f'by {real / base:g}, or set optim_wrapper.optimizer.lr yourself.',
                logger=runner.logger, level=logging.WARNING)


register_in_mmdet(HOOKS, DET_HOOKS)
