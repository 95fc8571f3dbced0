"""mmengine's local checkpoint loading made safe, and strict loading for tests.

:func:`install_safe_checkpoint_loader` (run by ``import mmpoly.engine``) makes mmengine's
``CheckpointLoader`` load local files (scheme ``''``) through
:func:`mmpoly.fileio.load_checkpoint_file`: ``weights_only=True`` plus the globals mmengine's own
checkpoints need, so ``tools/test.py``, ``--resume``, ``load_from`` and
``init_cfg=dict(type='Pretrained')`` work under torch >= 2.6 without switching safe loading off.

:class:`StrictCheckpointHook` (used by ``tools/test.py`` for its CHECKPOINT and by
``tools/train.py`` for ``load_from``) refuses a checkpoint whose weights do not fit the model:
missing, unexpected and mis-shaped keys, see :func:`compare_state_dict`.
"""
import logging
import re
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.registry import HOOKS
from mmengine.runner.checkpoint import CheckpointLoader
from torch import nn

from mmpoly.fileio import (MAX_LISTED_KEYS, MMENGINE_CHECKPOINT_GLOBALS,
                           TRUSTED_CHECKPOINTS_ENV, CorruptCheckpointError, StateDictMismatch,
                           UnsafeCheckpointError, checkpoint_file_problem, compare_state_dicts,
                           is_trusted_checkpoint, load_checkpoint_file, trusted_checkpoint_paths)

__all__ = [
    'TRUSTED_CHECKPOINTS_ENV', 'MMENGINE_CHECKPOINT_GLOBALS', 'MAX_LISTED_KEYS',
    'UnsafeCheckpointError', 'CorruptCheckpointError', 'checkpoint_file_problem',
    'trusted_checkpoint_paths', 'is_trusted_checkpoint', 'load_checkpoint_file',
    'load_from_local_safe', 'install_safe_checkpoint_loader', 'safe_checkpoint_loader_installed',
    'StateDictMismatch', 'CheckpointMismatchError', 'compare_state_dict', 'unwrap_model',
    'StrictCheckpointHook'
]


def load_from_local_safe(filename: str,
                         map_location: Optional[Union[str, torch.device, Callable,
                                                      dict]] = None) -> Any:
    """mmengine ``CheckpointLoader`` backend for local paths (scheme ``''``), replacing
    mmengine's ``load_from_local``; see :func:`mmpoly.fileio.load_checkpoint_file`."""
    return load_checkpoint_file(filename, map_location=map_location)


def safe_checkpoint_loader_installed() -> bool:
    """Whether mmengine loads local checkpoints through :func:`load_from_local_safe`."""
    return CheckpointLoader._get_checkpoint_loader('checkpoint.pth') is load_from_local_safe


def install_safe_checkpoint_loader() -> None:
    """Make mmengine load local checkpoints through :func:`load_from_local_safe` (idempotent)."""
    if not safe_checkpoint_loader_installed():
        CheckpointLoader.register_scheme(prefixes='', loader=load_from_local_safe, force=True)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module a checkpoint is loaded into: inside DDP-style wrappers and TTA models, as
    mmengine's ``Runner.load_checkpoint`` unwraps."""
    while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
        model = model.module
    return model


def compare_state_dict(model: nn.Module, checkpoint: Dict[str, Any],
                       revise_keys: Tuple[Tuple[str, str], ...] = ((r'^module\.', ''), )
                       ) -> StateDictMismatch:
    """Compare a loaded checkpoint's weights with ``model``'s, as mmengine would load them.

    The weights are ``checkpoint['state_dict']`` (or ``checkpoint`` itself), with the keys
    revised like ``Runner.load_checkpoint`` does (a ``module.`` prefix stripped); the model is
    unwrapped (:func:`unwrap_model`). Counting as in :func:`mmpoly.fileio.compare_state_dicts`.
    """
    state = checkpoint.get('state_dict', checkpoint) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise TypeError(f'a checkpoint must be a dict of tensors or hold one under "state_dict", '
                        f'got {type(state if state is not None else checkpoint).__name__}')
    revised = {}
    for key, value in state.items():
        for pattern, replacement in revise_keys:
            key = re.sub(pattern, replacement, key)
        revised[key] = value
    return compare_state_dicts(unwrap_model(model).state_dict(), revised)


class CheckpointMismatchError(ValueError):
    """A checkpoint's weights do not fit the model (missing, unexpected or mis-shaped keys).

    Attributes:
        path: the checkpoint file (``None`` if unknown).
        mismatch: the differences.
    """

    def __init__(self, path: Optional[str], mismatch: StateDictMismatch, hint: str = '') -> None:
        self.path = path
        self.mismatch = mismatch
        super().__init__(f'The weights in checkpoint {path} do not fit the model:\n'
                         f'{mismatch.describe()}{hint}')


@HOOKS.register_module()
class StrictCheckpointHook(Hook):
    """Refuse (or, non-strict, loudly warn about) a loaded checkpoint that does not fit the model.

    Runs at ``after_load_checkpoint`` with the lowest priority, so it sees the ``state_dict`` as
    other hooks (e.g. ``EMAHook``) leave it for the Runner to load into ``runner.model``; it
    compares them with :func:`compare_state_dict`. mmengine itself only logs a warning and tests
    a half-loaded model.

    Args:
        strict: raise :class:`CheckpointMismatchError` on a mismatch; otherwise warn.
        path: the checkpoint file, for the messages.
        hint: the last sentence of the error: how to load the checkpoint anyway (default:
            :data:`TEST_HINT`, ``tools/test.py --non-strict``).
    """

    priority = 'LOWEST'
    #: The default ``hint``: what ``tools/test.py`` offers.
    TEST_HINT = ('To load the matching weights anyway, test non-strictly '
                 '(tools/test.py --non-strict).')

    def __init__(self, strict: bool = True, path: Optional[str] = None,
                 hint: Optional[str] = None) -> None:
        self.strict = strict
        self.path = path
        self.hint = self.TEST_HINT if hint is None else hint

    def after_load_checkpoint(self, runner: Any, checkpoint: dict) -> None:
        """Compare ``checkpoint`` with ``runner.model`` before the Runner loads it."""
        mismatch = compare_state_dict(runner.model, checkpoint)
        if not mismatch:
            return
        if self.strict:
            raise CheckpointMismatchError(
                self.path, mismatch,
                f'\nIs it a checkpoint of this config\'s model? {self.hint}')
        print_log(f'NON-STRICT LOAD: the weights in checkpoint {self.path} do not fit the '
                  f'model; only the matching ones are loaded, the rest keep their initial '
                  f'values, so the results are not those of the checkpoint\'s model:\n'
                  f'{mismatch.describe()}', logger='current', level=logging.WARNING)
