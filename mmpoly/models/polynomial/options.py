"""Validation of user options: every bad value raises a ValueError that names the option."""
import math
from typing import Any, Optional, Sequence, Tuple, Union

NormOption = Union[None, str, dict]
ActOption = Union[None, str, dict]

#: Norm layers a polynomial factor/projection may use, by mmcv registry name ('none' = no norm).
NORM_TYPES: Tuple[str, ...] = ('BN', 'SyncBN', 'IN', 'GN', 'none')
#: Element-wise activations, by mmcv registry name ('none' = identity).
ACT_TYPES: Tuple[str, ...] = ('ReLU', 'LeakyReLU', 'PReLU', 'ReLU6', 'ELU', 'Sigmoid', 'Tanh',
                              'GELU', 'SiLU', 'Swish', 'HSigmoid', 'HSwish', 'none')


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


def _layer_cfg(name: str, value: Any, allowed: Tuple[str, ...], kind: str) -> Optional[dict]:
    if value is None:
        return None
    if isinstance(value, str):
        check_choice(name, value, allowed)
        return None if value == 'none' else dict(type=value)
    if not isinstance(value, dict) or 'type' not in value:
        raise ValueError(f'{name} must be a {kind} name {list(allowed)}, a dict with a "type" '
                         f'key, or None; got {value!r}')
    check_choice(f'{name}.type', value['type'], allowed)
    return None if value['type'] == 'none' else dict(value)


def norm_cfg_option(name: str, value: NormOption) -> Optional[dict]:
    """Turn 'BN' / 'IN' / 'none' / dict(type=...) / None into an mmcv ``norm_cfg`` (or None)."""
    return _layer_cfg(name, value, NORM_TYPES, 'norm')


def act_cfg_option(name: str, value: ActOption) -> Optional[dict]:
    """Turn 'ReLU' / 'none' / dict(type='LeakyReLU', ...) / None into an mmcv ``act_cfg``."""
    return _layer_cfg(name, value, ACT_TYPES, 'activation')


def per_stage(name: str, value: Any, num_stages: int) -> list:
    """Broadcast a scalar to every stage, or check that a sequence has one entry per stage."""
    if isinstance(value, (list, tuple)):
        if len(value) != num_stages:
            raise ValueError(f'{name} must have one entry per stage ({num_stages} stages), got '
                             f'{len(value)} entries: {list(value)}')
        return list(value)
    return [value] * num_stages
