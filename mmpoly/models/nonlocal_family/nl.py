"""NL: the non-local block, a third-degree polynomial (paper eq. (6), arXiv:2104.07916)."""
from typing import Optional, Union

from torch import Tensor

from mmpoly.registry import MODELS
from .attention import OUTPUT_NORM, NonLocalBase, pairwise_product, to_map, to_positions


@MODELS.register_module()
class NonLocalBlock(NonLocalBase):
    """Non-local block (Wang et al. 2018), embedded Gaussian, as mmcv's ``NonLocal2d``.

    Paper form (degree 3, factors C1 = θ, C2 = φ, C3 = g):

        Y = (Z C1 C2ᵀ Zᵀ) Z C3

    Implementation, with Z ∈ R^{HW×c} the input x flattened over positions:

        A   = softmax_keys( (Z C1)(Z C2)ᵀ / √(c/r) )           (HW × HW)
        y   = A (Z C3)                                          (HW × c/r)
        out = x + conv_out(y)

    C1, C2, C3 are 1×1 convs c -> c/r with bias; ``conv_out`` is a 1×1 conv c/r -> c followed
    by ``norm_cfg`` (BN by default; with ``norm_cfg=None`` a bias instead), zero-initialised so
    the block starts as the identity. With ``use_softmax=False`` A = (Z C1)(Z C2)ᵀ / HW and
    ``out`` is a polynomial of degree exactly 3 in x (BN in eval mode is affine). Parameters:
    4c²/r + 3c/r + 2c with the BN (4c²/r + 3c/r + c with a bias instead).

    Shapes: x (B, c, H, W) -> (B, c, H, W), any H, W.

    Args: see :class:`~mmpoly.models.nonlocal_family.attention.NonLocalBase`.
    """

    degree = 3

    def __init__(self,
                 in_channels: int,
                 reduction: int = 4,
                 use_softmax: bool = True,
                 use_scale: bool = True,
                 use_activation: bool = True,
                 norm_cfg: Union[None, str, dict] = OUTPUT_NORM,
                 init_cfg: Optional[Union[dict, list]] = None) -> None:
        super().__init__(in_channels, reduction, use_softmax, use_scale, use_activation,
                         norm_cfg, init_cfg)
        self.g = self.factor(self.inter_channels)  # C3
        self.theta = self.factor(self.inter_channels)  # C1
        self.phi = self.factor(self.inter_channels)  # C2
        self.reset_parameters()

    def query_key(self, x: Tensor):
        """Z C1 and Z C2, each (B, HW, c/r)."""
        return to_positions(self.theta(x)), to_positions(self.phi(x))

    def inner(self, x: Tensor) -> Tensor:
        query, key = self.query_key(x)
        y = pairwise_product(query, key, to_positions(self.g(x)), self.use_softmax,
                             self.logit_scale)
        return to_map(y, x.shape[2], x.shape[3])
