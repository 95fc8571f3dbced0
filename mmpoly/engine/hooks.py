"""Hooks that stop a run early and loudly instead of letting it go wrong silently.

* :class:`NonFiniteCheckHook` stops training at the first non-finite gradient (what a NaN/Inf loss
  produces), before the optimizer applies it, naming the iteration, the loss and the first
  parameter with a non-finite gradient; no checkpoint of that state is ever written.
* :class:`ModelCheckHook` compares the classifier head's ``in_channels`` with the width the
  backbone actually returns before any data is seen.

mmpoly's configs switch both on through ``custom_hooks`` (``configs/_base_/default_runtime.py``
and the detection bases); ``custom_hooks=[]`` switches them off.
"""
from typing import Dict, List, Optional, Sequence

import torch
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from torch import nn

from mmpoly.registry import DET_HOOKS, HOOKS, register_in_mmdet

__all__ = ['NonFiniteError', 'NonFiniteCheckHook', 'ModelCheckHook']


class NonFiniteError(FloatingPointError):
    """Training produced a non-finite loss or gradient."""


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if is_model_wrapper(model) else model


def _optimizers(optim_wrapper) -> List[torch.optim.Optimizer]:
    """The torch optimizers of an ``OptimWrapper`` or an ``OptimWrapperDict``."""
    wrappers = optim_wrapper.values() if hasattr(optim_wrapper, 'values') else [optim_wrapper]
    return [wrapper.optimizer for wrapper in wrappers]


@HOOKS.register_module()
class NonFiniteCheckHook(Hook):
    """Stop at the first non-finite gradient or loss; never checkpoint that state.

    The check runs as a step pre-hook of the optimizer, after the backward pass and before the
    update, so the weights are never touched by a NaN/Inf gradient. mmengine's fp16 loss scaler
    skips the optimizer step for overflowing gradients itself, so such skipped steps are not
    reported. The raised :class:`NonFiniteError` ends the run before ``CheckpointHook`` runs for
    that iteration (this hook's priority is ``VERY_HIGH``).

    Args:
        max_listed: how many offending parameters the error lists after the first.
    """

    priority = 'VERY_HIGH'

    def __init__(self, max_listed: int = 5) -> None:
        self.max_listed = max_listed
        self._handles: List[torch.utils.hooks.RemovableHandle] = []

    def before_train(self, runner) -> None:
        names: Dict[int, str] = {id(p): n for n, p in _unwrap(runner.model).named_parameters()}

        def check(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
            bad = [names.get(id(p), f'<unnamed {tuple(p.shape)}>')
                   for group in optimizer.param_groups for p in group['params']
                   if p.grad is not None and not torch.isfinite(p.grad).all()]
            if bad:
                loss = runner.message_hub.get_scalar('train/loss').current() \
                    if 'train/loss' in runner.message_hub.log_scalars else float('nan')
                more = f' (and {len(bad) - 1} more: {", ".join(bad[1:1 + self.max_listed])}' \
                    f'{", ..." if len(bad) > 1 + self.max_listed else ""})' if len(bad) > 1 else ''
                raise NonFiniteError(
                    f'non-finite gradient at iteration {runner.iter + 1} (epoch '
                    f'{runner.epoch + 1}): first in parameter {bad[0]}{more}; last logged loss '
                    f'{loss}. The update was not applied and no checkpoint of this state is '
                    'saved. Lower the learning rate, add a warm-up, or check the data.')

        for optimizer in _optimizers(runner.optim_wrapper):
            self._handles.append(optimizer.register_step_pre_hook(check))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        for key, value in (outputs or {}).items():
            if 'loss' in key and torch.is_tensor(value) and not torch.isfinite(value).all():
                raise NonFiniteError(f'non-finite {key} ({value.tolist()}) at iteration '
                                     f'{runner.iter}; no checkpoint of this state is saved')

    def after_train(self, runner) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _backbone_width(backbone: nn.Module) -> Optional[int]:
    """The channel width of the last output of an mmpoly backbone, or None if unknown."""
    widths: Optional[Sequence[int]] = getattr(backbone, 'stage_channels', None)
    out_indices: Optional[Sequence[int]] = getattr(backbone, 'out_indices', None)
    if not widths or not out_indices:
        return None
    return widths[out_indices[-1]]


@HOOKS.register_module()
class ModelCheckHook(Hook):
    """Before a run: the head's ``in_channels`` must equal the backbone's output width.

    Applies to classifiers whose neck keeps the width (none, or global average pooling) and
    whose backbone reports ``stage_channels`` / ``out_indices`` (mmpoly's). Otherwise the
    mismatch only shows up as a matrix-shape error deep inside the first forward pass.
    """

    priority = 'VERY_HIGH'

    def before_run(self, runner) -> None:
        model = _unwrap(runner.model)
        backbone, head = getattr(model, 'backbone', None), getattr(model, 'head', None)
        neck = getattr(model, 'neck', None)
        if backbone is None or head is None or not hasattr(head, 'in_channels'):
            return
        if neck is not None and type(neck).__name__ != 'GlobalAveragePooling':
            return
        width = _backbone_width(backbone)
        if width is not None and head.in_channels != width:
            raise ValueError(
                f'model.head.in_channels={head.in_channels} does not match the width of the '
                f'backbone output it receives: model.backbone.stage_channels'
                f'[{backbone.out_indices[-1]}]={width}; set head.in_channels={width}')


register_in_mmdet(HOOKS, DET_HOOKS)  # detection configs (default_scope='mmdet') use them too
