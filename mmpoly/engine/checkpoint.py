"""Safe loading of local checkpoints under torch >= 2.6 (``weights_only=True``).

mmengine 0.10.7 stores its ``MessageHub`` in every checkpoint: ``HistoryBuffer`` objects holding
numpy arrays and numpy scalars. torch >= 2.6 refuses to unpickle them with its default
``weights_only=True``, so ``tools/test.py``, ``--resume``, ``load_from`` and
``init_cfg=dict(type='Pretrained')`` all fail on checkpoints mmengine itself wrote.

Rather than switching safe loading off, mmpoly replaces mmengine's local-file checkpoint loader
(``CheckpointLoader`` scheme ``''``) with :func:`load_from_local_safe`, which keeps
``weights_only=True`` and allows exactly the extra globals that mmengine checkpoints contain
(:data:`MMENGINE_CHECKPOINT_GLOBALS`). Anything else is refused with
:class:`UnsafeCheckpointError`.

Opt-in for checkpoints you trust (e.g. ones that pickle custom classes): list them, or a
directory holding them, in the environment variable ``MMPOLY_TRUSTED_CHECKPOINTS``
(``os.pathsep``-separated, like ``PATH``). Those files are fully unpickled
(``weights_only=False``), which can run arbitrary code stored in the file.
"""
import os
import os.path as osp
import pickle
from typing import Any, Callable, FrozenSet, List, Optional, Tuple, Union

import numpy as np
import torch
from mmengine.logging import HistoryBuffer, print_log
from mmengine.runner.checkpoint import CheckpointLoader

try:  # numpy >= 2
    from numpy._core import multiarray as _np_multiarray
except ImportError:  # numpy 1.x
    from numpy.core import multiarray as _np_multiarray  # type: ignore[no-redef]

__all__ = [
    'TRUSTED_CHECKPOINTS_ENV', 'MMENGINE_CHECKPOINT_GLOBALS', 'UnsafeCheckpointError',
    'trusted_checkpoint_paths', 'is_trusted_checkpoint', 'load_checkpoint_file',
    'load_from_local_safe', 'install_safe_checkpoint_loader', 'safe_checkpoint_loader_installed'
]

#: Environment variable listing trusted checkpoint files or directories (``os.pathsep``-separated).
TRUSTED_CHECKPOINTS_ENV = 'MMPOLY_TRUSTED_CHECKPOINTS'

#: The statistics methods a pickled ``HistoryBuffer`` refers to (``getattr(HistoryBuffer, name)``).
_HISTORY_BUFFER_METHODS: FrozenSet[str] = frozenset({'min', 'max', 'mean', 'current'})


def _history_buffer_method(owner: Any, name: str) -> Callable:
    """Stand-in for ``builtins.getattr`` while unpickling: only ``HistoryBuffer.<statistic>``.

    Python pickles the plain functions ``HistoryBuffer.min`` etc. (stored in
    ``HistoryBuffer._statistics_methods``) as ``getattr(HistoryBuffer, 'min')``. Allowing the real
    ``getattr`` would let a checkpoint fetch any attribute of any allowed global, so this
    replacement resolves exactly those four lookups and refuses everything else.
    """
    if owner is not HistoryBuffer or name not in _HISTORY_BUFFER_METHODS:
        raise pickle.UnpicklingError(
            f'checkpoint asks for getattr({owner!r}, {name!r}); safe loading only resolves '
            f'HistoryBuffer.{{{", ".join(sorted(_HISTORY_BUFFER_METHODS))}}}')
    return getattr(HistoryBuffer, name)


def _dtype_class(dtype: Union[type, str]) -> type:
    """The class of a numpy dtype instance (``numpy.dtypes.Float64DType`` for float64)."""
    return type(np.dtype(dtype))


#: Every global, beyond torch's own allow-list, found in checkpoints written by mmengine 0.10.7's
#: ``Runner.save_checkpoint`` / ``CheckpointHook`` (found with
#: ``torch.serialization.get_unsafe_globals_in_checkpoint`` plus loading them with
#: ``weights_only=True``; see ``tests/test_engine.py``). An entry is a global, or
#: ``(global, 'name.in.the.pickle')`` where the pickled name differs from the object's own:
#:
#: * ``HistoryBuffer`` - the ``message_hub`` logs; its ``_statistics_methods`` pickle as
#:   ``builtins.getattr(HistoryBuffer, 'min')`` etc., served by a restricted stand-in.
#: * numpy ``_reconstruct`` / ``ndarray`` / ``dtype`` - the buffers' float64 and int64 arrays;
#:   ``scalar`` - numpy scalars such as ``eta`` in ``message_hub.runtime_info``.
#: * the float64 / int64 dtype classes - not named in the pickle, but torch's unpickler only
#:   applies the pickled dtype state (``BUILD``) to instances of allowed types.
#: * ``numpy.core.multiarray.*`` - the same two functions as written by numpy 1.x.
MMENGINE_CHECKPOINT_GLOBALS: Tuple[Union[Callable, Tuple[Callable, str]], ...] = (
    HistoryBuffer,
    (_history_buffer_method, 'builtins.getattr'),
    np.ndarray,
    np.dtype,
    _dtype_class(np.float64),
    _dtype_class(np.int64),
    (_np_multiarray._reconstruct, 'numpy._core.multiarray._reconstruct'),
    (_np_multiarray.scalar, 'numpy._core.multiarray.scalar'),
    (_np_multiarray._reconstruct, 'numpy.core.multiarray._reconstruct'),
    (_np_multiarray.scalar, 'numpy.core.multiarray.scalar'),
)


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds objects that safe loading (``weights_only=True``) refuses.

    Attributes:
        path: the checkpoint file.
        refused_globals: the pickled globals that are not allowed; empty when torch's message
            is the only information (a legacy non-zip file, or a refused use of an allowed
            global).
    """

    def __init__(self, path: str, refused_globals: List[str], reason: str) -> None:
        self.path = path
        self.refused_globals = refused_globals
        listed = (f'the globals {", ".join(refused_globals)}'
                  if refused_globals else 'an object in it (see the reason below)')
        super().__init__(
            f'Refused to load checkpoint {path}: safe loading does not allow {listed}.\n'
            'mmpoly loads checkpoints with torch.load(weights_only=True) plus the few globals '
            'mmengine checkpoints need, because fully unpickling a file can execute arbitrary '
            'code stored in it.\n'
            'If you trust this file, allow full unpickling for it by adding the file or its '
            f'directory to the environment variable {TRUSTED_CHECKPOINTS_ENV} '
            f"(paths separated by {os.pathsep!r}), e.g.\n"
            f'    export {TRUSTED_CHECKPOINTS_ENV}={osp.abspath(path)}\n'
            f'Reason from torch: {reason}')


def trusted_checkpoint_paths() -> List[str]:
    """The resolved files and directories listed in ``MMPOLY_TRUSTED_CHECKPOINTS``."""
    value = os.environ.get(TRUSTED_CHECKPOINTS_ENV, '')
    return [osp.realpath(osp.expanduser(p)) for p in value.split(os.pathsep) if p.strip()]


def is_trusted_checkpoint(path: str) -> bool:
    """Whether ``path`` is, or lies under, an entry of ``MMPOLY_TRUSTED_CHECKPOINTS``."""
    resolved = osp.realpath(osp.expanduser(path))
    for entry in trusted_checkpoint_paths():
        if resolved == entry:
            return True
        if osp.isdir(entry) and osp.commonpath([resolved, entry]) == entry:
            return True
    return False


def _refused_globals(path: str) -> List[str]:
    """The pickled globals of ``path`` outside the allow-list (active); [] if unreadable."""
    try:
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except (ValueError, RuntimeError, pickle.UnpicklingError):
        return []  # legacy (non-zip) format or an opcode the static scan does not know


def _torch_reason(error: pickle.UnpicklingError) -> str:
    """The unpickler's own complaint, without torch's generic advice around it."""
    marker = 'WeightsUnpickler error:'
    for line in str(error).splitlines():
        if marker in line:
            return line.split(marker, 1)[1].split(' Please use', 1)[0].strip()
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else repr(error)


def load_checkpoint_file(path: str,
                         map_location: Optional[Union[str, torch.device, Callable,
                                                      dict]] = 'cpu') -> Any:
    """Load a local checkpoint with ``weights_only=True`` and the mmengine allow-list.

    Files listed in ``MMPOLY_TRUSTED_CHECKPOINTS`` are fully unpickled instead.

    Args:
        path: the checkpoint file (``~`` is expanded).
        map_location: as for :func:`torch.load`.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        UnsafeCheckpointError: the file holds other globals and is not trusted.
    """
    path = osp.expanduser(path)
    if not osp.isfile(path):
        raise FileNotFoundError(f'{path} can not be found.')
    if is_trusted_checkpoint(path):
        print_log(f'Fully unpickling trusted checkpoint {path} (listed in '
                  f'{TRUSTED_CHECKPOINTS_ENV}; weights_only=False)', logger='current')
        return torch.load(path, map_location=map_location, weights_only=False)
    # Leave out what is allowed already, so leaving the context does not remove a user's entry.
    already = set(torch.serialization.get_safe_globals())
    extra = [g for g in MMENGINE_CHECKPOINT_GLOBALS if g not in already]
    with torch.serialization.safe_globals(extra):
        try:
            return torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as error:
            raise UnsafeCheckpointError(path, _refused_globals(path),
                                        _torch_reason(error)) from None


def load_from_local_safe(filename: str,
                         map_location: Optional[Union[str, torch.device, Callable,
                                                      dict]] = None) -> Any:
    """mmengine ``CheckpointLoader`` backend for local paths (scheme ``''``).

    Replaces mmengine's ``load_from_local``; see :func:`load_checkpoint_file`.
    """
    return load_checkpoint_file(filename, map_location=map_location)


def safe_checkpoint_loader_installed() -> bool:
    """Whether mmengine loads local checkpoints through :func:`load_from_local_safe`."""
    return CheckpointLoader._get_checkpoint_loader('checkpoint.pth') is load_from_local_safe


def install_safe_checkpoint_loader() -> None:
    """Make mmengine load local checkpoints through :func:`load_from_local_safe` (idempotent)."""
    if not safe_checkpoint_loader_installed():
        CheckpointLoader.register_scheme(prefixes='', loader=load_from_local_safe, force=True)
