"""DNL: the disentangled non-local block, NL plus a second-degree unary term
(paper eq. (7), arXiv:2104.07916)."""
from typing import Optional, Union

from torch import Tensor

from mmpoly.registry import MODELS
from ..polynomial.options import check_number
from .attention import OUTPUT_NORM, mix_positions, pairwise_product, to_map, to_positions
from .nl import NonLocalBlock

#: DNL's softmax temperature τ (Yin et al. 2020), the default.
TEMPERATURE = 0.05


@MODELS.register_module()
class DisentangledNonLocalBlock(NonLocalBlock):
    """Disentangled non-local block (Yin et al. 2020), as mmsegmentation's DNL.

    Paper form (degree 3 + degree 2; factors C1 = θ, C2 = φ, C3 = g shared by both terms,
    c4 = ``conv_mask``; the paper's (C2 Z − μ_k)ᵀ read as (Z C2 − μ_k)ᵀ):

        Y = ( (Z C1 − μ_q)(Z C2 − μ_k)ᵀ  +  1 (Z c4)ᵀ ) Z C3

    Implementation (μ_q, μ_k: means of Z C1, Z C2 over the positions, "whitening"):

        A   = softmax_keys( (Z C1 − μ_q)(Z C2 − μ_k)ᵀ / √(c/r) / τ )     (HW × HW)
        m   = softmax_positions( Z c4 )                                    (HW)
        y   = A (Z C3) + 1 mᵀ (Z C3)                                       (HW × c/r)
        out = x + conv_out(y)

    c4 is a 1×1 conv c -> 1 with bias; the unary term mᵀ Z C3 ∈ R^{c/r} is broadcast to
    every position. g and conv_out are shared by the two terms: conv_out is applied once to
    their sum (mmsegmentation's ``conv_out(y + unary)``; the same as summing two conv_out
    outputs, except that conv_out's bias is added once). Extra parameters over NL: c + 1.
    With ``use_softmax=False`` (or ``use_activation=False``) A and m are divided by HW instead,
    τ is not used (a ``temperature`` other than the default is then an error), and ``out`` is
    a polynomial of degree exactly 3 in x (the centring is linear).

    Shapes: x (B, c, H, W) -> (B, c, H, W), any H, W.

    Args:
        temperature: τ > 0, the softmax temperature of the pairwise logits (0.05 in DNL);
            only with the softmax.
        Other args: see :class:`~mmpoly.models.nonlocal_family.attention.NonLocalBase`.
    """

    degree = 3

    def __init__(self,
                 in_channels: int,
                 reduction: int = 4,
                 use_softmax: bool = True,
                 use_scale: bool = True,
                 temperature: float = TEMPERATURE,
                 use_activation: bool = True,
                 norm_cfg: Union[None, str, dict] = OUTPUT_NORM,
                 init_cfg: Optional[Union[dict, list]] = None) -> None:
        if check_number('temperature', temperature) <= 0:
            raise ValueError(f'temperature must be a positive number, got {temperature!r}')
        super().__init__(in_channels, reduction, use_softmax, use_scale, use_activation,
                         norm_cfg, init_cfg)
        if not self.use_softmax and float(temperature) != TEMPERATURE:
            off = 'use_softmax=False' if not use_softmax else \
                'use_activation=False (which also turns the softmax off)'
            raise ValueError(
                f'temperature={temperature!r} is unused with {off}: τ divides the pairwise '
                'logits before the softmax, and without it the position map is divided by the '
                f'number of positions; leave temperature unset (or {TEMPERATURE}), or use the '
                'softmax (use_softmax=True, use_activation=True)')
        self.temperature = float(temperature)
        self.conv_mask = self.factor(1)  # c4
        self.reset_parameters()

    @property
    def logit_scale(self) -> float:
        return super().logit_scale / self.temperature

    def query_key(self, x: Tensor):
        """Whitened Z C1 − μ_q and Z C2 − μ_k, each (B, HW, c/r)."""
        query, key = super().query_key(x)
        return (query - query.mean(dim=1, keepdim=True), key - key.mean(dim=1, keepdim=True))

    def inner(self, x: Tensor) -> Tensor:
        query, key = self.query_key(x)
        value = to_positions(self.g(x))  # Z C3, shared by both terms
        pairwise = pairwise_product(query, key, value, self.use_softmax, self.logit_scale)
        # unary (second-degree) term: (1, HW) weights over positions times Z C3 -> (B, 1, c/r)
        unary = mix_positions(to_positions(self.conv_mask(x)).transpose(1, 2), value,
                              self.use_softmax)
        return to_map(pairwise + unary, x.shape[2], x.shape[3])
