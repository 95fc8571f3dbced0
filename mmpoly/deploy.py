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
"""
import copy
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch
from mmcv.cnn import ConvModule
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ['DeployReport', 'inference_copy', 'fuse_for_inference']


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
