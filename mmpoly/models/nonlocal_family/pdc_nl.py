"""PDC-NL[3] and PDC-NL[4]: complete non-local polynomials of degree 3 and 4 without factor
sharing (paper eqs. (11) and (12), arXiv:2104.07916)."""
from typing import Optional, Sequence, Tuple, Union

from mmcv.cnn import ConvModule
from torch import Tensor

from mmpoly.registry import MODELS
from ..polynomial.options import check_choice, check_positive_int
from .attention import (OUTPUT_NORM, NonLocalBase, factor_mix, pairwise_product, to_map,
                        to_positions)


def check_spatial_size(value) -> Tuple[int, int]:
    """``spatial_size`` must be (H, W), two positive ints; returns it as a tuple."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f'spatial_size must be (H, W), the feature-map size the block is built '
                         f'for, got {value!r}')
    for i, v in enumerate(value):
        check_positive_int(f'spatial_size[{i}]', v)
    return int(value[0]), int(value[1])


@MODELS.register_module()
class PDCNonLocal3(NonLocalBase):
    """PDC-NL[3]: a complete third-degree non-local polynomial, no factor shared.

    Paper form (Z ∈ R^{HW×c}; degree 3 + degree 2 + degree 1):

        Y[3] = (Z C1 C2ᵀ Zᵀ) Z C3  +  (Z C4) Z C5  +  Z C6

    Implementation (softmax on the 2nd- and 3rd-degree position maps, "as the baseline"):

        A3  = softmax_keys( (Z C1)(Z C2)ᵀ / √(c/r) )    (HW × HW)   third degree
        A2  = softmax_keys( Z C4 )                       (HW × HW)   second degree
        y   = A3 (Z C3) + A2 (Z C5) + Z C6               (HW × c/r)
        out = x + conv_out(y)

    C1 = ``theta``, C2 = ``phi``, C3 = ``g``, C5 = ``c5``, C6 = ``c6``: 1×1 convs c -> c/r with
    bias. C4 = ``c4`` is a *full* factor: a 1×1 conv c -> HW with bias, whose output channel j
    scores key position j (row i of Z C4 is query position i; a guess: the softmax is
    over the key positions, as in NL). C4 ties the block to one feature-map size,
    ``spatial_size``. Unlike DNL, C3 and C5 are not shared. ``conv_out``: 1×1 c/r -> c (bias or
    ``norm_cfg``), zero-initialised. With ``use_softmax=False`` A3 and A2 are divided by HW
    and ``out`` is a polynomial of degree exactly 3 in x.

    Parameters: 5(c²/r + c/r) [C1, C2, C3, C5, C6] + (c²/r + 2c) [conv_out and its BN, the
    default ``norm_cfg``; c²/r + c, a biased conv, with ``norm_cfg=None``] + (c·HW + HW) [C4];
    c = 64, r = 4, HW = 32² gives 72,912 (72,848 with ``norm_cfg=None``).

    Shapes: x (B, c, H, W) -> (B, c, H, W) with (H, W) = ``spatial_size``.

    Args:
        spatial_size: (H, W) of the feature maps the block takes (required).
        with_cp: recompute the second-degree map Z C4 in the backward pass instead of keeping
            it for backward (mmpretrain's name for checkpointing): B·HW² fewer floats held per
            block (256 MiB at 32×32, batch 64) for one more forward of that term
            (:func:`~mmpoly.models.nonlocal_family.attention.factor_mix`; about 8 % slower
            CIFAR training on a CPU). Default False.
        Other args: see :class:`~mmpoly.models.nonlocal_family.attention.NonLocalBase`.
    """

    degree = 3

    def __init__(self,
                 in_channels: int,
                 spatial_size: Sequence[int],
                 reduction: int = 4,
                 use_softmax: bool = True,
                 use_scale: bool = True,
                 use_activation: bool = True,
                 norm_cfg: Union[None, str, dict] = OUTPUT_NORM,
                 with_cp: bool = False,
                 init_cfg: Optional[Union[dict, list]] = None) -> None:
        spatial_size = check_spatial_size(spatial_size)
        super().__init__(in_channels, reduction, use_softmax, use_scale, use_activation,
                         norm_cfg, init_cfg)
        check_choice('with_cp', with_cp, (True, False))
        self.with_cp = with_cp
        self.spatial_size = spatial_size
        self.num_positions = spatial_size[0] * spatial_size[1]
        self.theta = self.factor(self.inter_channels)  # C1
        self.phi = self.factor(self.inter_channels)  # C2
        self.g = self.factor(self.inter_channels)  # C3
        self.c4 = self.factor(self.num_positions)  # C4: one output channel per key position
        self.c5 = self.factor(self.inter_channels)  # C5
        self.c6 = self.factor(self.inter_channels)  # C6
        self.reset_parameters()

    def check_input(self, x: Tensor) -> None:
        super().check_input(x)
        height, width = x.shape[2:]
        if (height, width) != self.spatial_size:
            raise ValueError(
                f'{type(self).__name__} was built for spatial_size {self.spatial_size} (C4 maps '
                f'to {self.num_positions} positions) but got a {height}x{width} feature map. '
                'Its factor C4 is tied to one input size: give every image that size (a fixed '
                'crop or resize-and-pad), or, for inputs of varying size such as detection '
                'images, use NonLocalBlock or DisentangledNonLocalBlock, which fit any size')

    def inner(self, x: Tensor) -> Tensor:
        third = pairwise_product(
            to_positions(self.theta(x)), to_positions(self.phi(x)), to_positions(self.g(x)),
            self.use_softmax, self.logit_scale)
        second = factor_mix(self.c4, x, to_positions(self.c5(x)), self.use_softmax,
                            recompute=self.with_cp)
        first = to_positions(self.c6(x))
        return to_map(third + second + first, x.shape[2], x.shape[3])


@MODELS.register_module()
class PDCNonLocal4(PDCNonLocal3):
    """PDC-NL[4]: PDC-NL[3] multiplied by an SE-like linear channel gate (degree 4).

    Paper form (p: global average pooling, r: replication over positions, ∗: Hadamard):

        Y[4] = Y[3] + Y[3] ∗ r( p(Z C7) C8 )

    Implementation (a guess: the paper gives no more detail): Y[3] is taken after the output
    conv, and the gate has no sigmoid (the paper's equation has none; it must stay linear in Z
    for degree 4):

        y3   = conv_out(y)                                  (PDC-NL[3]'s inner map y)
        s    = C8( mean_positions(Z C7) )                   (c), broadcast to every position
        out  = x + y3 + y3 ∗ s

    C7 = ``c7``: 1×1 conv c -> c/r with bias; C8 = ``c8``: 1×1 conv c/r -> c with bias.
    Extra parameters over PDC-NL[3]: 2c²/r + c/r + c. With ``use_softmax=False`` ``out`` is a
    polynomial of degree exactly 4 in x.

    Gate layout: with the gate (c -> c/4 -> c) in each of the four CIFAR blocks the classifier
    has 12,045,012 parameters (12.05M, the paper prints 12.00M). The other layouts that were tried
    (gate only in the stage-4 block: 12,001,444; gate on the c/4 inner map: 11,979,012) are not
    more natural readings of the equation, so the equation is followed as written.

    Shapes: x (B, c, H, W) -> (B, c, H, W) with (H, W) = ``spatial_size``.

    Args: see :class:`PDCNonLocal3`.
    """

    degree = 4

    def __init__(self,
                 in_channels: int,
                 spatial_size: Sequence[int],
                 reduction: int = 4,
                 use_softmax: bool = True,
                 use_scale: bool = True,
                 use_activation: bool = True,
                 norm_cfg: Union[None, str, dict] = OUTPUT_NORM,
                 with_cp: bool = False,
                 init_cfg: Optional[Union[dict, list]] = None) -> None:
        super().__init__(in_channels, spatial_size, reduction, use_softmax, use_scale,
                         use_activation, norm_cfg, with_cp, init_cfg)
        self.c7 = self.factor(self.inter_channels)  # C7
        self.c8 = ConvModule(self.inter_channels, in_channels, 1, norm_cfg=None,
                             act_cfg=None)  # C8
        self.reset_parameters()

    def channel_gate(self, x: Tensor) -> Tensor:
        """r(p(Z C7) C8): (B, c, H, W) -> (B, c, 1, 1), linear in x (no sigmoid)."""
        return self.c8(self.c7(x).mean(dim=(2, 3), keepdim=True))

    def forward(self, x: Tensor) -> Tensor:
        self.check_input(x)
        y3 = self.conv_out(self.inner(x))
        return x + y3 + y3 * self.channel_gate(x)
