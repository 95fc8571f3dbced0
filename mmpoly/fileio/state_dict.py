"""The one comparison of a checkpoint's weights with a model's (keys and shapes)."""
from typing import Any, List, Mapping, NamedTuple, Tuple

import torch

__all__ = ['MAX_LISTED_KEYS', 'StateDictMismatch', 'compare_state_dicts', 'ignored_key']

#: How many key names a mismatch report lists per kind.
MAX_LISTED_KEYS = 10


class StateDictMismatch(NamedTuple):
    """How a checkpoint's state dict differs from a model's (see :func:`compare_state_dicts`).

    Attributes:
        missing: model keys the checkpoint lacks.
        unexpected: checkpoint keys the model lacks.
        mismatched: ``(key, checkpoint shape, model shape)`` for keys of both with other shapes.
    """
    missing: List[str]
    unexpected: List[str]
    mismatched: List[Tuple[str, Tuple[int, ...], Tuple[int, ...]]]

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.mismatched)

    def describe(self, limit: int = MAX_LISTED_KEYS) -> str:
        """Each kind of difference: its count and its first ``limit`` keys (with shapes)."""

        def listed(items: List[str]) -> str:
            more = f'\n    ... and {len(items) - limit} more' if len(items) > limit else ''
            return ''.join(f'\n    {item}' for item in items[:limit]) + more

        parts = []
        if self.mismatched:
            parts.append(f'{len(self.mismatched)} key(s) with another shape '
                         '(checkpoint shape vs model shape):' + listed(
                             [f'{k}: {list(c)} vs {list(m)}' for k, c, m in self.mismatched]))
        if self.missing:
            parts.append(f'{len(self.missing)} model key(s) missing from the checkpoint:'
                         + listed(self.missing))
        if self.unexpected:
            parts.append(f'{len(self.unexpected)} checkpoint key(s) the model does not have:'
                         + listed(self.unexpected))
        return '\n'.join(parts)


def ignored_key(key: str) -> bool:
    """BatchNorm ``num_batches_tracked`` counters (a step count, absent from older files;
    mmengine ignores them too) and ``data_preprocessor.*`` buffers (set by the config)."""
    return key.endswith('num_batches_tracked') or key.startswith('data_preprocessor.')


def compare_state_dicts(model_state: Mapping[str, Any],
                        checkpoint_state: Mapping[str, Any]) -> StateDictMismatch:
    """Missing, unexpected and mis-shaped keys of ``checkpoint_state`` against ``model_state``.

    Keys that :func:`ignored_key` names count neither as missing nor as unexpected; a
    mis-shaped key always counts. Both mappings keep their order in the result.
    """
    missing = [k for k in model_state if k not in checkpoint_state and not ignored_key(k)]
    unexpected = [k for k in checkpoint_state if k not in model_state and not ignored_key(k)]
    mismatched = [(k, tuple(v.shape), tuple(model_state[k].shape))
                  for k, v in checkpoint_state.items()
                  if k in model_state and torch.is_tensor(v) and v.shape != model_state[k].shape]
    return StateDictMismatch(missing, unexpected, mismatched)
