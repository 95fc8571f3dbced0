"""Non-finite outputs: the error, where it starts, and the check of every validation/test pass.

* :class:`NonFiniteError` carries a ``cause``: a forward pass that is non-finite before any update
  of the run (the checkpoint or the initialisation is bad), stale BatchNorm running statistics
  (the same batch is finite with batch statistics), or a diverging training step. Each comes with
  the advice that fits it.
* :func:`first_non_finite_output` reruns one batch with forward hooks on every module and names
  the first module (in execution order) whose output is not finite. It runs only on a failing
  batch, so a healthy run pays nothing for it.
* :class:`NonFiniteValidationHook` checks every validation and test batch (the predictions and
  the outputs of the model's top-level parts, e.g. backbone, neck, head) and raises on the first
  non-finite one. The evaluator never sees that pass, so ``CheckpointHook(save_best=...)`` never
  saves a "best" checkpoint from it.
"""
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
from mmengine.hooks import Hook
from mmengine.runner import BaseLoop
from mmengine.structures import BaseDataElement
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from mmpoly.registry import DET_HOOKS, HOOKS, register_in_mmdet

from .checkpoint import unwrap_model as unwrap

__all__ = ['NonFiniteError', 'NonFiniteOutput', 'all_finite', 'first_non_finite_output',
           'first_non_finite_state', 'finite_with_batch_statistics', 'NonFiniteValidationHook']

BN_DOC = 'docs/en/training.md, "When to recompute BN statistics"'


class NonFiniteError(FloatingPointError):
    """A loss, gradient or model output is NaN or infinite.

    Attributes:
        cause: one of :attr:`BEFORE_UPDATE`, :attr:`RUNNING_STATS`, :attr:`DIVERGING_STEP`, or
            None where it is not known.
        where: the first non-finite module output or parameter, where it was found.
    """

    BEFORE_UPDATE = 'before_update'
    RUNNING_STATS = 'running_stats'
    DIVERGING_STEP = 'diverging_step'

    ADVICE = {
        BEFORE_UPDATE:
        'No update of this run has been applied yet, so the learning rate is not the cause: the '
        'weights or the BatchNorm running statistics that were loaded (checkpoint, '
        'init_cfg/load_from) or initialised already give a non-finite forward pass. Check the '
        'checkpoint; if it comes from a short or high-learning-rate classifier run, recompute '
        f'its BN statistics (RecomputeBNHook; {BN_DOC}).',
        RUNNING_STATS:
        'The same batch is finite with batch statistics (BN in train mode): the BatchNorm '
        'running statistics lag behind the weights, and the products of a polynomial block '
        'amplify the mismatch. Recompute them before validation and before handing the '
        f'checkpoint on: custom_hooks=[..., dict(type=\'RecomputeBNHook\')] ({BN_DOC}).',
        DIVERGING_STEP:
        'Training diverged after {updates} update(s): lower the learning rate, add or lengthen '
        'the warm-up, or clip gradients (optim_wrapper.clip_grad=dict(max_norm=...)); check '
        'the data.',
    }

    def __init__(self, message: str, cause: Optional[str] = None,
                 where: Optional[str] = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.where = where


def iter_tensors(obj: Any) -> Iterator[Tensor]:
    """Every tensor in a tensor / list / tuple / dict / mmengine data element, recursively."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, BaseDataElement):
        for value in obj.values():
            yield from iter_tensors(value)
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from iter_tensors(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from iter_tensors(value)


def all_finite(obj: Any) -> bool:
    """Whether every floating-point (or complex) tensor in ``obj`` is finite, read back from each
    device once, however many tensors ``obj`` holds.

    Per tensor its largest absolute value (the ∞-norm: NaN and ±Inf propagate to it, finite
    values cannot overflow), whether that is finite, and one ``bool`` over all of them per
    device. A ``bool`` per tensor would wait for the GPU once per tensor: for the gradient check,
    once per parameter at every training step. Sparse tensors count by their stored values.
    """
    finite: Dict[torch.device, List[Tensor]] = {}
    for tensor in iter_tensors(obj):
        if tensor.is_floating_point() or tensor.is_complex():
            tensor = tensor.detach()
            tensor = tensor.coalesce().values() if tensor.is_sparse else tensor
            if tensor.numel() > 0:  # the ∞-norm of an empty tensor is an error
                largest = torch.linalg.vector_norm(tensor, float('inf'))
                finite.setdefault(tensor.device, []).append(torch.isfinite(largest))
    return all(bool(torch.stack(flags).all()) for flags in finite.values())


def _largest_finite(obj: Any) -> float:
    values = [t.detach().abs().nan_to_num(0.0, 0.0, 0.0).max().item()
              for t in iter_tensors(obj) if t.is_floating_point() and t.numel()]
    return max(values, default=0.0)


def training_iterations(runner) -> int:
    """Training iterations done so far; 0 in a test/val-only run (the train loop is not built,
    and reading ``runner.iter`` would build it and its dataloader)."""
    loop = getattr(runner, '_train_loop', None)
    return loop.iter if isinstance(loop, BaseLoop) else 0


@dataclass
class NonFiniteOutput:
    """The first module whose output was not finite."""

    name: str
    type: str
    inputs_finite: bool
    input_max: float  # the largest finite |value| of its inputs

    def describe(self) -> str:
        origin = (f'from finite inputs (largest |x| {self.input_max:.3g})'
                  if self.inputs_finite else 'from a non-finite input')
        return f'{self.name} ({self.type}) {origin}'


def first_non_finite_output(model: nn.Module, run: Callable[[], Any]) -> Optional[NonFiniteOutput]:
    """Call ``run()`` (one forward pass of ``model``, no gradients) with a forward hook on every
    submodule; return the first module, in execution order, whose output is not finite, or None
    if every module output is finite."""
    found: List[NonFiniteOutput] = []

    def make_hook(name: str) -> Callable:

        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            if not found and not all_finite(output):
                found.append(NonFiniteOutput(name, type(module).__name__, all_finite(inputs),
                                             _largest_finite(inputs)))

        return hook

    model = unwrap(model)
    handles = [m.register_forward_hook(make_hook(n)) for n, m in model.named_modules() if n]
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None


def first_non_finite_state(model: nn.Module) -> Optional[str]:
    """The name of the first parameter or buffer holding a NaN/Inf, or None."""
    for name, tensor in [*unwrap(model).named_parameters(), *unwrap(model).named_buffers()]:
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            return name
    return None


def finite_with_batch_statistics(model: nn.Module, run: Callable[[], Any]) -> Optional[bool]:
    """Whether ``run()`` gives finite outputs when every BatchNorm in eval mode normalises with
    the batch's statistics instead. The running statistics and modes are restored afterwards.

    None if no BatchNorm uses running statistics.
    """
    layers = [m for m in unwrap(model).modules() if isinstance(m, _BatchNorm) and not m.training
              and m.track_running_stats]
    if not layers:
        return None
    saved = [{k: v.clone() for k, v in m.named_buffers(recurse=False)} for m in layers]
    try:
        for layer in layers:
            layer.train()
        with torch.no_grad():
            return all_finite(run())
    except ValueError:  # e.g. a single value per channel: no batch statistics to compare with
        return None
    finally:
        for layer, buffers in zip(layers, saved):
            layer.eval()
            for key, value in buffers.items():
                getattr(layer, key).copy_(value)


@HOOKS.register_module()
class NonFiniteValidationHook(Hook):
    """A validation or test pass with non-finite outputs is an error naming where they start.

    Every batch: one ``isfinite`` over the predictions and over the outputs of the model's
    top-level parts (backbone, neck, heads). On the first non-finite batch, that batch is rerun
    with hooks on every module (:func:`first_non_finite_output`) and, where BatchNorm layers use
    running statistics, once more with batch statistics, to tell stale statistics from a bad
    checkpoint or a diverged run. The :class:`NonFiniteError` is raised before the evaluator
    computes a metric, so no "best" checkpoint is saved from that pass.
    """

    priority = 'VERY_HIGH'

    def __init__(self) -> None:
        self._handles: List[torch.utils.hooks.RemovableHandle] = []
        self._bad_part: Optional[str] = None

    def _watch(self, runner) -> None:
        self._unwatch()
        self._bad_part = None

        def make_hook(name: str) -> Callable:

            def hook(module: nn.Module, inputs: Any, output: Any) -> None:
                if self._bad_part is None and not all_finite(output):
                    self._bad_part = name

            return hook

        for name, child in unwrap(runner.model).named_children():
            if name != 'data_preprocessor':
                self._handles.append(child.register_forward_hook(make_hook(name)))

    def _unwatch(self, runner=None, metrics=None) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    before_val_epoch = before_test_epoch = _watch
    after_val_epoch = after_test_epoch = _unwatch

    def after_val_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._check(runner, 'val', batch_idx, data_batch, outputs)

    def after_test_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._check(runner, 'test', batch_idx, data_batch, outputs)

    def _check(self, runner, mode: str, batch_idx: int, data_batch: Any, outputs: Any) -> None:
        if self._bad_part is None and all_finite(outputs):
            return
        part = self._bad_part
        self._unwatch()
        model = runner.model
        step = model.val_step if mode == 'val' else model.test_step
        located = first_non_finite_output(model, lambda: step(data_batch))
        state = first_non_finite_state(model)
        updates = training_iterations(runner)
        where = located.describe() if located else None
        if state is not None:
            cause = NonFiniteError.BEFORE_UPDATE if updates == 0 else \
                NonFiniteError.DIVERGING_STEP
            finding = f'the model holds non-finite values, first in {state}'
        else:
            batch_stats = finite_with_batch_statistics(model, lambda: step(data_batch))
            cause = NonFiniteError.RUNNING_STATS if batch_stats else \
                NonFiniteError.BEFORE_UPDATE if updates == 0 else NonFiniteError.DIVERGING_STEP
            finding = 'every parameter and buffer is finite'
        first = f'first non-finite layer output: {where}' if where else \
            f'every layer output is finite, the predictions are not (first in {part or "outputs"})'
        raise NonFiniteError(
            f'non-finite {mode} outputs at batch {batch_idx} (after {updates} training '
            f'iteration(s)): {first}; {finding}. No metric is computed and no checkpoint is '
            f'saved from this pass. {NonFiniteError.ADVICE[cause].format(updates=updates)}',
            cause=cause, where=where or state)


register_in_mmdet(HOOKS, DET_HOOKS)
