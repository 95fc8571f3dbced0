"""Validation of user options: every bad value raises a ValueError that names the option."""
import difflib
import inspect
import math
from typing import Any, List, Optional, Sequence, Tuple, Union

import mmcv.cnn  # noqa: F401  (registers mmcv's norm and activation layers in MODELS)
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry
from torch import nn

NormOption = Union[None, str, dict]
ActOption = Union[None, str, dict]

#: The option string that switches a norm or activation off (no layer is built).
NO_LAYER = 'none'


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an int >= 1, else raise a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'{name} must be a positive integer, got {value!r}')
    return value


def check_non_negative_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an int >= 0, else raise a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f'{name} must be an integer >= 0, got {value!r}')
    return value


def check_number(name: str, value: Any) -> float:
    """Return ``value`` as a float if it is a finite real number (not a bool, nan or inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise ValueError(f'{name} must be a finite number, got {value!r}')
    return float(value)


def check_odd_kernel(name: str, value: Any) -> int:
    """Kernel sizes must be odd so that 'same' padding (k // 2) keeps the spatial size."""
    check_positive_int(name, value)
    if value % 2 == 0:
        raise ValueError(f'{name} must be an odd kernel size (1, 3, 5, ...) so that padding '
                         f'{name} // 2 keeps the spatial size, got {value}')
    return value


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    """Return ``value`` if it is one of ``choices``, else raise a ValueError naming ``name``."""
    # match type too: True must not pass for 1, nor 1 for True
    if not any(type(value) is type(c) and value == c for c in choices):
        raise ValueError(f'{name} must be one of {list(choices)}, got {value!r}')
    return value


def _close_match(name: str, allowed: Sequence[str]) -> str:
    """'; did you mean ...?' when ``name`` is close to one of ``allowed``, else ''."""
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    return f'; did you mean {close[0]!r}?' if close else ''


def unknown_option_error(where: str, name: str, cls: type, allowed: Sequence[str]
                         ) -> ValueError:
    """The error for option ``name`` of ``where`` (a config of type ``cls``) that ``cls`` does
    not take: the allowed options, and the closest one."""
    return ValueError(f'{where} has unknown option {name!r} for {cls.__name__}; allowed '
                      f'options: {sorted(allowed)}{_close_match(name, allowed)}')


def takes_any_keyword(cls: type) -> bool:
    """Whether the constructor of ``cls`` has a ``**kwargs`` (its options cannot be listed)."""
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values())


def constructor_options(cls: type) -> List[str]:
    """The named constructor options of ``cls``."""
    return [name for name, p in inspect.signature(cls).parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _registered_names(registry: Registry) -> List[str]:
    """Every name ``registry.get`` can resolve without a scope prefix: its own and its parents'."""
    names: List[str] = []
    while registry is not None:
        names.extend(registry.module_dict)
        registry = registry.parent
    return names


def _check_layer_type(name: str, layer_type: Any, kind: str, builder: str,
                      may_be_none: bool = True) -> None:
    """Raise a ValueError naming ``name`` unless mmcv's ``builder`` can resolve ``layer_type``.

    mmcv's ``build_conv_layer``, ``build_norm_layer`` and ``build_activation_layer`` look types
    up in mmengine's ``MODELS`` registry as switched to the current default scope (mmpretrain's
    or mmdet's ``MODELS`` inside a runner, whose parent is mmengine's), so the same lookup is done
    here: every type mmcv registers ('BN2d', 'IN2d', 'ConvWS', 'RReLU', ...) and every type a
    user registers there is accepted. A class (an ``nn.Module`` subclass) is accepted as mmcv
    accepts it. ``may_be_none`` says whether 'none' (no layer) is among the allowed values.
    """
    if inspect.isclass(layer_type):
        if issubclass(layer_type, nn.Module):
            return
        raise ValueError(f'{name} must be an nn.Module class when given as a class, got '
                         f'{layer_type!r}')
    if not isinstance(layer_type, str):
        raise ValueError(f'{name} must be {kind} type name (str), got {layer_type!r}')
    with MMENGINE_MODELS.switch_scope_and_registry(None) as registry:
        try:
            found = registry.get(layer_type)
        except KeyError:  # an unknown scope prefix such as 'nope.BN'
            found = None
        if found is not None:
            return
        names = _registered_names(registry)
        scope = registry.scope
    by_lower = {n.lower(): n for n in names + ([NO_LAYER] if may_be_none else [])}
    close = [by_lower[n] for n in
             difflib.get_close_matches(layer_type.lower(), by_lower, n=5, cutoff=0.6)]
    hint = f'; close matches: {close}' if close else ''
    where = (f'registered in the MODELS registry that mmcv.cnn.{builder} searches (scope '
             f'{scope!r} and its parents; register your own with mmengine.registry.MODELS or '
             f'that scope\'s MODELS.register_module())')
    if may_be_none:
        raise ValueError(f'{name} must be {NO_LAYER!r} or {kind} type {where}, got '
                         f'{layer_type!r}{hint}')
    raise ValueError(f'{name}={layer_type!r}: not {kind} type {where}{hint}')


def _layer_cfg(name: str, value: Any, kind: str, builder: str) -> Optional[dict]:
    if value is None:
        return None
    if isinstance(value, str):
        if value == NO_LAYER:
            return None
        _check_layer_type(name, value, kind, builder)
        return dict(type=value)
    if not isinstance(value, dict) or 'type' not in value:
        raise ValueError(f'{name} must be {kind} type name, {NO_LAYER!r}, a dict with a "type" '
                         f'key, or None; got {value!r}')
    if value['type'] == NO_LAYER:
        return None
    _check_layer_type(f'{name}.type', value['type'], kind, builder)
    return dict(value)


def norm_cfg_option(name: str, value: NormOption) -> Optional[dict]:
    """Turn 'BN' / 'IN' / 'none' / dict(type=...) / None into an mmcv ``norm_cfg`` (or None).

    Any norm type that ``mmcv.cnn.build_norm_layer`` can build for (B, C, H, W) maps is accepted
    ('IN' is InstanceNorm2d, as in mmcv; GroupNorm as a dict with its ``num_groups``); a 1-d /
    3-d norm or ``nn.LayerNorm`` is refused (:func:`_check_map_norm`).
    """
    return _check_map_norm(name, _layer_cfg(name, value, 'a norm', 'build_norm_layer'))


#: A block's norm role (``input_norm``, ``factor_norm``, ``projection_norm``) given as this
#: string is the block's own norm: it is built from the block's ``norm_cfg``, which a backbone
#: sets to its own (BatchNorm2d by default; SyncBN, frozen BN, GN, ... when the backbone says so).
BLOCK_NORM = 'BN'

#: torch norms that do not normalise a (B, C, H, W) map per channel (exact types: a registered
#: subclass, such as mmpretrain's channel-wise 'LN2d', is accepted).
NOT_MAP_NORMS = (nn.BatchNorm1d, nn.BatchNorm3d, nn.InstanceNorm1d, nn.InstanceNorm3d,
                 nn.LayerNorm)


def block_norm_cfg(name: str, value: NormOption, norm_cfg: dict,
                   channels: int) -> Optional[dict]:
    """The norm config of the block's norm role ``name`` whose layers normalise ``channels``.

    ``value`` :data:`BLOCK_NORM` ('BN') gives a copy of the block's ``norm_cfg`` (checked by the
    block); any other value is read by :func:`norm_cfg_option` and wins ('IN', a dict such as
    ``dict(type='BN', momentum=0.01)``; 'none' / None: no norm). GroupNorm must divide
    ``channels`` (:func:`check_norm_channels`).
    """
    if isinstance(value, str) and value == BLOCK_NORM:
        field, cfg = f"norm_cfg (through {name}='{BLOCK_NORM}')", dict(norm_cfg)
    else:
        field, cfg = name, norm_cfg_option(name, value)
    check_norm_channels(field, cfg, channels)
    return cfg


#: Conv classes mmcv's ``build_conv_layer`` resolves that do not map (B, C, H, W) maps to
#: (B, C', H', W') by a 2-d convolution (1-d, 3-d, transposed), refused in a ``conv_cfg``.
NOT_MAP_CONVS = (nn.Conv1d, nn.Conv3d, nn.modules.conv._ConvTransposeNd)


def _layer_class(layer_type: Any) -> Any:
    """The class mmcv's ``build_conv_layer``, ``build_norm_layer`` and
    ``build_activation_layer`` build for ``layer_type`` (a checked type)."""
    if isinstance(layer_type, str):
        with MMENGINE_MODELS.switch_scope_and_registry(None) as registry:
            return registry.get(layer_type)
    return layer_type


#: Options of a layer config that mmcv's builder reads itself, besides the layer class's.
BUILDER_OPTIONS = {'build_norm_layer': ('requires_grad', ), 'build_activation_layer': (),
                   'build_conv_layer': ()}
#: Keys of a layer config that are no option: the type, and the registry scope where the
#: builder reads it (``build_activation_layer`` builds with ``MODELS.build``).
BUILDER_CFG_KEYS = {'build_norm_layer': ('type', ), 'build_activation_layer': ('type', '_scope_'),
                    'build_conv_layer': ('type', )}
#: The arguments mmpoly's layers give ``mmcv.cnn.build_conv_layer`` themselves (a conv_cfg key
#: among them is a "multiple values" TypeError).
CONV_CALL_ARGS = ('in_channels', 'out_channels', 'kernel_size', 'stride', 'padding', 'bias')


def _set_by_builder(layer_cls: type, builder: str) -> Tuple[Tuple[str, ...], str]:
    """The constructor arguments that mmcv's ``builder`` or its callers set themselves, and what
    they are: the channels a norm normalises (``num_channels`` of ``nn.GroupNorm``, the first
    argument of any other norm); a conv's :data:`CONV_CALL_ARGS`."""
    if builder == 'build_conv_layer':
        return CONV_CALL_ARGS, "each layer's channels, kernel size, stride, padding and bias"
    if builder != 'build_norm_layer':
        return (), ''
    if layer_cls is nn.GroupNorm:
        return ('num_channels', ), 'the channels of the map it normalises'
    return tuple(constructor_options(layer_cls)[:1]), 'the channels of the map it normalises'


def _check_layer_keys(name: str, cfg: Optional[dict], builder: str) -> Optional[dict]:
    """``cfg``, unless a key of it is not an option of the layer class it builds (read from
    the class's signature) nor one of ``builder``'s :data:`BUILDER_OPTIONS` and
    :data:`BUILDER_CFG_KEYS`, or is an argument set without it (:func:`_set_by_builder`):
    then a ValueError naming ``name``, the key and the allowed options. A class whose
    constructor takes ``**kwargs`` is not checked (its options cannot be listed)."""
    if cfg is None:
        return cfg
    layer_cls = _layer_class(cfg['type'])
    if not inspect.isclass(layer_cls) or takes_any_keyword(layer_cls):
        return cfg
    own, what = _set_by_builder(layer_cls, builder)
    allowed = [key for key in constructor_options(layer_cls) if key not in own] \
        + list(BUILDER_OPTIONS[builder])
    for key in cfg:
        if key in own:
            raise ValueError(f'{name}={cfg!r}: {key} is set by mmcv.cnn.{builder} ({what}); '
                             'remove it')
        if key not in allowed and key not in BUILDER_CFG_KEYS[builder]:
            raise unknown_option_error(name, key, layer_cls, allowed)
    return cfg


def _check_map_norm(name: str, cfg: Optional[dict]) -> Optional[dict]:
    """``cfg``, unless it builds a norm that cannot normalise (B, C, H, W) maps
    (:data:`NOT_MAP_NORMS`), ``nn.GroupNorm`` without ``num_groups`` (mmcv's
    ``build_norm_layer`` would stop on a bare assertion), or has a key that the norm does not
    take (:func:`_check_layer_keys`): then a ValueError naming ``name``."""
    if cfg is None:
        return cfg
    layer_cls = _layer_class(cfg['type'])
    if layer_cls in NOT_MAP_NORMS:
        raise ValueError(f'{name}={cfg!r}: {layer_cls.__name__} does not normalise the '
                         f"(B, C, H, W) feature maps of these layers; use a 2-d norm such as "
                         f"'BN', 'SyncBN', 'GN' (with num_groups) or 'IN'")
    if layer_cls is nn.GroupNorm and 'num_groups' not in cfg:
        raise ValueError(f'{name}={cfg!r}: GroupNorm needs num_groups (a divisor of the '
                         f"channels), e.g. dict(type='GN', num_groups=4)")
    return _check_layer_keys(name, cfg, 'build_norm_layer')


def check_norm_channels(name: str, cfg: Optional[dict], channels: int) -> None:
    """Raise a ValueError naming ``name`` if ``cfg`` builds a GroupNorm whose ``num_groups``
    does not divide ``channels``, the width of a map it normalises (torch would stop on a
    message that names no option)."""
    if cfg is None or _layer_class(cfg['type']) is not nn.GroupNorm:
        return
    groups = cfg['num_groups']
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 \
            or channels % groups != 0:
        raise ValueError(f'{name}={cfg!r}: GroupNorm num_groups must be a positive divisor of '
                         f'the {channels} channels it normalises, got {groups!r}')


def act_cfg_option(name: str, value: ActOption) -> Optional[dict]:
    """Turn 'ReLU' / 'none' / dict(type='LeakyReLU', ...) / None into an mmcv ``act_cfg``.

    Any activation type that ``mmcv.cnn.build_activation_layer`` can build is accepted, with
    the options its class takes (:func:`_check_layer_keys`).
    """
    builder = 'build_activation_layer'
    return _check_layer_keys(name, _layer_cfg(name, value, 'an activation', builder), builder)


def unused_activation(value: ActOption, default: ActOption) -> bool:
    """Whether the activation option ``value`` (already checked), given to a block or backbone
    with ``use_activation=False``, asks for an activation that is not built: it names one
    (not None or 'none') other than the parameter's ``default``. A default is never refused
    (configs switch activations off without touching it), nor a value that asks for none."""
    cfg = act_cfg_option('value', value)
    return cfg is not None and cfg != act_cfg_option('default', default)


def activation_option(name: str, value: ActOption, default: ActOption, use_activation: bool,
                      removed: str) -> Optional[dict]:
    """:func:`act_cfg_option` of ``value``, checked even when ``use_activation=False`` (a typo
    must not pass unnoticed), and a ValueError naming ``name`` when ``use_activation=False``
    leaves it unused (:func:`unused_activation`); ``removed`` says whose activations go."""
    cfg = act_cfg_option(name, value)
    if not use_activation and unused_activation(cfg, default):
        raise ValueError(
            f'{name}={value!r} is unused with use_activation=False, which removes every '
            f'activation of {removed}: set use_activation=True, or leave '
            f"{name.split('.')[-1]} unset (or None / 'none')")
    return cfg


def _layer_dict(name: str, value: Any, kind: str, builder: str, example: str,
                may_be_none: bool) -> Optional[dict]:
    """A copy of the mmcv layer config ``value`` (a dict with a resolvable 'type'), or None."""
    if value is None and may_be_none:
        return None
    if not isinstance(value, dict) or 'type' not in value:
        allowed = f'a dict with a "type" key (e.g. {example}){" or None" if may_be_none else ""}'
        raise ValueError(f'{name}={value!r}: must be {allowed}, as mmcv.cnn.{builder} takes')
    _check_layer_type(f'{name}.type', value['type'], kind, builder, may_be_none=False)
    return dict(value)


def conv_cfg_option(name: str, value: Optional[dict], may_be_none: bool = True
                    ) -> Optional[dict]:
    """Check an mmcv ``conv_cfg``: None (``nn.Conv2d``) where ``may_be_none``, or a dict whose
    'type' ``mmcv.cnn.build_conv_layer`` resolves ('Conv2d', 'ConvWS', a registered type or an
    ``nn.Module`` class), whose other keys are options of that class other than those each layer
    sets (:data:`CONV_CALL_ARGS`); return a copy."""
    cfg = _layer_dict(name, value, 'a conv', 'build_conv_layer', "dict(type='Conv2d')",
                      may_be_none)
    layer_cls = _layer_class(cfg['type']) if cfg is not None else None
    if inspect.isclass(layer_cls) and issubclass(layer_cls, NOT_MAP_CONVS):
        # mmcv registers these in the same registry; a transposed conv builds and upsamples
        raise ValueError(f'{name}={cfg!r}: {layer_cls.__name__} is not a 2-d convolution of '
                         f"(B, C, H, W) maps; use 'Conv2d' (None), 'ConvWS', 'ConvAWS' or "
                         'another nn.Conv2d type')
    return _check_layer_keys(name, cfg, 'build_conv_layer')


def required_norm_cfg_option(name: str, value: dict) -> dict:
    """Check an mmcv ``norm_cfg`` that must build a layer: a dict (not None, not 'none') whose
    'type' ``mmcv.cnn.build_norm_layer`` resolves ('BN', 'SyncBN', 'GN' with ``num_groups``, a
    registered type or an ``nn.Module`` class) and that normalises (B, C, H, W) maps; return a
    copy."""
    cfg = _check_map_norm(name, _layer_dict(name, value, 'a norm', 'build_norm_layer',
                                            "dict(type='BN')", False))
    assert cfg is not None
    return cfg


def per_stage(name: str, value: Any, num_stages: int) -> list:
    """Broadcast a scalar to every stage, or check that a sequence has one entry per stage."""
    if isinstance(value, (list, tuple)):
        if len(value) != num_stages:
            raise ValueError(f'{name} must have one entry per stage ({num_stages} stages), got '
                             f'{len(value)} entries: {list(value)}')
        return list(value)
    return [value] * num_stages
