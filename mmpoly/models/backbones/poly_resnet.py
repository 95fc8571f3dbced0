"""ResNet-style backbones whose blocks are polynomials of a chosen type and degree."""
import inspect
import os.path as osp
import traceback
from abc import abstractmethod
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from mmcv.cnn import build_activation_layer, build_conv_layer, build_norm_layer
from mmengine.model import Sequential, constant_init
from mmpretrain.models.backbones.base_backbone import BaseBackbone
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from mmpoly.registry import MODELS
from ..blocks import ResNetBlock
from ..nonlocal_family import NonLocalBase
from ..polynomial.options import (NO_LAYER, _close_match, _registered_names, activation_option,
                                  check_choice, check_norm_channels, check_positive_int,
                                  constructor_options, conv_cfg_option, per_stage,
                                  required_norm_cfg_option, takes_any_keyword,
                                  unknown_option_error)
from .pretrained import load_pretrained, pretrained_init, pretrained_options

#: Blocks per stage of the standard depths (BasicBlock ResNets).
DEPTH_PRESETS: Dict[int, Tuple[int, ...]] = {10: (1, 1, 1, 1), 18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}
#: The default activation of the stem and blocks (``act_cfg``).
BACKBONE_ACT = dict(type='ReLU')
DEFAULT_INIT = [
    dict(type='Kaiming', layer=['Conv2d']),
    dict(type='Constant', val=1, layer=['_BatchNorm', 'GroupNorm'])
]


def _parameter(module_type: Any, option: str) -> Optional[inspect.Parameter]:
    """The parameter ``option`` of the class that ``module_type`` names in ``MODELS``, or None
    if the class (or the option) is not found."""
    cls = module_type if inspect.isclass(module_type) else MODELS.get(module_type)
    return inspect.signature(cls).parameters.get(option) if inspect.isclass(cls) else None


def _accepts(module_type: Any, option: str) -> bool:
    """Whether the class that ``module_type`` names in ``MODELS`` takes ``option``."""
    return _parameter(module_type, option) is not None


def _builds_default_norm(module_type: Any) -> bool:
    """Whether the class that ``module_type`` names takes ``norm_cfg`` and builds a norm when
    it is left unset (its default is neither None nor 'none'; mmcv's ``NonLocal2d``: None)."""
    parameter = _parameter(module_type, 'norm_cfg')
    if parameter is None:
        return False
    default = parameter.default
    return default is not None and not (isinstance(default, str) and default == NO_LAYER)


#: mmcv's plugin layers (``mmcv.cnn.build_plugin_layer``), listed with mmpoly's non-local blocks
#: as the plugin types when a plugin's type is not found.
MMCV_PLUGINS = ('ContextBlock', 'GeneralizedAttention', 'NonLocal2d')
#: Keys of a module config that are not constructor options.
CFG_KEYS = ('type', '_scope_')


def _plugin_types(registry: Any) -> List[str]:
    """The plugin types ``registry`` (and its parents) resolves: mmpoly's non-local blocks and
    mmcv's plugin layers."""
    names = set()
    while registry is not None:
        names.update(name for name, cls in registry.module_dict.items()
                     if inspect.isclass(cls) and issubclass(cls, NonLocalBase))
        names.update(name for name in MMCV_PLUGINS if name in registry.module_dict)
        registry = registry.parent
    return sorted(names)


def _plugin_class(field: str, cfg: dict) -> type:
    """The class that ``cfg['type']`` names in the registry the plugin is built from (the
    ``_scope_`` of ``cfg``, mmpretrain's by default); a ValueError naming ``field`` if there is
    none, or if it is not a module that takes ``in_channels`` (which the backbone sets)."""
    plugin_type = cfg['type']
    scope = cfg.get('_scope_', 'mmpretrain')
    with MODELS.switch_scope_and_registry(scope) as registry:
        if inspect.isclass(plugin_type):
            cls = plugin_type
        else:
            try:
                cls = registry.get(plugin_type) if isinstance(plugin_type, str) else None
            except KeyError:  # an unknown scope prefix
                cls = None
        allowed = _plugin_types(registry)
        names = _registered_names(registry)
    if cls is None:
        hint = _close_match(plugin_type, names) if isinstance(plugin_type, str) else ''
        raise ValueError(f'{field}.type={plugin_type!r} is not a registered module type (scope '
                         f'{scope!r}); plugin types: {allowed} (or any registered module that '
                         f'takes in_channels){hint}')
    if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
        raise ValueError(f'{field}.type={plugin_type!r} is {cls!r}, not a module class; plugin '
                         f'types: {allowed}')
    parameters = inspect.signature(cls).parameters
    if 'in_channels' not in parameters and not takes_any_keyword(cls):
        raise ValueError(f'{field}.type={plugin_type!r}: {cls.__name__} takes no in_channels, '
                         'which the backbone sets to the stage width; plugin types: '
                         f'{allowed}')
    return cls


def _check_plugin_options(where: str, options: dict, cls: type) -> None:
    """Every key of ``options`` (``cfg`` or a ``stage_cfgs`` entry) must be an option of
    ``cls`` other than ``in_channels``, which the backbone sets."""
    if takes_any_keyword(cls):
        return  # checked when built (see build_stage_plugins)
    allowed = [name for name in constructor_options(cls) if name != 'in_channels']
    for name in options:
        if name not in allowed and name not in CFG_KEYS and name != 'in_channels':
            raise unknown_option_error(where, name, cls, allowed)


def _build_plugin(field: str, cfg: dict, cls: type, stage: int) -> nn.Module:
    """Build the plugin ``cfg`` (``in_channels`` set) of class ``cls`` after stage ``stage``."""
    if not takes_any_keyword(cls):
        missing = [name for name, p in inspect.signature(cls).parameters.items()
                   if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                   and name not in cfg]
        if missing:
            raise ValueError(f'{field}.cfg: {cls.__name__} needs {missing} (missing for the '
                             f'plugin after stage {stage}); set it in {field}.cfg, or per '
                             f'stage in {field}.stage_cfgs')
    options = sorted(set(constructor_options(cls)) - {'in_channels'})
    try:
        return MODELS.build(cfg)
    except TypeError as error:  # a **kwargs constructor passed an option it does not take on
        if 'unexpected keyword argument' not in str(error) or not takes_any_keyword(cls):
            raise
        raise ValueError(f'{field}.cfg (type {cls.__name__}) has an option it does not take: '
                         f'{error}; its named options: {options}') from error
    except AssertionError as error:  # mmcv's plugins check their options with bare asserts
        frame = traceback.extract_tb(error.__traceback__)[-1]
        detail = f': {error}' if str(error) else ''
        raise ValueError(
            f'{field}.cfg (type {cls.__name__}, the plugin after stage {stage}) has a value '
            f'{cls.__name__} refuses: its check `{(frame.line or "").strip()}` failed{detail} '
            f'({osp.basename(frame.filename)}, line {frame.lineno}); its named options: '
            f'{options}') from error


def build_stage_plugins(plugins: Optional[Sequence[dict]],
                        stage: int,
                        num_stages: int,
                        channels: int,
                        use_activation: bool = True,
                        norm_cfg: Optional[dict] = None) -> List[nn.Module]:
    """Build the plugins that follow stage ``stage`` (0-based), in the order listed.

    Each entry is ``dict(cfg=dict(type=..., ...), stages=(bool, ...), stage_cfgs=[dict, ...])``
    (as mmdet's ResNet ``plugins``): ``stages`` (default: every stage) says after which stages
    the module is inserted; ``stage_cfgs`` (optional, one dict or None per stage) adds per-stage
    options, e.g. the spatial size of a module tied to one resolution. The backbone sets
    ``in_channels``. With ``use_activation=False`` (the backbone's) a plugin whose type takes a
    ``use_activation`` option and whose config does not set it is built with
    ``use_activation=False`` too (for the non-local blocks: no softmax). Likewise a plugin
    whose type takes a ``norm_cfg`` option that builds a norm by default (mmpoly's non-local
    blocks: BN after the output conv) and whose config (``cfg`` and its ``stage_cfgs`` entry)
    does not set it is built with the backbone's ``norm_cfg`` (when given); a plugin's own
    ``norm_cfg`` wins, and a type whose default is no norm (mmcv's ``NonLocal2d``) or that has
    no such option (mmcv's ``ContextBlock``) is built as its config says.

    A type that is not registered, and an option (in ``cfg`` or a ``stage_cfgs`` entry) that
    the type does not take, raise a ValueError naming the entry (``plugins[i].cfg``), the
    allowed plugin types or options, and the closest match.
    """
    if plugins is not None and not isinstance(plugins, (list, tuple)):
        raise ValueError(f'plugins must be a list of dicts (each with a "cfg" key), or None; got '
                         f'{plugins!r}')
    modules = []
    for k, plugin in enumerate(plugins or []):
        field = f'plugins[{k}]'
        if not isinstance(plugin, dict) or 'cfg' not in plugin:
            raise ValueError(f'{field} must be a dict with a "cfg" key (and optionally "stages",'
                             f' "stage_cfgs"), got {plugin!r}')
        if 'position' in plugin:
            raise ValueError(
                f'{field}.position={plugin["position"]!r}: mmpoly places a plugin after the last '
                'block of each stage chosen by "stages" (the paper\'s placement of non-local '
                'blocks), not inside a block as mmdet\'s Bottleneck "position" does; remove '
                '"position" and choose the stages, e.g. stages=(False, False, True, True)')
        unknown = set(plugin) - {'cfg', 'stages', 'stage_cfgs'}
        if unknown:
            raise ValueError(f'{field} has unknown keys {sorted(unknown)}; allowed: '
                             f"['cfg', 'stages', 'stage_cfgs']")
        if not isinstance(plugin['cfg'], dict) or 'type' not in plugin['cfg']:
            raise ValueError(f'{field}.cfg must be a dict with a "type" key (the module to '
                             f"insert, e.g. dict(type='NonLocalBlock')), got {plugin['cfg']!r}")
        plugin_cls = _plugin_class(f'{field}.cfg', plugin['cfg'])
        stages = per_stage(f'{field}.stages', plugin.get('stages', True), num_stages)
        for flag in stages:
            check_choice(f'{field}.stages', flag, (True, False))
        stage_cfgs = plugin.get('stage_cfgs')
        if stage_cfgs is not None:
            if not isinstance(stage_cfgs, (list, tuple)):
                raise ValueError(f'{field}.stage_cfgs must be a list with one dict (or None) per '
                                 f'stage ({num_stages} stages), got {stage_cfgs!r}')
            stage_cfgs = per_stage(f'{field}.stage_cfgs', stage_cfgs, num_stages)
            for i, options in enumerate(stage_cfgs):
                if options is not None and not isinstance(options, dict):
                    raise ValueError(f'{field}.stage_cfgs[{i}] must be a dict of options for the '
                                     f'plugin after stage {i}, or None; got {options!r}')
                if options and 'in_channels' in options:
                    raise ValueError(f'{field}.stage_cfgs[{i}].in_channels is set by the '
                                     'backbone (stage width)')
                for key in CFG_KEYS:
                    if options and key in options:
                        raise ValueError(
                            f'{field}.stage_cfgs[{i}].{key}={options[key]!r}: a plugin has one '
                            f'type, {field}.cfg.{key}; stage_cfgs hold per-stage options')
                _check_plugin_options(f'{field}.stage_cfgs[{i}]', options or {}, plugin_cls)
        if 'in_channels' in plugin['cfg']:
            raise ValueError(f'{field}.cfg.in_channels is set by the backbone (stage width)')
        _check_plugin_options(f'{field}.cfg', plugin['cfg'], plugin_cls)
        for where, options in [(f'{field}.cfg', plugin['cfg'])] + [
                (f'{field}.stage_cfgs[{i}]', c) for i, c in enumerate(stage_cfgs or [])]:
            if isinstance(options, dict) and pretrained_init(
                    options.get('init_cfg'), f'{where}.init_cfg') is not None:
                raise ValueError(
                    f'{where}.init_cfg={options["init_cfg"]!r}: a Pretrained init inside a '
                    'plugin would load the whole checkpoint into the plugin, non-strictly; put '
                    "it on the backbone: init_cfg=dict(type='Pretrained', checkpoint=PATH, "
                    'prefix=...), which loads the plugins too')
        if not stages[stage]:
            continue
        cfg = dict(plugin['cfg'])
        if stage_cfgs is not None:
            cfg.update(stage_cfgs[stage] or {})
        if not use_activation and 'use_activation' not in cfg \
                and _accepts(cfg.get('type'), 'use_activation'):
            cfg['use_activation'] = False  # the backbone's: no activation anywhere
        if norm_cfg is not None and 'norm_cfg' not in cfg and _builds_default_norm(cfg['type']):
            cfg['norm_cfg'] = dict(norm_cfg)  # the backbone's norm replaces the plugin's default
        # mmpoly's registry scope, also when the backbone is built from an mmdet config
        cfg.setdefault('_scope_', 'mmpretrain')
        modules.append(_build_plugin(field, dict(cfg, in_channels=channels), plugin_cls, stage))
    return modules


def build_block(block_cfg: dict, **stage_args) -> ResNetBlock:
    """Build one block from ``block_cfg`` plus the arguments the backbone sets per block.

    Unknown options raise a ValueError listing the options the block type accepts.
    """
    if not isinstance(block_cfg, dict) or 'type' not in block_cfg:
        raise ValueError(f'block_cfg must be a dict with a "type" key, got {block_cfg!r}')
    if pretrained_init(block_cfg.get('init_cfg'), 'block_cfg.init_cfg') is not None:
        raise ValueError(
            f'block_cfg.init_cfg={block_cfg["init_cfg"]!r}: a Pretrained init inside a block '
            'would load the same checkpoint into every block, non-strictly; put it on the '
            "backbone: init_cfg=dict(type='Pretrained', checkpoint=PATH, prefix=...)")
    block_type = block_cfg['type']
    block_cls = MODELS.get(block_type) if isinstance(block_type, str) else block_type
    if block_cls is None or not (inspect.isclass(block_cls)
                                 and issubclass(block_cls, ResNetBlock)):
        allowed = sorted(name for name, cls in MODELS.module_dict.items()
                         if inspect.isclass(cls) and issubclass(cls, ResNetBlock))
        raise ValueError(f'block_cfg.type must be one of {allowed}, got {block_type!r}')
    accepted = [p for p in inspect.signature(block_cls.__init__).parameters if p != 'self']
    options = {k: v for k, v in block_cfg.items() if k != 'type'}
    for name in options:
        if name not in accepted:
            raise unknown_option_error('block_cfg', name, block_cls,
                                       sorted(set(accepted) - set(stage_args)))
        if name in stage_args and stage_args[name] is not None:
            raise ValueError(f'block_cfg.{name} is set by the backbone; set it there instead')
    for name, value in stage_args.items():
        if value is None:
            continue
        if name not in accepted:
            raise ValueError(f'{name} is not an option of {block_cls.__name__} '
                             f'(block_cfg.type={block_cls.__name__!r})')
        options[name] = value
    return block_cls(**options)


class PolyResNetBase(BaseBackbone):
    """A ResNet whose blocks are any registered block type (degree 1, 2 or N polynomials).

    Args:
        depth: a preset of blocks per stage (10, 18 or 34), or None with ``stage_blocks``.
        stage_blocks: blocks per stage, e.g. (2, 2, 2, 1); with a ``depth`` it must equal
            that preset (set depth=None for other layouts).
        stage_channels: width of each stage; default (64, 128, 256, 512)[:num_stages].
        strides: stride of the first block of each stage; default 1, 2, 2, 2 then 1 for any
            further stage.
        stem_channels: stem width; default ``stage_channels[0]``.
        in_channels: input channels (3 for images, 1 for grey images and spectrograms).
        block_cfg: the block type and its options, e.g. ``dict(type='PDCBlock', degree=2)``.
        hidden_channels: factor width of the higher-degree terms, one int or one per stage.
        plugins: modules inserted after chosen stages, e.g. non-local blocks:
            ``[dict(cfg=dict(type='NonLocalBlock'), stages=(False, True, True, True))]``
            (see :func:`build_stage_plugins`).
        out_indices: stages whose outputs are returned (negative counts from the end), each
            once; outputs come in stage order.
        frozen_stages: stages (with the stem) to freeze; -1 freezes nothing.
        norm_eval: keep every BatchNorm of the backbone (SyncBN too; in the stem, blocks,
            terms and plugins) in eval mode while training (for fine-tuning).
        zero_init_residual: zero γ of the last branch norm of every block.
        use_activation: False removes every activation in the stem and blocks, and in the
            plugins that take a ``use_activation`` option and leave it unset (the
            non-local blocks: no softmax); a plugin's own value is kept. An ``act_cfg`` other
            than its default (or None / 'none') is then an error, as it would be unused.
        with_cp: checkpoint every block (mmpretrain's ResNet option): in training its
            intermediate maps are recomputed in the backward pass instead of kept (see
            :class:`~mmpoly.models.blocks.ResNetBlock`), also the first block after frozen
            stages; plugins are not checkpointed.
        conv_cfg / norm_cfg / act_cfg: mmcv layer configs; each 'type' must be one mmcv
            builds. conv_cfg (None: Conv2d) and act_cfg (None, 'none' or a type name; checked
            also when ``use_activation=False``) are those of the stem and the first-degree
            branch. norm_cfg (a 2-d norm; GroupNorm's num_groups must divide every width it
            normalises) is every norm of the backbone, as in mmpretrain's ResNet: the stem's,
            the first-degree branch's, the blocks' higher-degree norm roles left at 'BN' (the
            factors', inputs' and projections' norms of PDC and Π-net terms) and the plugins'
            default norms (:func:`build_stage_plugins`); e.g. ``dict(type='SyncBN')``,
            ``dict(type='BN', requires_grad=False)`` (frozen γ, β everywhere) or
            ``dict(type='GN', num_groups=16)``. Norms set explicitly win: a block role given
            as another norm or as a dict (PDC's per-sample 'IN' projection norm by default),
            or a plugin's own ``norm_cfg``.
        init_cfg: mmengine init config (Kaiming convs, unit BN by default); a ``Pretrained``
            entry, in any form mmengine accepts, is loaded strictly (see :meth:`init_weights`).
    """

    def __init__(self,
                 depth: Optional[int] = 18,
                 stage_blocks: Optional[Sequence[int]] = None,
                 stage_channels: Optional[Sequence[int]] = None,
                 strides: Optional[Sequence[int]] = None,
                 stem_channels: Optional[int] = None,
                 in_channels: int = 3,
                 block_cfg: dict = dict(type='ResNetBlock'),
                 hidden_channels: Union[None, int, Sequence[Optional[int]]] = None,
                 plugins: Optional[Sequence[dict]] = None,
                 out_indices: Sequence[int] = (3, ),
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 zero_init_residual: bool = True,
                 use_activation: bool = True,
                 with_cp: bool = False,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: dict = dict(type='BN', requires_grad=True),
                 act_cfg: Optional[dict] = BACKBONE_ACT,
                 init_cfg: Union[None, dict, List[dict]] = DEFAULT_INIT) -> None:
        super().__init__(init_cfg=init_cfg)
        pretrained_init(init_cfg, 'backbone.init_cfg')  # two Pretrained entries are an error
        if depth is not None or stage_blocks is None:
            if isinstance(depth, bool) or not isinstance(depth, int) \
                    or depth not in DEPTH_PRESETS:
                raise ValueError(f'depth must be one of {sorted(DEPTH_PRESETS)} (or None with '
                                 f'explicit stage_blocks), got {depth!r}')
        if stage_blocks is None:
            stage_blocks = DEPTH_PRESETS[depth]
        elif depth is not None and isinstance(stage_blocks, (list, tuple)) \
                and tuple(stage_blocks) != DEPTH_PRESETS[depth]:
            raise ValueError(f'stage_blocks={stage_blocks!r} contradicts depth={depth} '
                             f'({list(DEPTH_PRESETS[depth])}); set depth=None')
        if not isinstance(stage_blocks, (list, tuple)) or len(stage_blocks) == 0:
            raise ValueError(f'stage_blocks must be a non-empty list, got {stage_blocks!r}')
        num_stages = len(stage_blocks)
        for i, n in enumerate(stage_blocks):
            check_positive_int(f'stage_blocks[{i}]', n)
        if stage_channels is None:
            if num_stages > 4:
                raise ValueError('stage_channels must be given for more than 4 stages')
            stage_channels = (64, 128, 256, 512)[:num_stages]
        for name, value in (('stage_channels', stage_channels), ('strides', strides)):
            if value is not None and not isinstance(value, (list, tuple)):
                raise ValueError(f'{name} must be a list with one int per stage ({num_stages} '
                                 f'stages), got {value!r}')
        stage_channels = per_stage('stage_channels', list(stage_channels), num_stages)
        for i, c in enumerate(stage_channels):
            check_positive_int(f'stage_channels[{i}]', c)
        if strides is None:
            strides = [1] + [2 if i < 4 else 1 for i in range(1, num_stages)]
        strides = per_stage('strides', list(strides), num_stages)
        for i, s in enumerate(strides):
            check_positive_int(f'strides[{i}]', s)
        stem_channels = stage_channels[0] if stem_channels is None else stem_channels
        check_positive_int('stem_channels', stem_channels)
        check_positive_int('in_channels', in_channels)
        hidden = per_stage('hidden_channels', hidden_channels, num_stages)
        for i, h in enumerate(hidden):
            if h is not None:
                check_positive_int(f'hidden_channels[{i}]', h)
        out_indices = self._check_out_indices(out_indices, num_stages)
        if isinstance(frozen_stages, bool) or not isinstance(frozen_stages, int) \
                or not -1 <= frozen_stages <= num_stages:
            raise ValueError(f'frozen_stages must be an int in [-1, {num_stages}], '
                             f'got {frozen_stages!r}')
        check_choice('use_activation', use_activation, (True, False))
        check_choice('norm_eval', norm_eval, (True, False))
        check_choice('zero_init_residual', zero_init_residual, (True, False))
        check_choice('with_cp', with_cp, (True, False))
        conv_cfg = conv_cfg_option('backbone.conv_cfg', conv_cfg)
        norm_cfg = required_norm_cfg_option('backbone.norm_cfg', norm_cfg)
        for width in sorted({stem_channels, *stage_channels}):  # the stem's and blocks' norms
            check_norm_channels('backbone.norm_cfg', norm_cfg, width)
        act_cfg = activation_option('backbone.act_cfg', act_cfg, BACKBONE_ACT, use_activation,
                                    'the stem and blocks')

        self.in_channels = in_channels
        self.stage_blocks = list(stage_blocks)
        self.stage_channels = stage_channels
        self.num_stages = num_stages
        self.out_indices = out_indices
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.zero_init_residual = zero_init_residual
        self.use_activation = use_activation
        self.with_cp = with_cp
        act_cfg = act_cfg if use_activation else None

        self._make_stem(in_channels, stem_channels, conv_cfg, norm_cfg, act_cfg)
        self.res_layers: List[str] = []
        channels = stem_channels
        for i in range(num_stages):
            blocks = []
            for j in range(stage_blocks[i]):
                blocks.append(
                    build_block(
                        block_cfg,
                        in_channels=channels,
                        out_channels=stage_channels[i],
                        stride=strides[i] if j == 0 else 1,
                        hidden_channels=hidden[i],
                        conv_cfg=conv_cfg,
                        norm_cfg=norm_cfg,
                        act_cfg=act_cfg,
                        use_activation=use_activation,
                        with_cp=True if with_cp else None))  # a block type may lack it
                channels = stage_channels[i]
            blocks += build_stage_plugins(plugins, i, num_stages, channels, use_activation,
                                          norm_cfg)
            name = f'layer{i + 1}'
            # mmengine's Sequential runs each module's own init_weights after the backbone's
            # init_cfg, so a plugin's own initialisation (e.g. a zeroed output conv) survives.
            self.add_module(name, Sequential(*blocks))
            self.res_layers.append(name)
        self._freeze_stages()

    @staticmethod
    def _check_out_indices(out_indices: Union[int, Sequence[int]], num_stages: int
                           ) -> List[int]:
        """The stage indices (negative ones counted from the end), each named once."""
        given = out_indices
        if isinstance(given, int) and not isinstance(given, bool):
            out_indices = [given]
        if not isinstance(out_indices, (list, tuple)) or not out_indices or any(
                isinstance(i, bool) or not isinstance(i, int) or not -num_stages <= i < num_stages
                for i in out_indices):
            raise ValueError(f'out_indices must be a stage index or a non-empty list of them, '
                             f'each an int in [{-num_stages}, {num_stages - 1}] ({num_stages} '
                             f'stages), got {given!r}')
        indices = [i % num_stages for i in out_indices]
        twice = sorted({i for i in indices if indices.count(i) > 1})
        if twice:
            raise ValueError(f'out_indices={given!r} names stage(s) {twice} more than once; '
                             'each stage output is returned once')
        return indices

    @abstractmethod
    def _make_stem(self, in_channels: int, stem_channels: int, conv_cfg: Optional[dict],
                   norm_cfg: dict, act_cfg: Optional[dict]) -> None:
        """Build conv1, norm1 and relu (and anything else the stem needs)."""

    def _stem_layers(self, in_channels: int, stem_channels: int, kernel_size: int, stride: int,
                     conv_cfg: Optional[dict], norm_cfg: dict, act_cfg: Optional[dict]) -> None:
        self.conv1 = build_conv_layer(conv_cfg, in_channels, stem_channels, kernel_size,
                                      stride=stride, padding=kernel_size // 2, bias=False)
        self.norm1_name, norm1 = build_norm_layer(norm_cfg, stem_channels, postfix=1)
        self.add_module(self.norm1_name, norm1)
        self.relu = build_activation_layer(act_cfg) if act_cfg is not None else nn.Identity()

    @property
    def norm1(self) -> nn.Module:
        return getattr(self, self.norm1_name)

    def stem(self, x: Tensor) -> Tensor:
        return self.relu(self.norm1(self.conv1(x)))

    def _freeze_stages(self) -> None:
        if self.frozen_stages >= 0:
            for m in (self.conv1, self.norm1):
                m.eval()
                for param in m.parameters():
                    param.requires_grad = False
        for i in range(1, self.frozen_stages + 1):
            layer = getattr(self, f'layer{i}')
            layer.eval()
            for param in layer.parameters():
                param.requires_grad = False

    def init_weights(self) -> None:
        """Kaiming / unit-BN init (and zero-init residuals), or a strict ``Pretrained`` load.

        ``init_cfg=dict(type='Pretrained', checkpoint=..., prefix=...)`` loads every backbone
        tensor from the checkpoint and raises on any missing, unexpected or misshapen one (see
        :func:`~mmpoly.models.backbones.pretrained.load_pretrained`); mmengine's own loader would
        only warn. ``classifier_config`` may name the config that trains the checkpoint. Every
        form mmengine accepts takes this path: type 'Pretrained', 'mmengine.Pretrained' or
        ``PretrainedInit``, alone or in a list, whose other entries run first (as in mmengine).
        """
        pretrained = pretrained_init(self.init_cfg, 'backbone.init_cfg')
        if pretrained is not None:
            options = pretrained_options(pretrained)
            if isinstance(self.init_cfg, (list, tuple)):
                others = [cfg for cfg in self.init_cfg if cfg is not pretrained]
                if others:  # e.g. a Kaiming entry: run, then overwritten by the strict load
                    init_cfg = self.init_cfg
                    self.init_cfg = others
                    try:
                        super().init_weights()
                    finally:
                        self.init_cfg = init_cfg
            load_pretrained(self, **options)
            self._is_init = True
            return
        super().init_weights()
        if self.zero_init_residual:
            for m in self.modules():
                if isinstance(m, ResNetBlock):
                    constant_init(m.last_branch_norm, 0)

    def forward(self, x: Tensor) -> Tuple[Tensor, ...]:
        """(B, in_channels, H, W) -> one (B, stage_channels[i], H_i, W_i) map per out index."""
        # A torch.fx trace (symbolic shapes) skips the check; eager calls and exports keep it.
        if not isinstance(x, torch.fx.Proxy):
            self._check_input(x)
        x = self.stem(x)
        outs = []
        for i, name in enumerate(self.res_layers):
            x = getattr(self, name)(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)

    def _check_input(self, x: Tensor) -> None:
        """Raise a ValueError for an input that is not a (B, in_channels, H, W) batch."""
        if x.dim() != 4:
            hint = '; a single image? add the batch axis: x[None]' \
                if x.dim() == 3 and x.shape[0] == self.in_channels else ''
            raise ValueError(
                f'the backbone expected a (B, C, H, W) batch, got shape {tuple(x.shape)} '
                f'({x.dim()}-D{hint}); C = model.backbone.in_channels = {self.in_channels}')
        if x.shape[1] != self.in_channels:
            raise ValueError(
                f'model.backbone.in_channels={self.in_channels} but the input batch has shape '
                f'{tuple(x.shape)} ({x.shape[1]} channels): set backbone.in_channels to the '
                'channels the data pipeline / data_preprocessor delivers (3 for RGB, 1 for grey '
                'images and spectrograms)')

    def train(self, mode: bool = True) -> 'PolyResNetBase':
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self


@MODELS.register_module()
class PolyResNetCIFAR(PolyResNetBase):
    """CIFAR-style polynomial ResNet: 3×3 stem, no max-pool (32×32 inputs).

    Args:
        stem_stride: stride of the 3×3 stem convolution: 1 (default, the CIFAR stem) or 2,
            which halves the maps before the first stage (28×28 → 14×14 for Fashion-MNIST).
        *args, **kwargs: :class:`PolyResNetBase`.
    """

    def __init__(self, *args, stem_stride: int = 1, **kwargs) -> None:
        check_choice('stem_stride', stem_stride, (1, 2))
        self.stem_stride = stem_stride  # read by _make_stem, which the base __init__ calls
        super().__init__(*args, **kwargs)

    def _make_stem(self, in_channels, stem_channels, conv_cfg, norm_cfg, act_cfg) -> None:
        self._stem_layers(in_channels, stem_channels, 3, self.stem_stride, conv_cfg, norm_cfg,
                          act_cfg)


@MODELS.register_module()
class PolyResNet(PolyResNetBase):
    """ImageNet-style polynomial ResNet: 7×7 stride-2 stem and a 3×3 stride-2 max-pool."""

    def _make_stem(self, in_channels, stem_channels, conv_cfg, norm_cfg, act_cfg) -> None:
        self._stem_layers(in_channels, stem_channels, 7, 2, conv_cfg, norm_cfg, act_cfg)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def stem(self, x: Tensor) -> Tensor:
        return self.maxpool(super().stem(x))


PDC_BLOCK = dict(type='PDCBlock', degree=2)


@MODELS.register_module()
class PDCResNetCIFAR(PolyResNetCIFAR):
    """:class:`PolyResNetCIFAR` whose blocks default to PDC blocks of degree 2."""

    def __init__(self, *args, block_cfg: dict = PDC_BLOCK, **kwargs) -> None:
        super().__init__(*args, block_cfg=block_cfg, **kwargs)


@MODELS.register_module()
class PDCResNet(PolyResNet):
    """:class:`PolyResNet` whose blocks default to PDC blocks of degree 2."""

    def __init__(self, *args, block_cfg: dict = PDC_BLOCK, **kwargs) -> None:
        super().__init__(*args, block_cfg=block_cfg, **kwargs)
