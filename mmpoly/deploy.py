"""An inference-optimised copy of any mmpoly model (classifier, backbone or detector).

    import mmpoly.deploy
    fused = mmpoly.deploy.inference_copy(model)   # the original model is left untouched

The copy is in eval mode, with

* every BatchNorm folded into the conv that feeds it (the norm becomes ``nn.Identity``), where
  that conv → BN order is certain from the module structure:

  - an mmcv ``ConvModule`` whose ``order`` puts the norm right after the conv (mmpoly's
    ``Factor`` and projections, the non-local convs, mmdet's heads and FPN);
  - consecutive ``Conv2d``, ``BatchNorm`` children of a plain ``nn.Sequential`` (downsample
    shortcuts);
  - ``convK`` and the norm named by ``normK_name`` (the convention of mmpretrain's and mmdet's
    ResNet stems and blocks, which mmpoly's blocks and stems keep);

  only plain ``nn.Conv2d`` convs are folded (a subclass may transform its weight, e.g. weight
  standardisation), and only BNs with running statistics;
* every learnable term scale α (a scalar ``scale`` multiplying the output of a ``projection``:
  PDC terms, Π-net blocks) folded into the last linear layer of that projection — the conv (after
  BN folding) when the projection ends conv[-BN] without activation, or an affine norm (BN, GN,
  affine IN) — and then set to 1. A projection that ends in an activation or a non-affine
  InstanceNorm keeps its α (folding would not be exact).

Batch statistics are not used in eval mode, so the copy computes the same function as
``model.eval()`` up to float rounding; ``tests/test_deploy.py`` checks it for every family.
The copy is for inference only (do not train it: the folded BNs no longer update).

ONNX (needs ``pip install mmpoly[deploy]``: onnx, onnxscript, onnxruntime)::

    path = mmpoly.deploy.export_onnx(model, 'model.onnx', (3, 32, 32), dynamic_batch=True)
    parity = mmpoly.deploy.onnx_parity(model, path, torch.randn(8, 3, 32, 32))

:func:`export_onnx` exports the inference copy (float32, on the CPU) with ``torch.onnx.export``
(the ``torch.export`` based exporter, the default of torch >= 2.9), checks the graph with the
ONNX checker and writes the file atomically. Its input is the *normalised* image batch, as after
the config's data preprocessor (mmdeploy's convention); its output the classifier's logits
(``mode='tensor'``) or, for a detector, the backbone + neck feature maps (``extract_feat``).
"""
import contextlib
import copy
import inspect
import math
import numbers
import os
import os.path as osp
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from mmengine.config import Config
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ['DeployReport', 'inference_copy', 'fuse_for_inference', 'TensorForward',
           'input_shape_from_config', 'fixed_size_modules', 'export_onnx', 'onnx_session',
           'run_onnx', 'OnnxParity', 'compare_outputs', 'onnx_parity', 'DEFAULT_OPSET',
           'MIN_OPSET', 'opset_range', 'check_opset', 'PARITY_RTOL', 'load_model', 'is_detector',
           'RUNTIMES', 'onnx_speed', 'onnx_speed_checks', 'format_onnx_speed', 'run_onnx_benchmark',
           'format_onnx_benchmark']


@dataclass
class DeployReport:
    fused_norms: int = 0  # BatchNorms folded into their conv
    folded_scales: int = 0  # α scales folded into their projection (α set to 1)
    kept_scales: int = 0  # α scales that could not be folded exactly


def _foldable_conv(conv: nn.Module) -> bool:
    return type(conv) is nn.Conv2d


def _foldable_bn(norm: nn.Module) -> bool:
    return isinstance(norm, _BatchNorm) and norm.running_mean is not None \
        and norm.running_var is not None


@torch.no_grad()
def _fold_bn_into_conv(conv: nn.Conv2d, bn: _BatchNorm) -> None:
    """conv ← bn ∘ conv in eval mode: W' = W·γ/σ, b' = (b − μ)·γ/σ + β."""
    std = torch.sqrt(bn.running_var + bn.eps)
    gamma = bn.weight if bn.weight is not None else torch.ones_like(std)
    beta = bn.bias if bn.bias is not None else torch.zeros_like(std)
    factor = gamma / std
    bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
    conv.weight.mul_(factor.reshape(-1, *([1] * (conv.weight.dim() - 1))).to(conv.weight))
    new_bias = ((bias - bn.running_mean) * factor + beta).to(conv.weight)
    if conv.bias is None:
        conv.bias = nn.Parameter(new_bias, requires_grad=conv.weight.requires_grad)
    else:
        conv.bias.copy_(new_bias)


def _conv_norm_pairs(module: nn.Module) -> Iterator[Tuple[nn.Module, str, str]]:
    """(parent, conv attribute, norm attribute) pairs of ``module`` whose order is certain."""
    if isinstance(module, ConvModule) and getattr(module, 'with_norm', False):
        order = list(module.order)
        if order.index('norm') == order.index('conv') + 1:
            yield module, 'conv', module.norm_name
    elif type(module).forward is nn.Sequential.forward and isinstance(module, nn.Sequential):
        names = [name for name, _ in module.named_children()]
        for conv_name, norm_name in zip(names, names[1:]):
            yield module, conv_name, norm_name
    else:
        for k in range(1, 4):
            norm_name = getattr(module, f'norm{k}_name', None)
            if isinstance(norm_name, str) and hasattr(module, f'conv{k}'):
                yield module, f'conv{k}', norm_name


def _fuse_norms(model: nn.Module) -> int:
    fused = 0
    for module in list(model.modules()):
        for parent, conv_name, norm_name in _conv_norm_pairs(module):
            conv, norm = getattr(parent, conv_name), getattr(parent, norm_name)
            if _foldable_conv(conv) and _foldable_bn(norm) and conv.out_channels == \
                    norm.num_features:
                _fold_bn_into_conv(conv, norm)
                setattr(parent, norm_name, nn.Identity())
                fused += 1
    return fused


def _last_linear_layer(projection: nn.Module) -> Optional[nn.Module]:
    """The layer whose affine output the projection returns, or None if it ends non-linearly."""
    last = projection
    while isinstance(last, nn.Sequential) and len(last) > 0:
        last = last[-1]
    if isinstance(last, ConvModule):
        with_norm = getattr(last, 'with_norm', False)
        applied = [layer for layer in last.order if layer == 'conv'
                   or (layer == 'norm' and with_norm)
                   or (layer == 'act' and getattr(last, 'with_activation', False))]
        if applied[-1] == 'act':
            return None
        if applied[-1] == 'norm' and not isinstance(last.norm, nn.Identity):
            last = last.norm
        elif applied[-1] == 'norm' and applied[-2] == 'conv' or applied[-1] == 'conv':
            last = last.conv  # a folded norm (Identity) right after the conv, or no norm
        else:
            return None
    if _foldable_conv(last):
        return last
    affine_norm = (_BatchNorm, nn.GroupNorm, nn.InstanceNorm2d)
    if isinstance(last, affine_norm) and getattr(last, 'weight', None) is not None \
            and getattr(last, 'bias', None) is not None:
        return last  # α·(γ x̂ + β) = (αγ) x̂ + αβ
    return None


@torch.no_grad()
def _fold_scales(model: nn.Module, report: DeployReport) -> None:
    for module in model.modules():
        scale, projection = getattr(module, 'scale', None), getattr(module, 'projection', None)
        if not (isinstance(scale, nn.Parameter) and scale.dim() == 0
                and isinstance(projection, nn.Module)):
            continue
        layer = _last_linear_layer(projection)
        if layer is None:
            report.kept_scales += 1
            continue
        alpha = scale.detach().clone()
        layer.weight.mul_(alpha.to(layer.weight))
        if layer.bias is not None:
            layer.bias.mul_(alpha.to(layer.bias))
        scale.fill_(1.0)
        report.folded_scales += 1


def fuse_for_inference(model: nn.Module) -> DeployReport:
    """Fold BNs and α scales of ``model`` in place (sets eval mode); see the module docstring."""
    model.eval()
    report = DeployReport()
    report.fused_norms = _fuse_norms(model)  # first: α then folds into a fused conv's bias
    _fold_scales(model, report)
    return report


def inference_copy(model: nn.Module) -> nn.Module:
    """An eval-mode, BN- and α-folded deep copy of ``model`` (which is not modified)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f'inference_copy needs a torch.nn.Module, got {type(model).__name__}')
    fused = copy.deepcopy(model)
    fuse_for_inference(fused)
    return fused


def _is_float32_cpu(model: nn.Module) -> bool:
    """Whether every tensor of ``model`` is on the CPU and every floating one float32."""
    return all(t.device.type == 'cpu' and (not t.is_floating_point() or t.dtype == torch.float32)
               for t in (*model.parameters(), *model.buffers()))


def _float32_cpu(model: nn.Module) -> nn.Module:
    """``model`` if it is float32 on the CPU, else a float32 CPU copy (``model`` untouched)."""
    return model if _is_float32_cpu(model) else copy.deepcopy(model).cpu().float()


# ----------------------------------------------------------------------------------------------
# ONNX export and onnxruntime parity

#: The ONNX opset of :func:`export_onnx` (torch's default for its ``torch.export`` exporter).
DEFAULT_OPSET = 20
#: The lowest ONNX opset :func:`export_onnx` takes: its ``torch.export``-based exporter
#: implements opset 18 and later.
MIN_OPSET = 18
#: Largest ``max|onnxruntime - PyTorch| / max|PyTorch|`` accepted by :func:`onnx_parity`'s
#: callers: both run float32, and only the summation order of the reductions differs (MLAS vs
#: oneDNN kernels), so each output carries a relative rounding error of a few float32 ulps
#: (u = 6e-8) per layer, times the depth and the reduction length's square root; measured
#: values are 1e-7 to 1.3e-6 (docs/en/deployment.md), 1e-4 leaves two orders of margin.
PARITY_RTOL = 1e-4


def _check_part(model: nn.Module, part: str) -> None:
    """A ValueError unless ``model`` can run as ``part`` (see :class:`TensorForward`)."""
    kind = type(model).__name__
    if part == 'features':
        if not callable(getattr(model, 'extract_feat', None)):
            raise ValueError(f"part='features' runs model.extract_feat, which {kind} has not; "
                             f"give a detector or classifier, or part='classifier'")
    elif part == 'classifier':
        if is_detector(model):
            raise ValueError(f"part='classifier' exports the logits of an mmpretrain classifier; "
                             f"{kind} is an mmdet detector: export its backbone + neck with "
                             f"part='features'")
        forward = getattr(model, 'forward', None)
        if forward is None or 'mode' not in inspect.signature(forward).parameters:
            raise ValueError(f"part='classifier' runs model(x, mode='tensor') (an mmpretrain "
                             f"classifier), but {kind}.forward takes no mode; give the "
                             f"classifier, or part='features' for a model with extract_feat")
    else:
        raise ValueError(f"part must be 'classifier' or 'features', got {part!r}")


class TensorForward(nn.Module):
    """One tensor in, the network's tensors out: the graph :func:`export_onnx` exports.

    ``part='classifier'``: ``model(x, mode='tensor')`` of an mmpretrain classifier, (B, C, H, W)
    -> logits (B, num_classes). ``part='features'``: ``model.extract_feat(x)`` of a detector (or
    a classifier), a tuple of feature maps (the backbone + neck outputs).
    """

    def __init__(self, model: nn.Module, part: str = 'classifier') -> None:
        super().__init__()
        _check_part(model, part)
        self.model = model
        self.part = part

    def forward(self, x: torch.Tensor) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
        if self.part == 'features':
            return tuple(self.model.extract_feat(x))
        return self.model(x, mode='tensor')


#: Fixed-size transforms of a classification test pipeline: the argument holding the output
#: size and the order of a pair in it. mmcv's ``CenterCrop`` and ``Resize`` take (w, h);
#: mmpretrain's ``RandomCrop``, ``RandomResizedCrop`` and EfficientNet crops take (h, w).
_SIZE_ARGUMENTS = {
    'CenterCrop': ('crop_size', 'wh'),
    'Resize': ('scale', 'wh'),
    'RandomCrop': ('crop_size', 'hw'),
    'RandomResizedCrop': ('scale', 'hw'),
    'EfficientNetCenterCrop': ('crop_size', 'hw'),
    'EfficientNetRandomCrop': ('scale', 'hw'),
}


def _crop_size(transform: dict) -> Optional[Tuple[int, int]]:
    """(H, W) a fixed-size image transform of a test pipeline produces, or None."""
    kind = str(transform.get('type', ''))
    if kind not in _SIZE_ARGUMENTS or (kind == 'Resize' and transform.get('keep_ratio', False)):
        return None
    argument, order = _SIZE_ARGUMENTS[kind]
    size = transform.get(argument)
    if isinstance(size, int):
        return size, size
    if isinstance(size, (list, tuple)) and len(size) == 2:
        first, second = int(size[0]), int(size[1])
        return (first, second) if order == 'hw' else (second, first)
    return None


def _padded_resize(transform: dict, divisor: int) -> Optional[Tuple[int, int]]:
    """(H, W) of a keep-ratio detection Resize's scale, padded to ``divisor`` (the batch size a
    detector's data preprocessor pads an image of that scale to)."""
    if transform.get('type') != 'Resize' or not isinstance(transform.get('scale'), (list, tuple)):
        return None
    width, height = transform['scale']
    return (math.ceil(height / divisor) * divisor, math.ceil(width / divisor) * divisor)


def _type_name(value: Any) -> str:
    """The qualified name of ``value``'s type ('numpy.ndarray'; 'list' for a builtin)."""
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == 'builtins' else \
        f'{cls.__module__}.{cls.__qualname__}'


def _option(transform: dict, cls: type, name: str) -> Any:
    """``transform[name]``, else the default of ``cls``'s argument ``name``."""
    if name in transform:
        return transform[name]
    return inspect.signature(cls).parameters[name].default


def input_shape_from_config(cfg: Union[Config, dict, str, os.PathLike]
                            ) -> Tuple[int, int, int]:
    """(C, H, W) of the network input the config's test pipeline and data preprocessor give.

    ``cfg``: an mmengine ``Config`` (or a dict of one), or the path of a config file, loaded
    as the tools load it (:func:`mmpoly.utils.startup.load_config`).

    * C: the number of ``mean`` values of the data preprocessor, else the backbone's
      ``in_channels`` (3 if neither is set);
    * (H, W): the crop / fixed resize of the test pipeline (ImageNet: 224×224); for audio
      (``LogMelSpectrogram``) n_mels × (1 + clip length // hop length) (Speech Commands: 32×32);
      for a detector the test ``Resize`` scale padded to ``pad_size_divisor`` (800×1344);
      otherwise the dataset's image size (``*MNIST*``: 28×28, ``*CIFAR*``: 32×32).

    Raises:
        ValueError: none of these applies; the message names what was looked at.
        TypeError: ``cfg`` is none of the types above.
        StartupError: the config file is missing or broken (its file and line named).
    """
    from mmpoly.datasets.audio_transforms import AudioFixLength, LogMelSpectrogram
    from mmpoly.utils.startup import load_config

    if isinstance(cfg, (str, os.PathLike)):
        cfg = load_config(os.fspath(cfg))
    elif isinstance(cfg, dict):
        cfg = Config(cfg)
    elif not isinstance(cfg, Config):
        raise TypeError(f'cfg must be an mmengine Config, a dict or the path of a config file '
                        f'(str or os.PathLike), got {_type_name(cfg)}')
    model_cfg = cfg.model
    preprocessor = model_cfg.get('data_preprocessor') or cfg.get('data_preprocessor') or {}
    backbone = model_cfg.get('backbone', {}) or {}
    if preprocessor.get('mean') is not None:
        channels = len(preprocessor['mean'])
    else:
        channels = int(backbone.get('in_channels', 3))
    loader = cfg.get('test_dataloader') or cfg.get('val_dataloader') or {}
    dataset = loader.get('dataset', {}) or {}
    while 'dataset' in dataset:  # wrappers (ClassBalancedDataset, RepeatDataset, …)
        dataset = dataset['dataset']
    pipeline = list(dataset.get('pipeline', None) or cfg.get('test_pipeline', None) or [])
    for transform in reversed(pipeline):
        size = _crop_size(transform)
        if size is not None:
            return channels, size[0], size[1]
    for transform in pipeline:
        if transform.get('type') == 'LogMelSpectrogram':
            lengths = [_option(t, AudioFixLength, 'length') for t in pipeline
                       if t.get('type') == 'AudioFixLength']
            if not lengths or not isinstance(lengths[0], int):
                raise ValueError('the test pipeline has LogMelSpectrogram but no AudioFixLength '
                                 'with an int length: the number of frames is not fixed; give '
                                 'the input shape (--shape C H W)')
            return channels, int(_option(transform, LogMelSpectrogram, 'n_mels')), \
                1 + lengths[0] // int(_option(transform, LogMelSpectrogram, 'hop_length'))
    if 'rpn_head' in model_cfg or 'roi_head' in model_cfg:
        divisor = int(preprocessor.get('pad_size_divisor', 1))
        for transform in pipeline:
            size = _padded_resize(transform, divisor)
            if size is not None:
                return channels, size[0], size[1]
    dataset_type = str(dataset.get('type', ''))
    if 'MNIST' in dataset_type:
        return channels, 28, 28
    if 'CIFAR' in dataset_type:
        return channels, 32, 32
    raise ValueError(f'cannot tell the input size from the config: its test pipeline '
                     f'{[t.get("type") for t in pipeline]} has no crop, fixed resize or '
                     f'LogMelSpectrogram, and its test dataset type {dataset_type!r} is not a '
                     f'CIFAR/MNIST one; give the input shape (--shape C H W)')


def load_model(config: str, checkpoint: Optional[str] = None) -> Tuple[Any, nn.Module]:
    """(cfg, model) of an mmpoly config file, in eval mode, with the config's data preprocessor
    (as the Runner builds it) and ``checkpoint``'s ``state_dict`` loaded strictly (keys and
    shapes as :func:`mmpoly.fileio.compare_state_dicts` compares them; None: the
    initial weights; a backbone's ``Pretrained`` init is not loaded either way).

    Raises:
        ValueError: the checkpoint holds no state_dict or one with other keys or shapes (each
            listed).
    """
    from mmpoly.fileio import compare_state_dicts, load_checkpoint_file
    from mmpoly.utils import register_all_modules
    from mmpoly.utils.complexity import build_model, standalone_model_config

    register_all_modules(init_default_scope=False)
    cfg = standalone_model_config(config)
    model = build_model(cfg)
    if checkpoint is not None:
        state = load_checkpoint_file(checkpoint)
        if isinstance(state, dict) and isinstance(state.get('state_dict'), dict):
            state = state['state_dict']
        if not isinstance(state, dict):
            raise ValueError(f'{checkpoint} holds no state_dict (got {type(state).__name__})')
        mismatch = compare_state_dicts(model.state_dict(), state)
        if mismatch:
            raise ValueError(f'checkpoint {checkpoint} does not fit the model of {config}:\n'
                             f'{mismatch.describe()}')
        model.load_state_dict(state, strict=False)  # checked above, as mmpoly's other loaders
    return cfg, model.eval()


def is_detector(model: nn.Module) -> bool:
    """Whether ``model`` is an mmdet detector (exported as backbone + neck features)."""
    from mmdet.models.detectors import BaseDetector
    return isinstance(model, BaseDetector)


def fixed_size_modules(model: nn.Module) -> List[str]:
    """Names of the modules built for one feature-map size (a ``spatial_size`` attribute: the
    C4 factor of PDC-NL[3]/[4] maps to one output channel per position)."""
    return [name for name, module in model.named_modules()
            if getattr(module, 'spatial_size', None) is not None]


def _flat_outputs(output: Any) -> List[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    return [tensor for item in output for tensor in _flat_outputs(item)]


@contextlib.contextmanager
def _attention_as_4d() -> Iterator[None]:
    """Within the context, ``F.scaled_dot_product_attention`` of 3-D (B, L, E) tensors runs on
    (B, 1, L, E) views: the same function, in the one layout the exporter's ONNX translation of
    the op takes (it asserts 4-D query, key and value; the non-local blocks pass 3-D)."""
    original = F.scaled_dot_product_attention

    def four_d(query, key, value, *args, **kwargs):
        if query.dim() == key.dim() == value.dim() == 3:
            return original(query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1), *args,
                            **kwargs).squeeze(1)
        return original(query, key, value, *args, **kwargs)

    F.scaled_dot_product_attention = four_d
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def opset_range() -> Tuple[int, Optional[int]]:
    """(lowest, highest) ai.onnx opset :func:`export_onnx` takes: :data:`MIN_OPSET` and the
    newest opset the installed onnx knows (``onnx.defs.onnx_opset_version()``; None without
    onnx). torch's exporter does not refuse a higher one: it writes opset 18 instead."""
    try:
        import onnx
    except ImportError:
        return MIN_OPSET, None
    return MIN_OPSET, int(onnx.defs.onnx_opset_version())


def check_opset(opset: Any, name: str = 'opset') -> int:
    """Return ``opset`` if it is an int in :func:`opset_range`, else raise a ValueError that
    names it as ``name`` (e.g. ``'--opset'`` for a tool), with its value and the range."""
    low, high = opset_range()
    if isinstance(opset, int) and not isinstance(opset, bool) and low <= opset and (
            high is None or opset <= high):
        return opset
    allowed = f'from {low} to {high}' if high is not None else f'>= {low}'
    newest = f'; the installed onnx knows opsets up to {high}' if high is not None else ''
    raise ValueError(f'{name} must be an int {allowed} (the torch.export-based exporter '
                     f'implements opset {low} and later{newest}), got {opset!r}')


def export_onnx(model: nn.Module,
                path: str,
                input_shape: Sequence[int],
                batch_size: int = 1,
                opset: int = DEFAULT_OPSET,
                dynamic_batch: bool = False,
                dynamic_size: bool = False,
                part: str = 'classifier') -> str:
    """Export :func:`inference_copy` of ``model`` to the ONNX file ``path``; return ``path``.

    Args:
        model: an mmpretrain classifier (``part='classifier'``) or a model with
            ``extract_feat`` (``part='features'``: a detector's backbone + neck), on any device
            and in any float dtype: the exported copy is float32 on the CPU (the graph's input
            and outputs are float32).
        path: the ``.onnx`` file, written atomically (complete or not at all) after
            ``onnx.checker.check_model(full_check=True)`` accepted the graph.
        input_shape: (C, H, W) of the example input; batch_size: its B.
        opset: the ai.onnx opset, in :func:`opset_range` (:func:`check_opset`).
        dynamic_batch: the batch axis of the input (and outputs) is symbolic (``batch``).
        dynamic_size: H and W are symbolic too. Refused for a model with a fixed-size module
            (:func:`fixed_size_modules`, e.g. PDC-NL): export those at their one input size.

    Raises:
        ValueError: a bad option, a shape the model does not take (PyTorch's own error is
            chained), ``dynamic_size`` with a fixed-size module, or a dynamic axis the exporter
            had to fix (the model's control flow depends on it: PDC-NL's chunked position
            product at CIFAR / ImageNet sizes with ``dynamic_batch``).
        RuntimeError: the exporter or the ONNX checker failed (nothing is written).
    """
    import onnx
    from mmpoly.fileio import atomic_write

    values = tuple(input_shape) if isinstance(input_shape, (list, tuple, torch.Size)) else ()
    if len(values) != 3 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                   and v >= 1 for v in values):
        raise ValueError(f'input_shape must be (C, H, W), three positive ints, got '
                         f'{input_shape!r}')
    shape = tuple(int(v) for v in values)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f'batch_size must be a positive int, got {batch_size!r}')
    for flag, value in (('dynamic_batch', dynamic_batch), ('dynamic_size', dynamic_size)):
        if not isinstance(value, bool):  # 'no' is truthy: a dynamic axis nobody asked for
            raise ValueError(f'{flag} must be True or False, got {value!r}')
    check_opset(opset)
    _check_part(model, part)
    if dynamic_size:
        fixed = fixed_size_modules(model)
        if fixed:
            sizes = sorted({tuple(model.get_submodule(name).spatial_size) for name in fixed})
            raise ValueError(
                f'dynamic_size (a symbolic H, W) cannot be exported: {len(fixed)} module(s) of '
                f'this model are built for one feature-map size ({fixed[0]}: spatial_size '
                f'{sizes[0]}; PDC-NL\'s C4 has one output channel per position). Export at the '
                f'fixed input size {shape[1]}x{shape[2]} (dynamic_batch is allowed)')
    # float32 on the CPU before folding, as onnxruntime runs it (BN and α fold in float32)
    fused = TensorForward(inference_copy(_float32_cpu(model)), part).eval()
    example = torch.randn(batch_size, *shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        try:
            outputs = _flat_outputs(fused(example))
        except (ValueError, RuntimeError) as error:
            raise ValueError(f'the model does not take a {tuple(example.shape)} input '
                             f'(input_shape {shape}): {error}') from error
    dims: Dict[int, Any] = {}
    if dynamic_batch:
        dims[0] = torch.export.Dim('batch', min=1, max=4096)
    if dynamic_size:
        dims[2] = torch.export.Dim('height', min=1, max=8192)
        dims[3] = torch.export.Dim('width', min=1, max=8192)
    output_names = ['logits'] if part == 'classifier' else [
        f'feat{i}' for i in range(len(outputs))]
    try:
        with torch.no_grad(), _attention_as_4d():
            program = torch.onnx.export(
                fused, (example, ), dynamo=True, opset_version=opset, input_names=['input'],
                output_names=output_names, dynamic_shapes=({**dims}, ) if dims else None,
                external_data=False, verbose=False)
    except Exception as error:  # the exporter raises many types; keep its message
        raise RuntimeError(f'torch.onnx.export failed for {type(model).__name__} with input '
                           f'{tuple(example.shape)} (dynamic batch {dynamic_batch}, size '
                           f'{dynamic_size}): {error}') from error
    proto = program.model_proto
    axes = proto.graph.input[0].type.tensor_type.shape.dim
    fixed_axes = [f'{name} (axis {axis}) = {axes[axis].dim_value}'
                  for axis, name in ((0, 'batch'), (2, 'height'), (3, 'width'))
                  if axis in dims and not axes[axis].dim_param]
    if fixed_axes:
        raise ValueError(
            f'the exporter fixed the input axes meant to be dynamic: {", ".join(fixed_axes)}, '
            f'because the model\'s Python control flow depends on them (e.g. the position '
            f'product of PDC-NL, computed a few images at a time, splits the batch into a '
            f'number of chunks that depends on its size); {path} is not written. Export with '
            f'a fixed {"batch" if 0 in dims else "size"} (drop dynamic_batch / dynamic_size)')
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as error:
        raise RuntimeError(f'the ONNX checker rejected the exported graph; {path} is not '
                           f'written: {error}') from error
    atomic_write(proto.SerializeToString(), path)
    return path


def onnx_session(path: str, threads: Optional[int] = None) -> Any:
    """An onnxruntime CPU ``InferenceSession`` of ``path`` (``threads``: intra-op threads, one
    inter-op thread; None: onnxruntime's default)."""
    import onnxruntime as ort
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f'threads must be a positive int or None, got {threads!r}')
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])


def run_onnx(session: Any, x: Any) -> List[Any]:
    """The outputs (numpy arrays) of an onnxruntime session for one input batch."""
    import numpy as np
    array = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    name = session.get_inputs()[0].name
    return session.run(None, {name: np.ascontiguousarray(array, dtype=np.float32)})


@dataclass
class OnnxParity:
    """onnxruntime against PyTorch on the same inputs (over every output tensor)."""
    max_abs: float  # max |onnxruntime - PyTorch|
    max_rel: float  # max_abs / max |PyTorch|
    scale: float  # max |PyTorch|
    num_outputs: int
    shapes: List[Tuple[int, ...]]


def compare_outputs(expected: Sequence[Any], actual: Sequence[Any]) -> OnnxParity:
    """:class:`OnnxParity` of two lists of arrays/tensors (shapes must agree)."""
    import numpy as np
    if len(expected) != len(actual):
        raise ValueError(f'{len(actual)} outputs against {len(expected)} expected')
    max_abs, scale, shapes = 0.0, 0.0, []
    for e, a in zip(expected, actual):
        e = e.detach().cpu().numpy() if isinstance(e, torch.Tensor) else np.asarray(e)
        a = np.asarray(a)
        if e.shape != a.shape:
            raise ValueError(f'output shape {a.shape} differs from the expected {e.shape}')
        shapes.append(tuple(e.shape))
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        if not np.isfinite(e64).all():
            raise ValueError(f'the expected (PyTorch) output {len(shapes) - 1} of shape '
                             f'{e.shape} is not finite: nothing to compare with')
        if not np.isfinite(a64).all():
            max_abs = math.inf
        else:
            max_abs = max(max_abs, float(np.abs(a64 - e64).max(initial=0.0)))
        scale = max(scale, float(np.abs(e64).max(initial=0.0)))
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    return OnnxParity(max_abs, max_rel, scale, len(shapes), shapes)


def onnx_parity(model: nn.Module, path: str, x: torch.Tensor,
                part: str = 'classifier', session: Any = None) -> OnnxParity:
    """Run the ONNX file ``path`` (or ``session``) and ``model`` in eval mode on the same batch
    ``x``; return the largest differences. PyTorch runs in float32 on the CPU, as onnxruntime
    does (a float32 CPU copy of a float16 / CUDA model; ``model`` is not modified).

    Raises:
        TypeError: ``x`` is not a ``torch.Tensor`` (e.g. a numpy array).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f'x must be a torch.Tensor (the (B, C, H, W) input batch), got '
                        f'{_type_name(x)}; convert a numpy array with torch.from_numpy(x)')
    reference = _float32_cpu(model)
    net = TensorForward(reference, part)
    was_training = reference.training
    reference.eval()
    try:
        with torch.no_grad():
            expected = _flat_outputs(net(x.detach().cpu().float()))
    finally:
        reference.train(was_training)
    session = session if session is not None else onnx_session(path)
    return compare_outputs(expected, run_onnx(session, x))


# ----------------------------------------------------------------------------------------------
# onnxruntime against PyTorch eager on CPU (tools/analysis_tools/benchmark.py --onnx)

#: The runtimes :func:`onnx_speed` times: the model as trained (eval mode), its
#: :func:`inference_copy`, and the exported copy run by onnxruntime.
RUNTIMES = ('eager', 'eager_fused', 'onnxruntime')


def _mean_call_seconds(call: Any, iters: int, warmup: int) -> float:
    """Mean seconds of ``iters`` calls of ``call`` after ``warmup`` untimed ones."""
    import time
    for _ in range(warmup):
        call()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start) / iters


def _timed_cases(configs: Sequence[str], batch_sizes: Sequence[int], threads: int, rounds: int,
                 iters: int, warmup: int,
                 input_size: Optional[Sequence[int]]) -> List[Dict[str, Any]]:
    """:func:`onnx_speed`'s cases, one per (config, batch size), with their timed seconds."""
    import tempfile

    cases = []
    with tempfile.TemporaryDirectory() as work_dir:
        for index, config in enumerate(configs):
            cfg, model = load_model(config)
            shape = input_shape_from_config(cfg)
            if input_size is not None:
                shape = (shape[0], int(input_size[0]), int(input_size[1]))
            path = export_onnx(model, osp.join(work_dir, f'{index}.onnx'), shape, batch_size=2,
                               dynamic_batch=True)
            session = onnx_session(path, threads)
            fused = inference_copy(model)
            for batch in batch_sizes:
                x = torch.randn(batch, *shape, generator=torch.Generator().manual_seed(batch))
                array = x.numpy()

                def eager(net=model, x=x):
                    with torch.inference_mode():
                        net(x, mode='tensor')

                def eager_fused(net=fused, x=x):
                    with torch.inference_mode():
                        net(x, mode='tensor')

                def onnxruntime(session=session, array=array):
                    run_onnx(session, array)

                cases.append(dict(config=config, batch_size=batch, input_shape=list(shape),
                                  calls=dict(eager=eager, eager_fused=eager_fused,
                                             onnxruntime=onnxruntime),
                                  seconds={name: [] for name in RUNTIMES}))
        for round_index in range(rounds):
            order = list(range(len(cases)))
            if round_index % 2:
                order.reverse()
            for i in order:
                runtimes = RUNTIMES if round_index % 2 == 0 else RUNTIMES[::-1]
                for name in runtimes:
                    cases[i]['seconds'][name].append(
                        _mean_call_seconds(cases[i]['calls'][name], iters, warmup))
    return cases


def onnx_speed(configs: Sequence[str], batch_sizes: Sequence[int], threads: int, rounds: int,
               iters: int, warmup: int,
               input_size: Optional[Sequence[int]] = None) -> List[Dict[str, Any]]:
    """CPU latency (s per batch) and throughput (images/s) of every config's classifier in
    each of :data:`RUNTIMES`, for each batch size; one entry per (config, batch size).

    PyTorch runs ``model(x, mode='tensor')`` under ``torch.inference_mode`` with
    ``threads`` intra-op threads; onnxruntime runs the file :func:`export_onnx` writes (dynamic
    batch) with ``threads`` intra-op threads and one inter-op thread, on the same normalised
    random batch. Each of ``rounds`` rounds times every (config, batch, runtime) once
    (``warmup`` untimed calls, then the mean of ``iters`` calls), interleaved, alternating
    the order; the figures are medians over rounds. Weights are the configs' initial ones.
    """
    import statistics

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # this call's, not the process's: restored below
    try:
        cases = _timed_cases(configs, batch_sizes, threads, rounds, iters, warmup, input_size)
    finally:
        torch.set_num_threads(previous)
    results = []
    for case in cases:
        latency = {name: statistics.median(case['seconds'][name]) for name in RUNTIMES}
        results.append(dict(
            config=case['config'], batch_size=case['batch_size'],
            input_shape=case['input_shape'], threads=threads, latency_s=latency,
            images_per_s={name: case['batch_size'] / latency[name] for name in RUNTIMES},
            rounds_s=case['seconds'],
            # > 1: onnxruntime is faster (eager latency / onnxruntime latency)
            speedup=dict(onnx_vs_eager=latency['eager'] / latency['onnxruntime'],
                         onnx_vs_eager_fused=latency['eager_fused'] / latency['onnxruntime'],
                         fused_vs_eager=latency['eager'] / latency['eager_fused'])))
    return results


def onnx_speed_checks(results: Sequence[Dict[str, Any]], min_speedup: Optional[float],
                      baseline: Optional[str] = None) -> List[Dict[str, Any]]:
    """One check per model but ``baseline``, at the first (smallest listed) batch size:
    eager latency / onnxruntime latency >= ``min_speedup``."""
    if min_speedup is None or not results:
        return []
    first = results[0]['batch_size']
    return [dict(config=r['config'], target='min_onnx_speedup', ratio='onnx_vs_eager',
                 batch_size=first, value=r['speedup']['onnx_vs_eager'], limit=min_speedup,
                 passed=r['speedup']['onnx_vs_eager'] >= min_speedup)
            for r in results if r['batch_size'] == first and r['config'] != baseline]


def format_onnx_speed(results: Sequence[Dict[str, Any]]) -> str:
    """One line per (config, batch size): latency and throughput of each runtime and ratios."""
    lines = []
    for r in results:
        lat, ips, speed = r['latency_s'], r['images_per_s'], r['speedup']
        lines.append(
            f"{osp.basename(r['config']):45s} batch {r['batch_size']:3d} "
            f"threads {r['threads']} | latency ms: eager {lat['eager'] * 1e3:8.2f}, fused "
            f"{lat['eager_fused'] * 1e3:8.2f}, onnxruntime {lat['onnxruntime'] * 1e3:8.2f} | "
            f"img/s: eager {ips['eager']:8.1f}, onnxruntime {ips['onnxruntime']:8.1f} | "
            f"onnxruntime speed-up vs eager {speed['onnx_vs_eager']:5.2f}×, vs fused eager "
            f"{speed['onnx_vs_eager_fused']:5.2f}×")
    return '\n'.join(lines)


def run_onnx_benchmark(args: Any) -> Dict[str, Any]:
    """``benchmark.py --onnx``: :func:`onnx_speed` of ``args.baseline`` and ``args.configs`` at
    ``args.onnx_batch_sizes`` (default ``[args.batch_size]``) with ``args.threads`` threads
    (default: torch's), and the ``--min-onnx-speedup`` checks (:func:`onnx_speed_checks`)."""
    import onnxruntime

    threads = args.threads or torch.get_num_threads()
    batch_sizes = args.onnx_batch_sizes or [args.batch_size]
    measured = onnx_speed([args.baseline, *args.configs], batch_sizes, threads, args.rounds,
                          args.iters, args.warmup, args.input_size)
    checks = onnx_speed_checks(measured, args.min_onnx_speedup, args.baseline)
    settings = dict(torch=torch.__version__, onnxruntime=onnxruntime.__version__, device='cpu',
                    threads=threads, batch_sizes=list(batch_sizes), rounds=args.rounds,
                    iters=args.iters, warmup=args.warmup)
    return dict(settings=settings, baseline=args.baseline, onnx=measured, checks=checks,
                passed=all(check['passed'] for check in checks))


def format_onnx_benchmark(results: Dict[str, Any]) -> str:
    """The settings, :func:`format_onnx_speed` and the checks of :func:`run_onnx_benchmark`."""
    s = results['settings']
    lines = [f"torch {s['torch']} eager vs onnxruntime {s['onnxruntime']} | cpu | threads "
             f"{s['threads']} | {s['rounds']} rounds × ({s['warmup']} warm-up + {s['iters']} "
             f"iters), median latency", format_onnx_speed(results['onnx'])]
    for check in results['checks']:
        lines.append(f"{'PASS' if check['passed'] else 'FAIL'} {osp.basename(check['config'])}"
                     f" batch {check['batch_size']}: eager / onnxruntime latency "
                     f"{check['value']:.3f}, target >= {check['limit']:.3f}")
    return '\n'.join(lines)
