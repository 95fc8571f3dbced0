"""SE: the ResNet block whose branch is multiplied by a channel gate of itself (degree 2)."""
from typing import Optional

from torch import Tensor

from mmpoly.registry import MODELS
from ..polynomial import hadamard_product
from ..polynomial.gate import ChannelGate
from .basic import ResNetBlock


@MODELS.register_module()
class SEBlock(ResNetBlock):
    """Squeeze-and-excitation block (paper eq. (3), arXiv:2104.07916), a second-degree term:

        y = act( u ∘ r(p(u) C2) + I z ),   u = C1 z (the ResNet branch)

    The gate's factor is the branch itself (shared factor), so the product has degree 2.
    Placement as in mmpretrain's SE-ResNet: after the branch's last norm, before the shortcut.

    Args:
        reduction: squeeze ratio of the gate (4 on CIFAR / speech, 16 on ImageNet);
            must not exceed the block width.
        Other args: see :class:`ResNetBlock`. With ``use_activation=False`` the gate has no ReLU
        and no sigmoid.
    """

    degree = 2

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 stride: int = 1,
                 reduction: int = 16,
                 first_degree_convs: int = 2,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: Optional[dict] = dict(type='ReLU'),
                 use_activation: bool = True,
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(in_channels, out_channels, stride, first_degree_convs, conv_cfg,
                         norm_cfg, act_cfg, use_activation, with_cp=with_cp, init_cfg=init_cfg)
        self.reduction = reduction
        self.gate = ChannelGate(
            out_channels, reduction,
            hidden_act_cfg=dict(type='ReLU') if use_activation else None,
            out_act_cfg=dict(type='Sigmoid') if use_activation else None)

    def polynomial_terms(self, branch: Tensor, shortcut: Tensor) -> Tensor:
        return hadamard_product([branch, self.gate(branch)]) + shortcut
