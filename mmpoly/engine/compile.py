"""``torch.compile`` of a model's forward parts, and ``--amp`` on the CPU.

:func:`compile_model_parts` compiles the backbone, neck and head of a built Runner's model in
place (``nn.Module.compile``): each part's ``__call__`` runs the compiled forward, while the
data preprocessor, the losses, mmengine's ``train_step`` and the optimizer step stay eager. So
a learning-rate change (a Python float in the optimizer) never reaches a compiled graph and
causes no recompilation, DDP wraps the same modules as without compiling, and the state dict
keeps its keys (no ``_orig_mod.`` prefix): checkpoints load into compiled and eager runs alike.
With inductor, :func:`torch_compile_kwargs` adds :data:`INDUCTOR_DEFAULTS` (channels-last
layout) to the options.

Not imported by ``mmpoly.engine``: ``tools/train.py`` imports it (``import mmpoly.engine.compile``
registers :class:`CPUAutocastOptimWrapper` in mmengine's ``OPTIM_WRAPPERS``).
"""
import contextlib
import logging
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS
from torch import nn

__all__ = ['COMPILED_PARTS', 'CPUAutocastOptimWrapper', 'CUDAGraphStepHook', 'CompileCountHook',
           'INDUCTOR_DEFAULTS', 'apply_compile', 'compile_count', 'compile_kwargs',
           'compile_model_parts', 'config_compile_kwargs', 'configure_amp', 'split_parts',
           'torch_compile_kwargs', 'uses_cuda_graphs']

#: The model attributes that are compiled when present (classifiers: backbone, neck, head;
#: detectors: backbone, neck). Detector heads (``rpn_head``, ``roi_head``) stay eager: their
#: inputs (proposal and RoI counts) change size every image and they call mmcv's compiled ops.
COMPILED_PARTS = ('backbone', 'neck', 'head')
#: The ``torch.compile`` keyword arguments ``compile_model`` may set.
COMPILE_KEYS = ('backend', 'mode', 'dynamic', 'fullgraph', 'options')


def compile_kwargs(value: Any) -> Optional[Dict[str, Any]]:
    """The ``torch.compile`` kwargs of a ``compile_model`` config value, None if it is off.

    ``True`` means the defaults (inductor); a dict gives kwargs among :data:`COMPILE_KEYS`.
    """
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(COMPILE_KEYS))
        if unknown:
            raise ValueError(f'compile_model: unknown torch.compile option(s) {unknown}; '
                             f'allowed: {list(COMPILE_KEYS)}')
        return dict(value)
    raise ValueError(f'compile_model must be True, False or a dict of torch.compile options '
                     f'({", ".join(COMPILE_KEYS)}), got {value!r}')


#: Inductor options that the compiled parts get unless ``compile_model``'s ``options`` set them.
#: ``force_layout_optimization``: inductor lays a graph's maps out channels-last (NHWC, the
#: layout of cuDNN's fast convolution kernels) by its own rules, one of which leaves a graph
#: NCHW if a convolution with a kernel over 1×1 halves its channels or more. PDC-comp's factors
#: do (128 -> 64, 256 -> 128, 3×3), so on CUDA its compiled graphs stayed NCHW while
#: ResNet18's went channels-last, and
#: cuDNN converted the maps before and after its NHWC kernels (nchwToNhwc / nhwcToNchw among
#: PDC-comp's costliest kernels on an H200, 2026-12-04). Forced, every model is laid out as
#: ResNet18 is. On the CPU inductor lays out channels-last anyway (oneDNN's rule comes first).
#: Graph outputs keep the eager strides (inductor's ``keep_output_stride``): mmcv's RoIAlign,
#: which reads NCHW memory, gets NCHW maps.
INDUCTOR_DEFAULTS: Dict[str, Any] = {'force_layout_optimization': True}


def torch_compile_kwargs(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The ``torch.compile`` keyword arguments of :func:`compile_kwargs`' ``kwargs``.

    With inductor (the default backend): a ``mode`` becomes the options it stands for
    (``torch._inductor.list_mode_options``; torch.compile takes a mode or options, not both),
    then :data:`INDUCTOR_DEFAULTS`, then ``kwargs['options']`` (which win) make ``options``.
    Other backends get ``kwargs`` as they are. Example: ``{'mode': 'reduce-overhead'}`` ->
    ``{'options': {'triton.cudagraphs': True, 'force_layout_optimization': True}}``.
    """
    kwargs = dict(kwargs)
    if kwargs.get('backend', 'inductor') != 'inductor':
        return kwargs
    from torch._inductor import list_mode_options
    mode = kwargs.pop('mode', None) or 'default'
    modes = list(list_mode_options())
    if mode not in modes:
        raise ValueError(f'compile_model: mode {mode!r} is not a torch.compile mode; '
                         f'allowed: {modes}')
    kwargs['options'] = {**list_mode_options(mode, kwargs.get('dynamic')),
                         **INDUCTOR_DEFAULTS, **(kwargs.get('options') or {})}
    return kwargs


def uses_cuda_graphs(kwargs: Optional[Dict[str, Any]]) -> bool:
    """Whether ``torch.compile`` with :func:`compile_kwargs`' ``kwargs`` records CUDA graphs
    (on CUDA tensors): inductor with ``triton.cudagraphs``, which its modes
    ``reduce-overhead`` and ``max-autotune`` set, or dynamo's ``cudagraphs`` backend."""
    if kwargs is None:
        return False
    kwargs = torch_compile_kwargs(kwargs)
    if 'options' not in kwargs:  # not inductor
        return kwargs.get('backend') == 'cudagraphs'
    return bool(kwargs['options'].get('triton.cudagraphs'))


def split_parts(model: nn.Module) -> Tuple[List[str], List[str]]:
    """(compiled, eager) child names of ``model``: the :data:`COMPILED_PARTS` it has, and the
    rest of its direct children that hold parameters or are heads (they stay eager)."""
    compiled = [name for name in COMPILED_PARTS
                if isinstance(getattr(model, name, None), nn.Module)]
    eager = [name for name, child in model.named_children()
             if name not in compiled and name != 'data_preprocessor'
             and (name.endswith('head') or any(True for _ in child.parameters()))]
    return compiled, eager


def compile_model_parts(model: nn.Module, kwargs: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    """Compile ``model``'s backbone / neck / head in place with ``torch.compile(
    **torch_compile_kwargs(kwargs))``; return (compiled, eager) names.

    ``model`` may be wrapped (DDP, mmengine's wrappers): its ``module`` is compiled, which the
    wrapper calls. ``nn.Module.compile`` keeps parameters, buffers and state-dict keys.
    """
    inner = model.module if is_model_wrapper(model) else model
    compiled, eager = split_parts(inner)
    if not compiled:
        raise ValueError(f'compile_model: {type(inner).__name__} has none of '
                         f'{list(COMPILED_PARTS)} to compile')
    for name in compiled:  # (torch.compile pops keys of its options: a copy each)
        getattr(inner, name).compile(**torch_compile_kwargs(kwargs))
    return compiled, eager


def compile_count() -> int:
    """Graphs dynamo has compiled in this process so far (first compilations and
    recompilations; ``torch._dynamo.utils.counters['stats']['unique_graphs']``)."""
    from torch._dynamo.utils import counters
    return int(counters['stats']['unique_graphs'])


class CompileCountHook(Hook):
    """Log how many graphs dynamo compiled during each training epoch.

    ``counts`` keeps ``(epoch, graphs compiled in it, total so far)``. The first epoch compiles
    (training mode, and the last, smaller batch); validation between epochs compiles the
    eval mode, outside the count. A later epoch that compiles anything is logged as a warning:
    something (a Python value, a shape) changes the compiled forward between iterations.
    """
    priority = 'VERY_LOW'

    def __init__(self) -> None:
        self.counts: List[Tuple[int, int, int]] = []
        self._start = 0

    def before_train_epoch(self, runner) -> None:
        self._start = compile_count()

    def after_train_epoch(self, runner) -> None:
        total = compile_count()
        graphs = total - self._start
        epoch = runner.epoch + 1  # mmengine counts the epoch up after this hook
        self.counts.append((epoch, graphs, total))
        message = (f'compile_model: training epoch {epoch} compiled {graphs} graphs '
                   f'({total} in this process)')
        if graphs and len(self.counts) > 1:
            print_log(message + ': recompiled after the first epoch (set TORCH_LOGS=recompiles '
                      'to see why)', logger='current', level=logging.WARNING)
        else:
            print_log(message, logger='current')


class CUDAGraphStepHook(Hook):
    """Tell torch that a new step begins before every training, validation and test iteration
    (``torch.compiler.cudagraph_mark_step_begin``), for a model compiled with CUDA graphs.

    CUDA graphs write their outputs into buffers that the next replay reuses; without the mark,
    torch cannot tell a new step from a second call within one and stops with "accessing tensor
    output of CUDAGraphs that has been overwritten by a subsequent run" (seen with
    ``tools/analysis_tools/benchmark.py --compile-mode reduce-overhead`` on an H200).
    """
    priority = 'VERY_HIGH'

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        torch.compiler.cudagraph_mark_step_begin()

    def before_val_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        torch.compiler.cudagraph_mark_step_begin()

    def before_test_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        torch.compiler.cudagraph_mark_step_begin()


def config_compile_kwargs(cfg: Any) -> Optional[Dict[str, Any]]:
    """:func:`compile_kwargs` of ``cfg.compile_model``; a ValueError also when mmengine's own
    ``compile`` is set beside it (tools/train.py checks this before building the Runner)."""
    kwargs = compile_kwargs(cfg.get('compile_model'))
    if kwargs is not None and cfg.get('compile'):
        raise ValueError('compile_model and mmengine\'s compile are both set: mmengine\'s '
                         'compile=True compiles train_step with the optimizer step (it '
                         'recompiles on every learning-rate change); keep compile_model only')
    return kwargs


def apply_compile(runner) -> Any:
    """Compile the parts of ``runner.model`` if ``runner.cfg.compile_model`` is set (one log
    line naming the compiled and the eager parts); return ``runner``."""
    kwargs = config_compile_kwargs(runner.cfg)
    if kwargs is None:
        return runner
    compiled, eager = compile_model_parts(runner.model, kwargs)
    call = torch_compile_kwargs(kwargs)
    runner.logger.info(
        f'compile_model: torch.compile({", ".join(f"{k}={v!r}" for k, v in call.items())}) '
        f'of {", ".join(compiled)}; eager: '
        f'{", ".join(eager + ["data preprocessor", "losses", "optimizer step"])}')
    runner.register_hook(CompileCountHook())
    if uses_cuda_graphs(kwargs):
        runner.register_hook(CUDAGraphStepHook())
    return runner


@OPTIM_WRAPPERS.register_module()
class CPUAutocastOptimWrapper(OptimWrapper):
    """An ``OptimWrapper`` whose forward runs under ``torch.autocast('cpu', dtype)``.

    mmengine's ``AmpOptimWrapper`` asserts a GPU; on the CPU mixed precision is bfloat16
    autocast, which needs no loss scaling (bfloat16 has float32's exponent range).

    Args:
        dtype (str): ``'bfloat16'`` (float16 autocast on the CPU is not offered).
        **kwargs: ``OptimWrapper``'s arguments.
    """

    def __init__(self, dtype: str = 'bfloat16', **kwargs) -> None:
        if dtype not in ('bfloat16', torch.bfloat16):
            raise ValueError(f'CPUAutocastOptimWrapper: dtype must be bfloat16, got {dtype!r}')
        super().__init__(**kwargs)
        self.cast_dtype = torch.bfloat16

    @contextlib.contextmanager
    def optim_context(self, model: nn.Module) -> Iterator[None]:
        with super().optim_context(model), torch.autocast('cpu', dtype=self.cast_dtype):
            yield


def configure_amp(cfg: Config, cuda: Optional[bool] = None) -> None:
    """Switch ``cfg.optim_wrapper`` to mixed precision (``--amp``).

    With CUDA: mmengine's ``AmpOptimWrapper`` (dynamic loss scaling unless the config sets
    ``loss_scale``). Without: :class:`CPUAutocastOptimWrapper` (bfloat16, no scaler). A
    wrapper type other than these or ``OptimWrapper`` is an error.
    """
    cuda = torch.cuda.is_available() if cuda is None else cuda
    wrapper = cfg.optim_wrapper.get('type', 'OptimWrapper')
    allowed = ('OptimWrapper', 'AmpOptimWrapper', 'CPUAutocastOptimWrapper')
    if wrapper not in allowed:
        raise ValueError(f'--amp needs optim_wrapper.type OptimWrapper or AmpOptimWrapper, '
                         f'the config has {wrapper!r}')
    if cuda:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
        return
    dtype = cfg.optim_wrapper.get('dtype') or 'bfloat16'
    if dtype != 'bfloat16':
        raise ValueError(f'--amp without CUDA runs bfloat16 autocast on the CPU; '
                         f'optim_wrapper.dtype is {dtype!r} (allowed: bfloat16)')
    cfg.optim_wrapper.type = 'CPUAutocastOptimWrapper'
    cfg.optim_wrapper.pop('loss_scale', None)
    cfg.optim_wrapper.dtype = 'bfloat16'
