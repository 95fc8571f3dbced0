"""Π-net: the ResNet block with higher-degree terms that share their factors across degrees."""
from typing import Optional, Union

import torch
from mmcv.cnn import build_norm_layer
from torch import Tensor, nn

from mmpoly.registry import MODELS
from ..polynomial import (Factor, Projection, block_norm_cfg, check_choice,
                          check_non_negative_int, check_number, check_odd_kernel,
                          check_positive_int, hadamard_product)
from .basic import ResNetBlock


@MODELS.register_module()
class PiNetBlock(ResNetBlock):
    """Π-net block of degree N (paper eq. (8), arXiv:2104.07916).

        t_1 = C z (the ResNet branch, the shared S factor),  a = A(I z) (the shared A factor)
        t_n = t_{n-1} ∘ a                                    for n = 2..N
        y   = act( C z + I z + α · P(t_2 + … + t_N) )

    Every degree reuses the same two factors (the branch and ``a``), which is what separates
    Π-nets from PDC. ``a`` is the shortcut output through ``input_norm`` and optional
    ``num_input_convs`` convs; P is ``num_projection_convs`` convs with norm, or just the norm
    when there are none (mmcls ``pinet_relu``: BN on the product).

    Args:
        degree: N >= 2.
        num_input_convs: k×k convs (+ norm) on the shared factor a (RP ``n_xconvs``).
        num_projection_convs: k×k convs (+ norm) on the product (RP ``n_lconvs``), may be 0.
        projection_kernel_size: odd kernel of those convs.
        input_norm / projection_norm: 'BN' (the block's ``norm_cfg``, which a backbone sets to
            its own: BatchNorm2d by default, SyncBN, frozen BN or GN when the backbone's says
            so), any other 2-d norm type mmcv's ``build_norm_layer`` builds ('IN' =
            InstanceNorm2d, a type you registered in ``MODELS``, ...), 'none' or a dict
            (``dict(type='GN', num_groups=4)``; a dict, even of type 'BN', is built as given).
        learn_scale: learn α (initialised to ``scale_init``); False fixes α = 1.
        scale_init: initial α when ``learn_scale`` (default 0: the higher-degree terms start
            switched off). With ``learn_scale=False`` α is 1: leave it unset (or 1.0); any
            other value is an error, as it would be unused.
        Other args: see :class:`ResNetBlock`.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 stride: int = 1,
                 degree: int = 2,
                 first_degree_convs: int = 2,
                 num_input_convs: int = 0,
                 num_projection_convs: int = 1,
                 projection_kernel_size: int = 1,
                 input_norm: Union[None, str, dict] = 'BN',
                 projection_norm: Union[None, str, dict] = 'BN',
                 learn_scale: bool = True,
                 scale_init: Optional[float] = None,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: Optional[dict] = dict(type='ReLU'),
                 use_activation: bool = True,
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(in_channels, out_channels, stride, first_degree_convs, conv_cfg,
                         norm_cfg, act_cfg, use_activation, with_cp=with_cp, init_cfg=init_cfg)
        check_positive_int('degree', degree)
        if degree < 2:
            raise ValueError(f'degree of a PiNetBlock must be >= 2 (degree 1 is ResNetBlock), '
                             f'got {degree}')
        self.degree = degree
        check_non_negative_int('num_input_convs', num_input_convs)
        check_non_negative_int('num_projection_convs', num_projection_convs)
        check_odd_kernel('projection_kernel_size', projection_kernel_size)
        if projection_kernel_size != 1 and num_input_convs == 0 and num_projection_convs == 0:
            raise ValueError(
                f'projection_kernel_size={projection_kernel_size} is unused with '
                'num_input_convs=0 and num_projection_convs=0 (no conv takes it): set one of '
                'them >= 1, or leave projection_kernel_size at 1')
        check_choice('learn_scale', learn_scale, (True, False))
        if scale_init is not None:
            check_number('scale_init', scale_init)
            if not learn_scale and float(scale_init) != 1.0:
                raise ValueError(
                    f'scale_init={scale_init!r} is unused with learn_scale=False, which fixes '
                    'α = 1: set learn_scale=True to learn α from scale_init, or leave scale_init '
                    'unset (or 1.0)')
        scale_init = 0.0 if scale_init is None else scale_init
        c = out_channels
        input_norm_cfg = block_norm_cfg('input_norm', input_norm, self.norm_cfg, c)
        projection_norm_cfg = block_norm_cfg('projection_norm', projection_norm, self.norm_cfg, c)

        self.input_norm: nn.Module = nn.Identity() if input_norm_cfg is None else \
            build_norm_layer(input_norm_cfg, c)[1]
        self.input_convs = nn.Sequential(*[
            Factor(c, c, projection_kernel_size, conv_cfg, projection_norm_cfg)
            for _ in range(num_input_convs)
        ])
        if num_projection_convs > 0:
            self.projection: nn.Module = Projection(c, c, projection_kernel_size,
                                                    num_projection_convs, conv_cfg,
                                                    projection_norm_cfg)
        elif projection_norm_cfg is not None:
            self.projection = build_norm_layer(projection_norm_cfg, c)[1]
        else:
            self.projection = nn.Identity()
        self.scale = nn.Parameter(torch.tensor(float(scale_init))) if learn_scale else None

    def polynomial_terms(self, branch: Tensor, shortcut: Tensor) -> Tensor:
        shared = self.input_convs(self.input_norm(shortcut))  # the factor A, shared by degrees
        term = branch  # t_1: the factor S, shared by degrees
        higher = []
        for _ in range(2, self.degree + 1):
            term = hadamard_product([term, shared])  # t_n = t_{n-1} ∘ a
            higher.append(term)
        out = self.projection(sum(higher[1:], higher[0]))
        if self.scale is not None:
            out = self.scale * out
        return branch + shortcut + out
