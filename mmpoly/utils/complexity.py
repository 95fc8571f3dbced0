"""Parameter and FLOP counts of a config's model (used by get_flops.py and paper_table.py), and
the config as a tool that builds the model without a Runner needs it."""
import copy
from dataclasses import dataclass
from math import prod
from typing import Any, List, Optional, Tuple

import torch
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import get_shape
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import DefaultScope
from torch import nn

from mmpoly.registry import MODELS


def standalone_model_config(path: str) -> Config:
    """The config at ``path`` with its data preprocessor moved into the model (as the Runner
    does) and without a ``Pretrained`` backbone init (no checkpoint is read at build time).

    Raises:
        StartupError: a missing or broken config file, or one without a buildable model
            (:func:`mmpoly.utils.startup.load_config`, :func:`~.startup.check_model_config`).
    """
    from mmpoly.utils.startup import check_model_config, load_config
    cfg = load_config(path)
    check_model_config(cfg, path)
    if cfg.get('data_preprocessor') is not None and cfg.model.get('data_preprocessor') is None:
        cfg.model.data_preprocessor = copy.deepcopy(cfg.data_preprocessor)
    backbone = cfg.model.get('backbone')
    if isinstance(backbone, dict) and backbone.get('init_cfg') is not None:
        from mmpoly.models.backbones.pretrained import pretrained_init
        init_cfg = backbone.init_cfg
        pretrained = pretrained_init(init_cfg, 'model.backbone.init_cfg')
        if pretrained is not None:  # every form mmengine takes: a dict, or an entry of a list
            backbone.init_cfg = (None if pretrained is init_cfg else
                                 [e for e in init_cfg if e is not pretrained] or None)
    return cfg


@dataclass
class Complexity:
    params: int  # trainable parameters (BN affine included, running statistics excluded)
    flops: Optional[int]  # multiply-accumulates of one forward pass (mmengine's convention)
    input_shape: Tuple[int, int, int]


def count_params(model: nn.Module) -> int:
    """Trainable parameters, as the paper counts them."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_model(cfg: Config, part: str = 'model') -> nn.Module:
    """Build the whole model (``part='model'``) or only its backbone (``part='backbone'``)."""
    if part not in ('model', 'backbone'):
        raise ValueError(f"part must be 'model' or 'backbone', got {part!r}")
    model_cfg = cfg.model if part == 'model' else cfg.model.backbone
    # build in the config's scope, whatever scope the caller's process is in
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmpretrain')):
        return MODELS.build(model_cfg).eval()


def default_input_shape(cfg: Config) -> Tuple[int, int, int]:
    """(C, H, W) of one image of the config's classifier: what its test pipeline and dataset give
    (:func:`mmpoly.deploy.input_shape_from_config`: Fashion-MNIST 28×28, CIFAR and the log-mel
    spectrograms of Speech Commands 32×32, ImageNet's crop 224×224). Where they tell nothing,
    and for a detector: 32×32 for CIFAR-style backbones (3×3 stem), 224×224 otherwise."""
    from mmpoly.deploy import input_shape_from_config
    if 'rpn_head' not in cfg.model and 'roi_head' not in cfg.model:
        try:
            return input_shape_from_config(cfg)
        except ValueError:
            pass
    backbone = cfg.model.get('backbone', cfg.model)
    size = 32 if 'CIFAR' in str(backbone.get('type', '')) else 224
    return backbone.get('in_channels', 3), size, size


def attention_flops(inputs: List[Any], outputs: List[Any]) -> int:
    """Multiply-accumulates of ``aten::scaled_dot_product_attention`` (query (..., L, E), key
    (..., S, E), value (..., S, Ev)): the two products Q Kᵀ and A V, L·S·(E + Ev) per batch
    element, counted as mmengine counts the ``bmm`` pair of an explicit attention map."""
    query, value = get_shape(inputs[0]), get_shape(inputs[2])
    *batch, length, embed = query
    keys, value_embed = value[-2], value[-1]
    return prod(batch) * length * keys * (embed + value_embed)


def baddbmm_flops(inputs: List[Any], outputs: List[Any]) -> int:
    """Multiply-accumulates of ``aten::baddbmm`` (input, batch1 (B, n, k), batch2 (B, k, m)):
    B·n·k·m, as mmengine counts ``bmm`` (the added input is not counted, as a conv's bias)."""
    (batch, rows, inner), columns = get_shape(inputs[1]), get_shape(inputs[2])[-1]
    return batch * rows * inner * columns


def measure(cfg: Config, part: str = 'model', input_shape: Optional[Tuple[int, int, int]] = None,
            with_flops: bool = True) -> Complexity:
    """Count the parameters and (optionally) FLOPs of ``part`` of the config's model."""
    model = build_model(cfg, part)
    shape = tuple(input_shape) if input_shape is not None else default_input_shape(cfg)
    flops = None
    if with_flops:
        if part == 'model' and hasattr(model, 'data_preprocessor'):
            forward = model.forward
            model.forward = lambda x: forward(x, mode='tensor')  # type: ignore[method-assign]
        logger = MMLogger.get_current_instance()
        level = logger.level
        logger.setLevel('ERROR')  # mmengine warns about every operator it does not count
        try:
            device = next(model.parameters()).device
            analyzer = FlopAnalyzer(model, (torch.randn(1, *shape, device=device), ))
            analyzer.set_op_handle('aten::scaled_dot_product_attention', attention_flops,
                                   'aten::baddbmm', baddbmm_flops)
            with torch.no_grad():
                flops = int(analyzer.total())
        finally:
            logger.setLevel(level)
    return Complexity(count_params(model), flops, shape)  # type: ignore[arg-type]
