"""A higher-degree term T_n(z) = α_n · P_n(F_{n,1}(z) ∘ … ∘ F_{n,n}(z)) with its own factors."""
from typing import Optional

import torch
from mmengine.model import BaseModule
from torch import Tensor, nn

from .chain import fused_term, fused_term_supported
from .factor import Factor, Projection, hadamard_product
from .options import (ActOption, NormOption, act_cfg_option, check_number, check_positive_int,
                      norm_cfg_option)


class PolynomialTerm(BaseModule):
    """The degree-``degree`` term of a PDC expansion (paper eq. (10), arXiv:2104.07916).

    It owns ``degree`` factor layers (nothing is shared with other degrees), multiplies them
    element-wise, projects the product back to ``out_channels`` and scales it by a learnable
    scalar α_n (``scale``), initialised to ``scale_init``.

    With grad enabled on CPU it runs its two element-wise chains (factors → product, and the
    projection's last norm → activation → α) through :func:`~.chain.fused_term`, which keeps
    only the conv outputs for the backward pass: the same outputs, gradients and BatchNorm
    statistics, less memory (see :mod:`mmpoly.models.polynomial.chain`).

    Args:
        degree: n >= 2, the number of factors in the Hadamard product.
        in_channels: width of the input z.
        hidden_channels: width of each factor (the official code's ``planes_ho``).
        out_channels: width of the term's output (the block width).
        factor_kernel_size / projection_kernel_size: odd conv kernel sizes.
        num_projection_convs: number of convs in the projection.
        factor_norm / factor_act: norm and activation after each factor conv ('BN', 'IN',
            'ReLU', ..., 'none', a dict or None, as in :class:`~mmpoly.models.blocks.PDCBlock`,
            which passes its roles left at 'BN' as its own ``norm_cfg``:
            :func:`~mmpoly.models.polynomial.options.block_norm_cfg`).
        projection_norm / projection_act: norm and activation after each projection conv.
        scale_init: initial α_n (0 in the official code: the term starts switched off).

    Shapes: z (B, in_channels, H, W) -> (B, out_channels, H, W).
    """

    def __init__(self,
                 degree: int,
                 in_channels: int,
                 hidden_channels: int,
                 out_channels: int,
                 factor_kernel_size: int = 3,
                 projection_kernel_size: int = 3,
                 num_projection_convs: int = 1,
                 conv_cfg: Optional[dict] = None,
                 factor_norm: NormOption = 'BN',
                 factor_act: ActOption = None,
                 projection_norm: NormOption = 'IN',
                 projection_act: ActOption = None,
                 scale_init: float = 0.0,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        check_positive_int('degree', degree)
        if degree < 2:
            raise ValueError(f'degree of a PolynomialTerm must be >= 2 (degree 1 is the ResNet '
                             f'branch), got {degree}')
        check_positive_int('in_channels', in_channels)
        check_positive_int('hidden_channels', hidden_channels)
        check_positive_int('out_channels', out_channels)
        check_number('scale_init', scale_init)
        factor_norm = norm_cfg_option('factor_norm', factor_norm)
        factor_act = act_cfg_option('factor_act', factor_act)
        projection_norm = norm_cfg_option('projection_norm', projection_norm)
        projection_act = act_cfg_option('projection_act', projection_act)
        self.degree = degree
        self.factors = nn.ModuleList(
            Factor(in_channels, hidden_channels, factor_kernel_size, conv_cfg=conv_cfg,
                   norm_cfg=factor_norm, act_cfg=factor_act) for _ in range(degree))
        self.projection = Projection(hidden_channels, out_channels, projection_kernel_size,
                                     num_projection_convs, conv_cfg=conv_cfg,
                                     norm_cfg=projection_norm, act_cfg=projection_act)
        self.scale = nn.Parameter(torch.tensor(float(scale_init)))

    def forward(self, z: Tensor) -> Tensor:
        if fused_term_supported(self.factors, self.projection, z):
            return fused_term(self.factors, self.projection, self.scale, z)
        product = hadamard_product([factor(z) for factor in self.factors])
        return self.scale * self.projection(product)
