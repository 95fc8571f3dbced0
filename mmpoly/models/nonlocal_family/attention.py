"""The product of the non-local family: a contraction over positions, and what all blocks share.

In the polynomial core (``mmpoly.models.polynomial``) a term multiplies its factors element-wise
(:func:`~mmpoly.models.polynomial.hadamard_product`). The non-local family multiplies them as
matrices instead, contracting over positions. With Z ∈ R^{HW×c} the input flattened over
positions:

    third degree:   (Z C1)(Z C2)ᵀ (Z C3)      :func:`pairwise_product`
    second degree:  (Z C4) (Z C5)             :func:`mix_positions` (Z C4 is already HW×HW)

A *position map* M (rows: query positions, columns: key positions) is either softmaxed over the
keys (the paper's "softmax activation", as in NL) or, for the plain polynomial, divided by the
number of key positions (as mmcv's ``dot_product`` mode). :class:`NonLocalBase` holds the
options, the residual output conv ``conv_out`` and the initialisation that every block shares.
"""
import math
from abc import abstractmethod
from typing import Optional, Union

import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from mmengine.model import BaseModule, PretrainedInit, constant_init, initialize, normal_init
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..polynomial.options import (check_choice, check_norm_channels, check_positive_int,
                                  norm_cfg_option)

#: Standard deviation of the normal initialisation of every input factor (mmcv's NonLocal2d).
FACTOR_INIT_STD = 0.01
#: The default norm after every non-local block's output conv (see NonLocalBase).
OUTPUT_NORM = dict(type='BN')


def to_positions(x: Tensor) -> Tensor:
    """(B, C, H, W) -> (B, HW, C): the feature map as the paper's matrix Z (one row a position)."""
    return x.flatten(2).transpose(1, 2)


def to_map(z: Tensor, height: int, width: int) -> Tensor:
    """(B, HW, C) -> (B, C, H, W): the inverse of :func:`to_positions`."""
    return z.transpose(1, 2).reshape(z.shape[0], z.shape[2], height, width)


def factor_positions(factor: ConvModule, x: Tensor) -> Tensor:
    """A 1×1 factor conv with bias (:meth:`NonLocalBase.factor`) applied to x (B, c, H, W) as
    one batched matrix product, returned as (B, C_out, HW): the same function, computed by
    ``baddbmm``. For the wide factor C4 of PDC-NL (one output channel per position, 1024 at
    32×32) a CPU runs this about 1.6× faster than mkldnn's 1×1 conv (1.8× with the backward
    pass), whose output is a B×HW×HW map. FLOPs are counted as for the conv
    (:func:`mmpoly.utils.complexity.measure` counts ``baddbmm``).
    """
    conv = factor.conv
    if conv.kernel_size != (1, 1) or conv.stride != (1, 1) or conv.groups != 1 or \
            conv.bias is None or factor.with_norm or factor.with_activation:
        raise ValueError(f'factor_positions needs a 1×1 factor conv with bias and no norm or '
                         f'activation, got {factor}')
    weight = conv.weight.flatten(1).expand(x.shape[0], -1, -1)  # (B, C_out, c), no copy
    return torch.baddbmm(conv.bias[:, None], weight, x.flatten(2))


#: Elements of one chunk's position map in :func:`factor_mix` (2**20 float32 = 4 MiB: it stays
#: in a CPU's cache while it is computed, normalised and multiplied).
CHUNK_ELEMENTS = 2**20


def mix_chunk_size(x: Tensor, keys: int, recompute: bool) -> int:
    """Batch elements per chunk of :func:`factor_mix` for x (B, c, H, W) and ``keys`` key
    positions.

    On CPU, as many as keep a chunk's (keys × H·W) map within :data:`CHUNK_ELEMENTS` (at least
    one), and so also with ``recompute`` on any device, whose point is to hold no more than a
    chunk's map at a time. Otherwise, on a GPU, the whole batch in one product: the cache
    argument is a CPU one, and a chunk per image made PDC-NL[3] train at 0.09× the speed of
    ResNet18 on an H100 (0.42× with the whole batch; batch 128, 32×32, fp32).
    """
    if x.device.type != 'cpu' and not recompute:
        return max(1, x.shape[0])
    return max(1, CHUNK_ELEMENTS // (keys * x.shape[2] * x.shape[3]))


def factor_mix(factor: ConvModule,
               x: Tensor,
               value: Tensor,
               use_softmax: bool,
               recompute: bool = False) -> Tensor:
    """Second-degree contraction M (Z C5) where M = Z C4 is the output of ``factor``, a 1×1
    conv with one output channel per key position (PDC-NL's C4):

        mix_positions(factor_positions(factor, x).transpose(1, 2), value, use_softmax)

    computed :func:`mix_chunk_size` batch elements at a time. On CPU each chunk's map (at most
    :data:`CHUNK_ELEMENTS` elements) is produced, normalised and multiplied while it is in cache
    (at 32×32, HW = 1024, the map is 4 MiB per image, 256 MiB for a batch of 64). Without
    autograd the whole map is never held; with it, autograd keeps each chunk's normalised map for
    the backward pass, or, with ``recompute``, keeps nothing of it and recomputes it chunk by
    chunk in the backward pass (``torch.utils.checkpoint``).

    Args:
        factor: the 1×1 factor conv C4 (c -> N key positions, with bias).
        x: Z as a map, (B, c, H, W) with H·W = Q query positions.
        value: Z C5, (B, N, d) (:func:`to_positions` of the C5 map).
        use_softmax: as in :func:`mix_positions`.
        recompute: trade the saved maps for a second forward pass of this term in backward.

    Returns:
        (B, Q, d).
    """

    def mix(x_part: Tensor, value_part: Tensor) -> Tensor:
        scores = factor_positions(factor, x_part).transpose(1, 2)
        return mix_positions(scores, value_part, use_softmax)

    recompute = recompute and torch.is_grad_enabled() and (
        x.requires_grad or value.requires_grad or any(p.requires_grad for p in factor.parameters()))
    chunk = mix_chunk_size(x, factor.conv.out_channels, recompute)
    parts = []  # each (k, d, Q): the chunks' results in the memory order mix_positions gives
    # split, not indexing: the backward of one split is one concatenation of the chunks'
    # gradients, where each indexed chunk would scatter its gradient into a zero tensor as
    # large as the whole batch
    for x_part, value_part in zip(x.split(chunk), value.split(chunk)):
        if recompute:
            part = checkpoint(mix, x_part, value_part, use_reentrant=False)
        else:
            part = mix(x_part, value_part)
        parts.append(part.transpose(1, 2))
    return torch.cat(parts).transpose(1, 2)


def normalise_over_positions(scores: Tensor, use_softmax: bool) -> Tensor:
    """Weights over the last (key-position) axis of ``scores`` (B, Q, N).

    softmax over the N keys, or ``scores / N`` (a polynomial: linear in ``scores``).
    """
    if use_softmax:
        if _is_transposed(scores):  # softmax in memory order: no copy of the (B, Q, N) map
            return scores.transpose(-1, -2).softmax(dim=-2).transpose(-1, -2)
        return scores.softmax(dim=-1)
    return scores / scores.shape[-1]


def _is_transposed(matrices: Tensor) -> bool:
    """Whether a (B, Q, N) tensor is stored as (B, N, Q), e.g. :func:`to_positions` of an NCHW
    map whose N channels index key positions."""
    return matrices.stride(-2) == 1 and matrices.stride(-1) != 1


def mix_positions(scores: Tensor, value: Tensor, use_softmax: bool) -> Tensor:
    """Second-degree contraction M (Z C): (B, Q, N) position map × (B, N, d) value -> (B, Q, d).

    M is normalised over its N key positions first (:func:`normalise_over_positions`). A map
    stored transposed (an NCHW conv output whose channels are the key positions) is multiplied
    as (Vᵀ Mᵀ)ᵀ, the same product: ``bmm`` then reads both operands in memory order, where its
    backward pass would otherwise copy M batch element by batch element (at HW = 1024 on a CPU
    the second-degree term of PDC-NL trains 1.6× faster), and the result is laid out as an NCHW
    map for :func:`to_map`.
    """
    weights = normalise_over_positions(scores, use_softmax)
    if _is_transposed(weights):
        return torch.bmm(value.transpose(1, 2), weights.transpose(1, 2)).transpose(1, 2)
    return torch.bmm(weights, value)


def pairwise_product(query: Tensor, key: Tensor, value: Tensor, use_softmax: bool,
                     scale: float = 1.0) -> Tensor:
    """Third-degree contraction (Z C1)(Z C2)ᵀ (Z C3) of the non-local block.

    Args:
        query: Z C1, (B, HW, d).
        key: Z C2, (B, HW, d).
        value: Z C3, (B, HW, d_v).
        use_softmax: softmax the (HW × HW) map over the keys (after multiplying it by
            ``scale``), or divide it by HW (``scale`` is then not used).
        scale: logit scale before the softmax, e.g. 1/√d (and 1/τ for a temperature).

    Returns:
        (B, HW, d_v).

    Computed without materialising the HW × HW map where possible: with softmax through
    ``F.scaled_dot_product_attention`` (a fused kernel, the same function; on a CPU with
    HW = 1024, d = 16 it trains about 5× faster and never holds the B × HW × HW map); without
    softmax, the product re-associated as (Z C1)((Z C2)ᵀ (Z C3)) / HW when that costs fewer
    multiplications (HW·d·d_v instead of HW²·(d + d_v)).
    """
    if use_softmax:
        # the fused CPU kernel needs a unit stride along the features; with a transposed view
        # (what to_positions gives for an NCHW map) PyTorch silently falls back to its
        # unfused math path, which trains about 4× slower at HW = 1024, d = 16
        query, key, value = (t.contiguous() for t in (query, key, value))
        return F.scaled_dot_product_attention(query, key, value, scale=scale)
    positions, d, d_v = key.shape[1], key.shape[2], value.shape[2]
    if d * d_v < positions * (d + d_v) / 2:
        return torch.bmm(query, torch.bmm(key.transpose(1, 2), value)) / positions
    return mix_positions(torch.bmm(query, key.transpose(1, 2)), value, use_softmax)


class NonLocalBase(BaseModule):
    """Options, output conv and initialisation shared by the non-local family.

    Every block computes an inner map y (B, c/r, H, W) from its input x and returns
    ``x + conv_out(y)``; subclasses implement :meth:`inner`.

    Args:
        in_channels: c, the width of the feature map (set by the backbone for a plugin).
        reduction: r; the factors map c -> c/r channels. Must divide ``in_channels``.
            Default 4, the paper's "compress the channels by a factor of 4 for all models"
            (mmcv's NonLocal2d defaults to 2).
        use_softmax: softmax the position maps over the keys (True, the paper's blocks) or
            divide them by the number of positions (False: the block is a polynomial).
        use_scale: multiply the pairwise logits by 1/√(c/r) before the softmax (mmcv's
            ``embedded_gaussian``). Has no effect without softmax, where the division by the
            number of positions normalises the product (mmcv's ``dot_product``).
        use_activation: False makes the block activation-free. The blocks contain no
            element-wise activation; the only non-polynomial operation is the softmax, which
            the paper calls "a softmax activation function", so False also turns the softmax
            off (the block is used with softmax iff ``use_softmax and use_activation``).
        norm_cfg: norm after ``conv_out``; default :data:`OUTPUT_NORM` (BN, as in the
            original non-local networks, Wang et al. 2018, and mmseg's non-local heads). None:
            conv_out has a bias and no norm (mmcv's NonLocal2d default). With a norm the conv
            has no bias and the norm (not the conv) is zero-initialised. Without it, the
            paper's CIFAR recipe (SGD 0.1, momentum 0.9, no warm-up) drives PDC-NL[3] and
            PDC-NL[4] to NaN within 50 steps on Fashion-MNIST, and drove NL there too before
            its softmax product was fused (``tests/test_nonlocal_training.py``): the
            un-normalised residual ``x + conv_out(y)`` grows with the product of the g and
            conv_out weights. The norm
            adds c parameters per block (2c for BN, minus the c of the dropped conv bias). A
            backbone plugin whose config leaves norm_cfg unset gets the backbone's
            ``norm_cfg`` (:func:`~mmpoly.models.backbones.poly_resnet.build_stage_plugins`).
        init_cfg: mmengine init config, applied in :meth:`init_weights` over the default
            initialisation: every factor conv normal(0, 0.01) with zero bias and conv_out (or
            its norm) zero, so that the block starts as the identity. The default runs in
            ``__init__`` and again in :meth:`init_weights` (after a backbone's own
            ``init_cfg``); what ``init_cfg`` does not cover keeps it.
    """

    #: Degree of the block as a polynomial of its input (softmax off; the residual adds 1).
    degree = 3

    def __init__(self,
                 in_channels: int,
                 reduction: int = 4,
                 use_softmax: bool = True,
                 use_scale: bool = True,
                 use_activation: bool = True,
                 norm_cfg: Union[None, str, dict] = OUTPUT_NORM,
                 init_cfg: Optional[Union[dict, list]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        name = type(self).__name__
        check_positive_int('in_channels', in_channels)
        check_positive_int('reduction', reduction)
        if in_channels % reduction != 0:
            raise ValueError(f'reduction {reduction} must divide in_channels {in_channels} of '
                             f'{name} (the factors map {in_channels} -> in_channels / '
                             f'reduction channels)')
        for flag, value in (('use_softmax', use_softmax), ('use_scale', use_scale),
                            ('use_activation', use_activation)):
            check_choice(flag, value, (True, False))
        self.in_channels = in_channels
        self.reduction = reduction
        self.inter_channels = in_channels // reduction
        self.use_scale = use_scale
        self.use_activation = use_activation
        self.use_softmax = use_softmax and use_activation
        self.norm_cfg = norm_cfg_option('norm_cfg', norm_cfg)
        check_norm_channels('norm_cfg', self.norm_cfg, in_channels)
        self.conv_out = ConvModule(
            self.inter_channels, in_channels, 1, norm_cfg=self.norm_cfg, act_cfg=None)

    @property
    def logit_scale(self) -> float:
        """Multiplier of the pairwise logits before the softmax."""
        return 1.0 / math.sqrt(self.inter_channels) if self.use_scale else 1.0

    def factor(self, out_channels: int) -> ConvModule:
        """A factor Z C_i: a 1×1 conv in_channels -> out_channels with bias (no norm, no act)."""
        return ConvModule(self.in_channels, out_channels, 1, norm_cfg=None, act_cfg=None)

    def input_factors(self):
        """The factor convs initialised normal(0, 0.01) by default (everything but conv_out)."""
        return [m for m in self.children() if isinstance(m, ConvModule) and m is not self.conv_out]

    def reset_parameters(self) -> None:
        """The default initialisation (see the class docstring)."""
        for factor in self.input_factors():
            normal_init(factor.conv, mean=0.0, std=FACTOR_INIT_STD, bias=0.0)
        if self.conv_out.with_norm:  # the conv keeps its own init; the zero norm gates it
            constant_init(self.conv_out.norm, 0.0)
        else:
            constant_init(self.conv_out.conv, 0.0)

    def init_weights(self) -> None:
        """The default initialisation, then ``init_cfg`` over it (its ``Pretrained`` entries
        last, as mmengine orders them). mmengine's ``BaseModule.init_weights`` runs
        ``init_cfg`` before each child ``ConvModule``'s own ``init_weights`` (Kaiming, norm
        weight 1), which would overwrite it and the zero output gate."""
        if self.is_init:
            super().init_weights()  # mmengine's warning that it ran more than once
            return
        super().init_weights()
        self.reset_parameters()
        if self.init_cfg:
            cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [self.init_cfg]
            initialize(self, sorted(cfgs, key=lambda cfg: cfg['type'] in (
                'Pretrained', PretrainedInit)))

    def check_input(self, x: Tensor) -> None:
        """Raise a ValueError for a feature map this block cannot take."""
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f'{type(self).__name__} expects a (B, {self.in_channels}, H, W) '
                             f'feature map, got shape {tuple(x.shape)}')

    @abstractmethod
    def inner(self, x: Tensor) -> Tensor:
        """The polynomial before the output conv: (B, c, H, W) -> (B, c/r, H, W)."""

    def forward(self, x: Tensor) -> Tensor:
        self.check_input(x)
        return x + self.conv_out(self.inner(x))
