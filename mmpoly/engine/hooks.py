"""Hooks that stop a run early and loudly instead of letting it go wrong silently.

* :class:`NonFiniteCheckHook` stops training at the first non-finite gradient (what a NaN/Inf loss
  produces), before the optimizer applies it, naming the iteration, the loss and the first
  parameter with a non-finite gradient; no checkpoint of that state is ever written.
* :class:`ModelCheckHook` compares the classifier head's ``in_channels`` with the width the
  backbone actually returns, and every ``num_classes`` of the model with its data's classes,
  before any data is seen.

mmpoly's configs switch both on through ``custom_hooks`` (``configs/_base_/default_runtime.py``
and the detection bases); ``custom_hooks=[]`` switches them off.
"""
import difflib
import functools
import inspect
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from mmengine.hooks import Hook
from torch import nn

from mmpoly.registry import DET_HOOKS, HOOKS, register_in_mmdet

from .checkpoint import unwrap_model
from .non_finite import NonFiniteError, all_finite, first_non_finite_output

__all__ = ['NonFiniteError', 'NonFiniteCheckHook', 'ModelCheckHook', 'UnknownHookOptionError',
           'check_hook_options', 'strict_options', 'class_counts', 'class_count_problem',
           'ClassCountError']


class UnknownHookOptionError(TypeError):
    """A hook was configured with an option it does not have."""


class ClassCountError(ValueError):
    """A ``num_classes`` of the model is not the number of classes of its data."""


def check_hook_options(hook: str, given: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Raise :class:`UnknownHookOptionError` for the first key of ``given`` not in ``allowed``,
    naming the key, the hook, its close matches and the hook's options."""
    allowed = sorted(allowed)
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=3, cutoff=0.6)
            hint = f'; did you mean {" or ".join(map(repr, close))}?' if close else '.'
            options = f'Its options: {", ".join(allowed)}.' if allowed else \
                'It takes no options.'
            raise UnknownHookOptionError(f'{hook} has no option {key!r}{hint} {options}')


def named_parameters(function: Any) -> List[str]:
    """The parameters of ``function`` that can be given by keyword (without ``self``)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [name for name, p in inspect.signature(function).parameters.items()
            if p.kind in kinds and name != 'self']


def strict_options(cls: type) -> type:
    """Class decorator: an unknown keyword of ``cls(...)`` raises
    :class:`UnknownHookOptionError` (with close matches) when the hook is built."""
    init = cls.__init__
    allowed = named_parameters(init) if init is not object.__init__ else []

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_hook_options(cls.__name__, kwargs, allowed)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


def _optimizers(optim_wrapper) -> List[torch.optim.Optimizer]:
    """The torch optimizers of an ``OptimWrapper`` or an ``OptimWrapperDict``."""
    wrappers = optim_wrapper.values() if hasattr(optim_wrapper, 'values') else [optim_wrapper]
    return [wrapper.optimizer for wrapper in wrappers]


@HOOKS.register_module()
@strict_options
class NonFiniteCheckHook(Hook):
    """Stop at the first non-finite gradient or loss; never checkpoint that state.

    The check runs as a step pre-hook of the optimizer, after the backward pass and before the
    update, so the weights are never touched by a NaN/Inf gradient. It reads one value back from
    the device per step (:func:`~.non_finite.all_finite`), whatever the number of parameters.
    mmengine's fp16 loss scaler skips the optimizer step for overflowing gradients itself, so
    such skipped steps are not reported. The raised :class:`NonFiniteError` ends the run before
    ``CheckpointHook`` runs for that iteration (this hook's priority is ``VERY_HIGH``).

    Args:
        max_listed: how many offending parameters the error lists after the first.
    """

    priority = 'VERY_HIGH'

    def __init__(self, max_listed: int = 5) -> None:
        if isinstance(max_listed, bool) or not isinstance(max_listed, int) or max_listed < 0:
            raise ValueError(f'NonFiniteCheckHook: max_listed must be a whole number >= 0 (how '
                             f'many offending parameters the error lists), got {max_listed!r}')
        self.max_listed = max_listed
        self._handles: List[torch.utils.hooks.RemovableHandle] = []
        self._updates = 0  # optimizer steps applied in this process
        self._batch = None  # the current training batch, to rerun on failure

    def _diagnosis(self, runner) -> Tuple[str, str, Optional[str]]:
        """(cause, text, first non-finite layer output) of a non-finite loss or gradient."""
        cause = NonFiniteError.BEFORE_UPDATE if self._updates == 0 else \
            NonFiniteError.DIVERGING_STEP
        located = None
        if self._batch is not None:
            model = runner.model
            located = first_non_finite_output(
                model, lambda: model(**model.data_preprocessor(self._batch, True), mode='loss'))
        where = located.describe() if located else None
        forward = f'first non-finite layer output of the forward pass: {where}' if where else \
            'every layer output of the forward pass is finite'
        updates = 'before any update of this run' if self._updates == 0 else \
            f'after {self._updates} update(s) of this run'
        return cause, (f'{updates}; {forward}. ' +
                       NonFiniteError.ADVICE[cause].format(updates=self._updates)), where

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._batch = data_batch

    def before_train(self, runner) -> None:
        names: Dict[int, str] = {
            id(p): n for n, p in unwrap_model(runner.model).named_parameters()}
        self._updates = 0

        def count(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
            self._updates += 1

        def check(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
            params = [p for group in optimizer.param_groups for p in group['params']
                      if p.grad is not None]
            if all_finite([p.grad for p in params]):
                return
            bad = [names.get(id(p), f'<unnamed {tuple(p.shape)}>') for p in params
                   if not all_finite(p.grad)]
            if bad:
                loss = runner.message_hub.get_scalar('train/loss').current() \
                    if 'train/loss' in runner.message_hub.log_scalars else float('nan')
                more = f' (and {len(bad) - 1} more: {", ".join(bad[1:1 + self.max_listed])}' \
                    f'{", ..." if len(bad) > 1 + self.max_listed else ""})' if len(bad) > 1 else ''
                cause, diagnosis, where = self._diagnosis(runner)
                raise NonFiniteError(
                    f'non-finite gradient at iteration {runner.iter + 1} (epoch '
                    f'{runner.epoch + 1}): first in parameter {bad[0]}{more}; last logged loss '
                    f'{loss}. The update was not applied and no checkpoint of this state is '
                    f'saved. {diagnosis}', cause=cause, where=where or bad[0])

        for optimizer in _optimizers(runner.optim_wrapper):
            self._handles.append(optimizer.register_step_pre_hook(check))
            self._handles.append(optimizer.register_step_post_hook(count))

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        losses = {key: value for key, value in (outputs or {}).items()
                  if 'loss' in key and torch.is_tensor(value)}
        if not all_finite(list(losses.values())):  # one read per step, as for the gradients
            key, value = next((k, v) for k, v in losses.items() if not all_finite(v))
            cause, diagnosis, where = self._diagnosis(runner)
            # runner.iter counts the iterations before this one (mmengine adds 1 after the
            # after_train_iter hooks): the same 1-based number as the gradient check's
            raise NonFiniteError(f'non-finite {key} ({value.tolist()}) at iteration '
                                 f'{runner.iter + 1}; no checkpoint of this state is saved; '
                                 f'{diagnosis}', cause=cause, where=where)
        self._batch = None

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


def _is_mmdet(module: nn.Module, names: Tuple[str, ...]) -> bool:
    """Whether ``module`` is an instance of one of mmdet's classes ``names`` (without importing
    mmdet's models)."""
    return any(cls.__name__ in names and cls.__module__.startswith('mmdet.')
               for cls in type(module).__mro__)


def _positive_count(module: nn.Module) -> bool:
    """Whether ``module.num_classes`` is a class count (mmpretrain's VGG, AlexNet and LeNet5
    backbones keep -1 for "no classifier of their own")."""
    count = getattr(module, 'num_classes', None)
    return isinstance(count, int) and not isinstance(count, bool) and count > 0


def class_counts(model: nn.Module) -> Tuple[Optional[str], Dict[str, int]]:
    """The kind of ``model`` and ``{module path: num_classes}`` of its parts that classify:

    * 'classifier' (mmpretrain's ImageClassifier, also inside a TTA model): every module with a
      positive ``num_classes`` outside the backbone (the head, a label-smoothing loss, a data
      preprocessor's batch augments);
    * 'detector': mmdet's box and mask heads (not the RPN's "object", nor semantic or panoptic
      heads, whose classes are others);
    * (None, {}) for any other model (e.g. a retriever, whose labels are gallery indices)."""
    from mmengine.model import BaseTTAModel
    from mmpretrain.models import ImageClassifier
    if isinstance(model, BaseTTAModel):
        model = model.module
    if isinstance(model, ImageClassifier):
        return 'classifier', {
            name: module.num_classes for name, module in model.named_modules()
            if name and _positive_count(module) and name.split('.')[0] != 'backbone'}
    heads = {name: module.num_classes for name, module in model.named_modules()
             if _is_mmdet(module, ('BBoxHead', 'FCNMaskHead')) and _positive_count(module)}
    return ('detector', heads) if heads else (None, {})


def _first_label_from(dataset: Any, count: int) -> Optional[Tuple[int, int]]:
    """(index, label) of the first sample of ``dataset`` with a ``gt_label`` >= ``count``; None
    if there is none, or for a dataset that is no mmengine dataset (no ``get_data_info``)."""
    if not hasattr(dataset, 'get_data_info'):
        return None
    for index in range(len(dataset)):
        label = dataset.get_data_info(index).get('gt_label')
        values = np.asarray(label if label is not None else []).reshape(-1)
        if values.size and int(values.max()) >= count:
            return index, int(values.max())
    return None


def _listed(counts: Dict[str, int]) -> str:
    """'model.head.num_classes=5, model.head.loss_module.num_classes=5'."""
    return ', '.join(f'model.{name}.num_classes={count}' for name, count in counts.items())


def _verb(counts: Dict[str, int], one: str, several: str) -> str:
    """``one`` for one count, else ``several``."""
    return one if len(counts) == 1 else several


def class_count_problem(model: nn.Module, dataset: Any, loader: str) -> Optional[str]:
    """Why ``model`` cannot be trained or evaluated on ``dataset`` (of ``loader``, e.g.
    'train_dataloader'), or None (:func:`class_counts` says which parts are compared):

    * a detector: every box and mask head's ``num_classes`` must be the number of the dataset's
      ``metainfo['classes']``, as mmdet's NumClassCheckHook requires: labels past the last
      class read as background, and predictions of classes the data does not have break the
      COCO evaluation;
    * a classifier: no ``gt_label`` may reach a ``num_classes`` (in training the loss fails on
      an index error, on a GPU a device-side assertion; in an evaluation the sample counts as
      wrong whatever the model does). The labels are read only where the metainfo names more
      classes than the model has, or none (e.g. Fashion-MNIST converted to the ImageNet layout
      keeps ImageNet's 1,000 names for its labels 0-9), up to the first one too large; more
      outputs than labels are allowed.
    """
    kind, counts = class_counts(model)
    if not counts:
        return None
    classes = getattr(dataset, 'metainfo', {}).get('classes')
    named = len(classes) if isinstance(classes, (list, tuple)) and classes else None
    if kind == 'detector':
        wrong = {name: count for name, count in counts.items() if count != named}
        if named is None or not wrong:
            return None
        shown = ', '.join(map(repr, classes[:3])) + (', ...' if named > 3 else '')
        return (f'{_listed(wrong)} {_verb(wrong, "does", "do")} not match the {named} classes of '
                f'{loader}.dataset ({type(dataset).__name__}: {shown}): a detector reads the '
                'labels past its last class as background, and its COCO evaluation fails on '
                f'classes the data does not have. Set num_classes={named} there (every box and '
                'mask head), or give the dataset the classes of the model '
                '(metainfo=dict(classes=...))')
    if named is not None and named <= min(counts.values()):
        return None
    found = _first_label_from(dataset, min(counts.values()))
    if found is None:
        return None
    index, label = found
    wrong = {name: count for name, count in counts.items() if label >= count}
    consequence = ('the loss would fail on an index error (on a GPU, a device-side assertion)'
                   if loader == 'train_dataloader' else
                   'the model cannot predict it, and the evaluation would count it wrong')
    return (f'{_listed(wrong)} {_verb(wrong, "is", "are")} too few for the labels of '
            f'{loader}.dataset ({type(dataset).__name__}): its sample {index} has label {label}; '
            f'{consequence}. Set num_classes to the number of classes of the data (at least '
            f'{label + 1})')


@HOOKS.register_module()
@strict_options
class ModelCheckHook(Hook):
    """The model against itself and against its data, before any data is seen.

    * Before a run: the head's ``in_channels`` must equal the backbone's output width, for
      classifiers whose neck keeps the width (none, or global average pooling) and whose
      backbone reports ``stage_channels`` / ``out_indices`` (mmpoly's). Otherwise the mismatch
      only shows up as a matrix-shape error deep inside the first forward pass.
    * Before training (for the training and the validation data), a validation or a test:
      every ``num_classes`` of the model (:func:`class_counts`) must be the number of classes of
      the loader's dataset (:func:`class_count_problem`), else a :class:`ClassCountError`.
      Otherwise labels past the outputs are an index error in the loss (a device-side assertion
      on a GPU), or, in a detector, background; and a detector's extra classes break its COCO
      evaluation.
    """

    priority = 'VERY_HIGH'

    def __init__(self) -> None:
        self._checked_loaders = set()

    def before_run(self, runner) -> None:
        model = unwrap_model(runner.model)
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

    def _check_classes(self, runner, loader: str) -> None:
        """Raise a :class:`ClassCountError` with :func:`class_count_problem` for
        ``runner.<loader>``'s dataset (once per loader)."""
        if loader in self._checked_loaders:
            return
        self._checked_loaders.add(loader)
        problem = class_count_problem(unwrap_model(runner.model),
                                      getattr(runner, loader).dataset, loader)
        if problem:
            raise ClassCountError(problem)

    def before_train(self, runner) -> None:
        self._check_classes(runner, 'train_dataloader')
        if runner._val_loop is not None:  # built by Runner.train: checked before any step
            self._check_classes(runner, 'val_dataloader')

    def before_val(self, runner) -> None:
        self._check_classes(runner, 'val_dataloader')

    def before_test(self, runner) -> None:
        self._check_classes(runner, 'test_dataloader')


register_in_mmdet(HOOKS, DET_HOOKS)  # detection configs (default_scope='mmdet') use them too
