"""Factors C^T z, their Hadamard product, and the projection back to the block width."""
import functools
from typing import Optional, Sequence

import torch
from mmcv.cnn import ConvModule
from torch import Tensor, nn

from .options import check_odd_kernel, check_positive_int


class Factor(ConvModule):
    """One factor of a polynomial term: a k×k conv (stride 1, 'same' padding, no bias),
    then an optional norm and an optional activation.

    Shapes: (B, in_channels, H, W) -> (B, out_channels, H, W).
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 kernel_size: int = 3,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: Optional[dict] = dict(type='BN'),
                 act_cfg: Optional[dict] = None) -> None:
        check_odd_kernel('kernel_size', kernel_size)
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride=1,
            padding=kernel_size // 2,
            bias=False,
            conv_cfg=conv_cfg,
            norm_cfg=norm_cfg,
            act_cfg=act_cfg)


def hadamard_product(factors: Sequence[Tensor]) -> Tensor:
    """Element-wise product F_1(z) ∘ F_2(z) ∘ … ∘ F_n(z) of same-shaped tensors."""
    if len(factors) == 0:
        raise ValueError('hadamard_product needs at least one factor')
    return functools.reduce(torch.mul, factors)


class Projection(nn.Sequential):
    """P_n: maps a product of width ``in_channels`` back to the block width.

    ``num_convs`` k×k convs, each followed by norm and activation: the first maps
    in_channels -> out_channels, the rest out_channels -> out_channels.
    Shapes: (B, in_channels, H, W) -> (B, out_channels, H, W).
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 kernel_size: int = 3,
                 num_convs: int = 1,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: Optional[dict] = dict(type='IN'),
                 act_cfg: Optional[dict] = None) -> None:
        check_positive_int('num_convs', num_convs)
        convs = [
            Factor(in_channels if i == 0 else out_channels, out_channels, kernel_size,
                   conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
            for i in range(num_convs)
        ]
        super().__init__(*convs)
