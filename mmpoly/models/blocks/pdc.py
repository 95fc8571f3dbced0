"""PDC: the ResNet block augmented with higher-degree terms that share no factors."""
import inspect
from typing import Optional, Union

from mmcv.cnn import build_norm_layer
from torch import Tensor, nn

from mmpoly.registry import MODELS
from ..polynomial import (PolynomialTerm, act_cfg_option, block_norm_cfg, check_number,
                          check_odd_kernel, check_positive_int)
from ..polynomial.options import unused_activation
from .basic import ResNetBlock

LEAKY_RELU = dict(type='LeakyReLU', negative_slope=0.01)

#: The options of the higher-degree terms (degrees 2..N), which a degree-1 block does not build.
TERM_OPTIONS = ('hidden_channels', 'factor_kernel_size', 'projection_kernel_size',
                'num_projection_convs', 'input_norm', 'factor_norm', 'projection_norm',
                'factor_act', 'projection_act', 'scale_init')
#: The activation options of the terms (compared as the layer configs they give).
ACT_OPTIONS = ('factor_act', 'projection_act')


@MODELS.register_module()
class PDCBlock(ResNetBlock):
    """Polynomial of degree N without factor sharing (paper eq. (10), arXiv:2104.07916).

        y = act( C z + I z  +  Σ_{n=2..N} α_n · P_n( F_{n,1}(x1) ∘ … ∘ F_{n,n}(x1) ) ),
        x1 = input_norm(I z)

    The first-degree term is the ResNet branch plus shortcut; every degree n >= 2 has its own
    n factors (:class:`PolynomialTerm`), so no factor is shared across degrees. With
    ``degree=1`` the block is exactly :class:`ResNetBlock` (no extra modules or parameters).
    Defaults are those of the authors' official CIFAR configuration ``pdc_so_nosharing.yml``.

    Args:
        degree: N >= 1.
        hidden_channels: width of the factors (the official ``planes_ho``); default out_channels.
        factor_kernel_size: odd kernel of the factor convs (``kern_loc_so``).
        projection_kernel_size: odd kernel of the projection convs (``kern_loc``).
        num_projection_convs: convs in each projection (``n_lconvs``).
        input_norm: norm of the factor input I z (``norm_x``): 'BN' (the block's ``norm_cfg``,
            which a backbone sets to its own: BatchNorm2d by default, SyncBN, frozen BN or GN
            when the backbone's says so), any other 2-d norm type mmcv's ``build_norm_layer``
            builds ('IN' = InstanceNorm2d, a type you registered in ``MODELS``, ...), 'none' or
            a dict (``dict(type='GN', num_groups=4)``; a dict, even of type 'BN', is built as
            given).
        factor_norm: norm after each factor conv, same choices.
        projection_norm: norm after each projection conv (``norm_local``), same choices; the
            default 'IN' (per-sample, no parameters or statistics) is kept whatever
            ``norm_cfg`` is.
        factor_act / projection_act: activations of factors / projection ('none' to drop).
        scale_init: initial value of every α_n (``init_a``; 0 switches the terms off at start).
        Other args: see :class:`ResNetBlock`.

    Options that would be unused are errors: with ``degree=1`` any term option
    (:data:`TERM_OPTIONS`) other than its default, and with ``use_activation=False`` a
    ``factor_act`` / ``projection_act`` other than its default (or None / 'none').
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 stride: int = 1,
                 degree: int = 2,
                 hidden_channels: Optional[int] = None,
                 first_degree_convs: int = 2,
                 factor_kernel_size: int = 3,
                 projection_kernel_size: int = 3,
                 num_projection_convs: int = 1,
                 input_norm: Union[None, str, dict] = 'BN',
                 factor_norm: Union[None, str, dict] = 'BN',
                 projection_norm: Union[None, str, dict] = 'IN',
                 factor_act: Union[None, str, dict] = LEAKY_RELU,
                 projection_act: Union[None, str, dict] = LEAKY_RELU,
                 scale_init: float = 0.0,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: Optional[dict] = dict(type='ReLU'),
                 use_activation: bool = True,
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(in_channels, out_channels, stride, first_degree_convs, conv_cfg,
                         norm_cfg, act_cfg, use_activation, with_cp=with_cp, init_cfg=init_cfg)
        self.degree = check_positive_int('degree', degree)
        given = dict(hidden_channels=hidden_channels, factor_kernel_size=factor_kernel_size,
                     projection_kernel_size=projection_kernel_size,
                     num_projection_convs=num_projection_convs, input_norm=input_norm,
                     factor_norm=factor_norm, projection_norm=projection_norm,
                     factor_act=factor_act, projection_act=projection_act,
                     scale_init=scale_init)
        hidden_channels = out_channels if hidden_channels is None else hidden_channels
        self.hidden_channels = check_positive_int('hidden_channels', hidden_channels)
        check_odd_kernel('factor_kernel_size', factor_kernel_size)
        check_odd_kernel('projection_kernel_size', projection_kernel_size)
        check_positive_int('num_projection_convs', num_projection_convs)
        # 'BN' roles follow norm_cfg; checked also for degree 1 (no terms): typos must not pass
        input_norm_cfg = block_norm_cfg('input_norm', input_norm, self.norm_cfg, out_channels)
        factor_norm = block_norm_cfg('factor_norm', factor_norm, self.norm_cfg,
                                     self.hidden_channels)
        projection_norm = block_norm_cfg('projection_norm', projection_norm, self.norm_cfg,
                                         out_channels)
        factor_act = act_cfg_option('factor_act', factor_act)
        projection_act = act_cfg_option('projection_act', projection_act)
        check_number('scale_init', scale_init)
        self._refuse_unused(given, use_activation)
        if not use_activation:
            factor_act = projection_act = None

        self.input_norm: nn.Module = nn.Identity()
        if degree >= 2 and input_norm_cfg is not None:
            self.input_norm = build_norm_layer(input_norm_cfg, out_channels)[1]
        self.terms = nn.ModuleList(
            PolynomialTerm(
                n,
                out_channels,
                self.hidden_channels,
                out_channels,
                factor_kernel_size=factor_kernel_size,
                projection_kernel_size=projection_kernel_size,
                num_projection_convs=num_projection_convs,
                conv_cfg=conv_cfg,
                factor_norm=factor_norm,
                factor_act=factor_act,
                projection_norm=projection_norm,
                projection_act=projection_act,
                scale_init=scale_init) for n in range(2, degree + 1))

    def _refuse_unused(self, given: dict, use_activation: bool) -> None:
        """Raise a ValueError for a term option in ``given`` (checked values) that the block
        would not use: any of them at degree 1 (no terms), an activation without
        activations."""
        defaults = {name: p.default for name, p in
                    inspect.signature(PDCBlock.__init__).parameters.items()}
        if self.degree == 1:
            unused = [name for name in TERM_OPTIONS if (
                act_cfg_option(name, given[name]) != act_cfg_option(name, defaults[name])
                if name in ACT_OPTIONS else given[name] != defaults[name])]
            if unused:
                listed = ', '.join(f'{name}={given[name]!r}' for name in unused)
                backbone = ' (hidden_channels also comes from backbone.hidden_channels)' \
                    if 'hidden_channels' in unused else ''
                raise ValueError(
                    f'{listed}: unused with degree=1, which builds no higher-degree terms (the '
                    f'block is a ResNetBlock): set degree >= 2, or leave '
                    f'{"it" if len(unused) == 1 else "them"} unset{backbone}')
        if not use_activation:
            for name in ACT_OPTIONS:
                if unused_activation(given[name], defaults[name]):
                    raise ValueError(
                        f'{name}={given[name]!r} is unused with use_activation=False, which '
                        'removes every activation of the block: set use_activation=True, or '
                        f"leave {name} unset (or None / 'none')")

    def polynomial_terms(self, branch: Tensor, shortcut: Tensor) -> Tensor:
        out = branch + shortcut  # the first-degree term
        if len(self.terms) > 0:
            z = self.input_norm(shortcut)
            for term in self.terms:  # degrees 2..N, each with its own factors
                out = out + term(z)
        return out
