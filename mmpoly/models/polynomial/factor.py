"""Factors C^T z, their Hadamard product, and the projection back to the block width."""
import functools
import inspect
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F
from mmcv.cnn import ConvModule, build_activation_layer
from mmengine.registry import MODELS
from torch import Tensor, nn

from .options import check_odd_kernel, check_positive_int


class Factor(ConvModule):
    """One factor of a polynomial term: a k×k conv (stride 1, 'same' padding, no bias),
    then an optional norm and an optional activation.

    The activation is any type ``build_activation_layer`` builds: mmcv's ``ConvModule`` passes
    ``inplace`` to every activation outside a fixed list, so one whose constructor takes no
    ``inplace`` (mmcv's ``Clamp``, a user's own) is built here from ``act_cfg`` as given.

    Shapes: (B, in_channels, H, W) -> (B, out_channels, H, W).
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 kernel_size: int = 3,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: Optional[dict] = dict(type='BN'),
                 act_cfg: Optional[dict] = None) -> None:
        check_positive_int('in_channels', in_channels)
        check_positive_int('out_channels', out_channels)
        check_odd_kernel('kernel_size', kernel_size)
        own_act = act_cfg is not None and not _takes_inplace(act_cfg['type'])
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride=1,
            padding=kernel_size // 2,
            bias=False,
            conv_cfg=conv_cfg,
            norm_cfg=norm_cfg,
            act_cfg=None if own_act else act_cfg)
        if own_act:  # the conv's init is the same: not LeakyReLU, so kaiming for ReLU
            self.act_cfg = act_cfg
            self.with_activation = True
            self.activate = build_activation_layer(act_cfg)
        if self.with_norm and type(self.norm) is nn.InstanceNorm2d:
            norm = self.norm
            faster = InstanceNorm2d(norm.num_features, norm.eps, norm.momentum, norm.affine,
                                    norm.track_running_stats)
            for name, param in norm.named_parameters():  # norm_cfg's requires_grad
                getattr(faster, name).requires_grad_(param.requires_grad)
            setattr(self, self.norm_name, faster)


class InstanceNorm2d(nn.InstanceNorm2d):
    """``nn.InstanceNorm2d``, computed as a GroupNorm with one group per channel: the same
    function, parameters and state dict. PyTorch's CPU ``instance_norm`` goes through
    ``batch_norm`` on a (1, B·C, H, W) view and its forward pass is several times slower
    (measured 5.8 ms against 0.6 ms on a 64×64×32×32 input, 2 threads). With running
    statistics (``track_running_stats=True``) it is ``nn.InstanceNorm2d`` unchanged.

    A channels-last CPU map is normalised in NCHW order and returned channels-last when
    :func:`group_norm_in_nchw` says so; a ``torch.fx`` trace records a plain group norm (no
    layout test on a Proxy). :class:`Factor` uses this class for the 'IN' norms of the
    polynomial terms' projections. Shapes: (B, C, H, W) -> (B, C, H, W).
    """

    def forward(self, input: Tensor) -> Tensor:
        if isinstance(input, torch.fx.Proxy) and not self.track_running_stats:
            # a torch.fx trace: the same function, whatever the layout of the traced input
            return F.group_norm(input, self.num_features, self.weight, self.bias, self.eps)
        if self.track_running_stats or input.dim() != 4 or input.size(1) != self.num_features:
            return super().forward(input)
        if group_norm_in_nchw(input):
            out = F.group_norm(input.contiguous(), self.num_features, self.weight, self.bias,
                               self.eps)
            return out.contiguous(memory_format=torch.channels_last)
        return F.group_norm(input, self.num_features, self.weight, self.bias, self.eps)


#: Below this many pixels per map, PyTorch's channels-last CPU group norm with one channel per
#: group is many times slower than its NCHW kernel and two layout copies; from it on, faster.
NCHW_GROUP_NORM_BELOW = 1024


def group_norm_in_nchw(x: Tensor) -> bool:
    """Whether the instance norm (a group norm of one channel per group) of the (B, C, H, W)
    map ``x`` runs on an NCHW copy of it: a CPU map stored channels-last that is bfloat16 /
    float16, or smaller than :data:`NCHW_GROUP_NORM_BELOW` pixels; never under functorch
    transforms (:func:`functorch_active`), which cannot query the layout.

    Forward pass, float32, 2 threads, 2-core AMD EPYC (AVX2), channels-last kernel against
    copy + NCHW kernel + copy back: 256×16×14×14 6.7 against 1.0 ms; 256×32×7×7 3.5 against
    0.7 ms; 8×64×30×30 4.2 against 0.6 ms; 8×64×32×32 (1,024 pixels) 0.2 against 1.4 ms;
    1×64×112×112 0.3 against 2.0 ms. In bfloat16 the channels-last kernel is 4–10× slower
    than the copies at every size measured (forward + backward of a 64×64×32×32 map: 40.3
    against 10.5 ms, 2 threads). The backward pass of the fused polynomial terms
    (:mod:`.chain`) follows the same rule: float32, 256×16×14×14 4.4 against 2.5 ms (medians
    of 15), 256×32×7×7 2.0 against 0.9 ms; 64×64×32×32 28.8 against 39.6 ms.
    """
    if functorch_active() or not (
            x.device.type == 'cpu' and x.is_contiguous(memory_format=torch.channels_last)
            and not x.is_contiguous()):
        return False
    return x.dtype in (torch.bfloat16, torch.float16) or \
        x.shape[2] * x.shape[3] < NCHW_GROUP_NORM_BELOW


def functorch_active() -> bool:
    """Whether functorch transforms (``torch.func.vmap``, ``grad``, ...) are active; under
    ``vmap`` a tensor's memory format other than NCHW cannot be queried."""
    active = getattr(torch._C, '_are_functorch_transforms_active', None)
    return active is not None and active()


def _takes_inplace(act_type: Union[str, type]) -> bool:
    """Whether the activation class registered as ``act_type`` accepts an ``inplace`` arg."""
    if isinstance(act_type, str):
        with MODELS.switch_scope_and_registry(None) as registry:
            act_type = registry.get(act_type)
        if act_type is None:  # unknown: left to build_activation_layer, which names it
            return True
    if act_type.__init__ is nn.Module.__init__:  # takes (*args, **kwargs) but passes no kwargs
        return False
    params = inspect.signature(act_type).parameters
    return 'inplace' in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


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
        check_positive_int('in_channels', in_channels)
        check_positive_int('out_channels', out_channels)
        check_positive_int('num_convs', num_convs)
        convs = [
            Factor(in_channels if i == 0 else out_channels, out_channels, kernel_size,
                   conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
            for i in range(num_convs)
        ]
        super().__init__(*convs)
