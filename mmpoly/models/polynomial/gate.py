"""The SE-like channel factor r(p(Z C1) C2): global pooling, then two 1×1 linear maps."""
from typing import Optional

from mmcv.cnn import ConvModule
from mmengine.model import BaseModule
from torch import Tensor, nn

from .options import check_positive_int


class ChannelGate(BaseModule):
    """r(p(u) W1 W2): pool u over positions, map c -> c/reduction -> c, replicate over space.

    With activations: sigmoid(W2 · relu(W1 · pool(u) + b1) + b2) (squeeze-and-excitation);
    without, both maps stay linear and the gate is a first-degree factor of u.
    Shapes: u (B, C, H, W) -> (B, C, 1, 1), broadcast over H×W by the product.
    """

    def __init__(self,
                 channels: int,
                 reduction: int,
                 hidden_act_cfg: Optional[dict] = dict(type='ReLU'),
                 out_act_cfg: Optional[dict] = dict(type='Sigmoid'),
                 field: str = 'reduction') -> None:
        super().__init__()
        check_positive_int('channels', channels)
        check_positive_int(field, reduction)
        if reduction > channels:
            raise ValueError(f'{field} ({reduction}) must not exceed the block width '
                             f'({channels} channels): the squeeze would have no channels')
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.squeeze = ConvModule(channels, channels // reduction, 1, bias=True,
                                  act_cfg=hidden_act_cfg)
        self.excite = ConvModule(channels // reduction, channels, 1, bias=True,
                                 act_cfg=out_act_cfg)

    def forward(self, u: Tensor) -> Tensor:
        return self.excite(self.squeeze(self.pool(u)))
