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

A file that is not a readable checkpoint at all (empty, truncated, damaged, or not a torch file)
raises :class:`CorruptCheckpointError` instead, naming the file and what is wrong with it.

:class:`StrictCheckpointHook` (used by ``tools/test.py``) refuses a checkpoint whose weights do
not fit the model: missing, unexpected and mis-shaped keys, see :func:`compare_state_dict`.

Opt-in for checkpoints you trust (e.g. ones that pickle custom classes): list them, or a
directory holding them, in the environment variable ``MMPOLY_TRUSTED_CHECKPOINTS``
(``os.pathsep``-separated, like ``PATH``). Those files are fully unpickled
(``weights_only=False``), which can run arbitrary code stored in the file.
"""
import logging
import os
import os.path as osp
import pickle
import pickletools
import re
import zipfile
from typing import Any, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.logging import HistoryBuffer, print_log
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.registry import HOOKS
from mmengine.runner.checkpoint import CheckpointLoader
from torch import nn

try:  # numpy >= 2
    from numpy._core import multiarray as _np_multiarray
except ImportError:  # numpy 1.x
    from numpy.core import multiarray as _np_multiarray  # type: ignore[no-redef]

__all__ = [
    'TRUSTED_CHECKPOINTS_ENV', 'MMENGINE_CHECKPOINT_GLOBALS', 'UnsafeCheckpointError',
    'CorruptCheckpointError', 'checkpoint_file_problem', 'trusted_checkpoint_paths',
    'is_trusted_checkpoint', 'load_checkpoint_file', 'load_from_local_safe',
    'install_safe_checkpoint_loader', 'safe_checkpoint_loader_installed', 'StateDictMismatch',
    'CheckpointMismatchError', 'compare_state_dict', 'unwrap_model', 'StrictCheckpointHook'
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


class CorruptCheckpointError(ValueError):
    """A file that is not a readable checkpoint: empty, truncated, damaged or not a torch file.

    A ``ValueError`` (the file's content is invalid), deliberately *not* a
    ``pickle.UnpicklingError`` like :class:`UnsafeCheckpointError`: catch this one to tell a
    broken file (re-download or re-save it) from a well-formed file holding refused objects.

    Attributes:
        path: the checkpoint file.
        reason: what is wrong with it.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f'Checkpoint {path} is corrupt: {reason}. It cannot be loaded; '
                         're-download it or save it again.')


#: The first bytes of a zip archive (a local file header), as torch checks for its format.
_ZIP_MAGIC = b'PK\x03\x04'


class _PlainUnpickler(pickle.Unpickler):
    """Reads plain data only (ints, strings, dicts...): used to check a file's structure."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f'unexpected global {module}.{name}')

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(f'unexpected persistent id {pid!r}')


def _check_pickle_stream(data: Any, what: str) -> None:
    """Walk one pickle without running it (``data``: bytes or a file at the pickle's start).

    Raises:
        ValueError: the pickle is cut short or holds bytes that are no pickle opcodes.
    """
    last = None
    try:
        for last, _, _ in pickletools.genops(data):
            pass
    except Exception as error:  # genops raises ValueError, struct.error, UnicodeDecodeError...
        raise ValueError(f'{what} is not a valid pickle ({type(error).__name__}: {error})')
    if last is None or last.name != 'STOP':
        raise ValueError(f'{what} ends before the end of its pickle')


def _zip_problem(path: str) -> Optional[str]:
    """What makes the zip-format (torch >= 1.6) checkpoint ``path`` unreadable, if anything."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist()
                       if n == 'data.pkl' or n.endswith('/data.pkl')]
            if not pickles:
                return 'it is a zip archive without a data.pkl record, so not a torch checkpoint'
            bad = archive.testzip()  # reads every record and checks its CRC-32
            if bad is not None:
                return f'the record {bad} of its zip archive fails its CRC-32 check'
            _check_pickle_stream(archive.read(pickles[0]), f'its record {pickles[0]}')
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as error:
        return (f'it starts like a zip archive (torch\'s format) but is not a complete one '
                f'({error}); it was probably cut short, e.g. by an interrupted download or save')
    except ValueError as error:
        return str(error)
    return None


def _legacy_problem(path: str) -> Optional[str]:
    """What makes ``path``, not a zip archive, unreadable as a legacy torch file, if anything.

    A legacy file (``_use_new_zipfile_serialization=False``) is the pickles magic number,
    protocol version, system info, the object, the storage keys; then the raw storages.
    """
    with open(path, 'rb') as f:
        head = f.read(8)
        f.seek(0)
        try:
            magic = _PlainUnpickler(f).load()
        except Exception as error:  # any garbage: the very first pickle does not read
            magic = f'{type(error).__name__}: {error}'
        if magic != torch.serialization.MAGIC_NUMBER:
            return ('it is neither a zip archive (torch >= 1.6) nor a legacy torch file: it '
                    f'starts with the bytes {head!r}, not torch\'s magic number ({magic})')
        try:
            _PlainUnpickler(f).load()  # protocol version
            _PlainUnpickler(f).load()  # system info
            _check_pickle_stream(f, 'its object pickle')
            keys = _PlainUnpickler(f).load()
        except Exception as error:
            return f'its pickled content is cut short or damaged ({type(error).__name__}: {error})'
        if not isinstance(keys, list):
            return f'its storage key list is a {type(keys).__name__}, not a list'
    return None


def checkpoint_file_problem(path: str, error: Optional[BaseException] = None) -> Optional[str]:
    """Why ``path`` is not a readable checkpoint (``None`` if its structure is sound).

    Checks the container without unpickling anything: an empty file; a zip archive (torch's
    format) that does not open, lacks ``data.pkl``, fails a CRC check or holds a broken pickle;
    a legacy file without torch's magic number or with broken pickles. The raw tensor data of a
    legacy file cannot be checked without unpickling, so ``error`` (what loading raised) counts
    too: torch's end-of-file errors mean the file was cut short. Reads the whole file (CRC
    checks), so :func:`load_checkpoint_file` calls it only once a load has failed.
    """
    size = osp.getsize(path)
    if size == 0:
        return 'the file is empty (0 bytes)'
    with open(path, 'rb') as f:
        is_zip = f.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
    problem = _zip_problem(path) if is_zip else _legacy_problem(path)
    if problem is None and (isinstance(error, EOFError) or 'unexpected EOF' in str(error or '')):
        problem = f'its tensor data is cut short ({error})'
    return None if problem is None else f'{problem} (file size: {size} bytes)'


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
        CorruptCheckpointError: the file is empty, truncated, damaged or not a torch file.
        UnsafeCheckpointError: the well-formed file holds other globals and is not trusted.
    """
    path = osp.expanduser(path)
    if not osp.isfile(path):
        raise FileNotFoundError(f'{path} can not be found.')
    trusted = is_trusted_checkpoint(path)
    if trusted:
        print_log(f'Fully unpickling trusted checkpoint {path} (listed in '
                  f'{TRUSTED_CHECKPOINTS_ENV}; weights_only=False)', logger='current')
    # Leave out what is allowed already, so leaving the context does not remove a user's entry.
    already = set(torch.serialization.get_safe_globals())
    extra = [g for g in MMENGINE_CHECKPOINT_GLOBALS if g not in already]
    try:
        if trusted:
            return torch.load(path, map_location=map_location, weights_only=False)
        with torch.serialization.safe_globals(extra):
            return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch raises many types for a broken file; sorted out here
        problem = checkpoint_file_problem(path, error)
        if problem is not None:
            raise CorruptCheckpointError(path, problem) from error
        if isinstance(error, pickle.UnpicklingError) and not trusted:
            raise UnsafeCheckpointError(path, _refused_globals(path),
                                        _torch_reason(error)) from None
        raise


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


# --------------------------------------------------------------------------- model fit

#: How many key names a mismatch report lists per kind.
MAX_LISTED_KEYS = 10


class StateDictMismatch(NamedTuple):
    """How a checkpoint's ``state_dict`` differs from a model's (see :func:`compare_state_dict`).

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


def _ignored_key(key: str) -> bool:
    """Keys whose absence on either side does not matter (see :func:`compare_state_dict`)."""
    return key.endswith('num_batches_tracked') or key.startswith('data_preprocessor.')


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module a checkpoint is loaded into: inside DDP-style wrappers and TTA models.

    mmengine's ``Runner.load_checkpoint`` and ``load_state_dict`` unwrap the same way.
    """
    while is_model_wrapper(model) or isinstance(model, BaseTTAModel):
        model = model.module
    return model


def compare_state_dict(model: nn.Module, checkpoint: Dict[str, Any],
                       revise_keys: Tuple[Tuple[str, str], ...] = ((r'^module\.', ''), )
                       ) -> StateDictMismatch:
    """Compare a loaded checkpoint's weights with ``model``'s, as mmengine would load them.

    The weights are ``checkpoint['state_dict']`` (or ``checkpoint`` itself), with the keys
    revised like ``Runner.load_checkpoint`` does (a ``module.`` prefix stripped); the model is
    unwrapped (:func:`unwrap_model`). Not counted as missing or unexpected: BatchNorm
    ``num_batches_tracked`` counters (only a step counter, absent from older checkpoints; mmengine
    ignores them too) and ``data_preprocessor.*`` buffers (preprocessing, e.g. the normalisation
    constants, comes from the config, not from learnt weights). Mis-shaped keys always count.
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
    expected = unwrap_model(model).state_dict()
    missing = [k for k in expected if k not in revised and not _ignored_key(k)]
    unexpected = [k for k in revised if k not in expected and not _ignored_key(k)]
    mismatched = []
    for key, value in revised.items():
        if key in expected and torch.is_tensor(value) and value.shape != expected[key].shape:
            mismatched.append((key, tuple(value.shape), tuple(expected[key].shape)))
    return StateDictMismatch(missing, unexpected, mismatched)


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
    """

    priority = 'LOWEST'

    def __init__(self, strict: bool = True, path: Optional[str] = None) -> None:
        self.strict = strict
        self.path = path

    def after_load_checkpoint(self, runner: Any, checkpoint: dict) -> None:
        """Compare ``checkpoint`` with ``runner.model`` before the Runner loads it."""
        mismatch = compare_state_dict(runner.model, checkpoint)
        if not mismatch:
            return
        if self.strict:
            raise CheckpointMismatchError(
                self.path, mismatch,
                '\nIs it a checkpoint of this config\'s model? To load the matching weights '
                'anyway, test non-strictly (tools/test.py --non-strict).')
        print_log(f'NON-STRICT LOAD: the weights in checkpoint {self.path} do not fit the '
                  f'model; only the matching ones are loaded, the rest keep their initial '
                  f'values, so the results are not those of the checkpoint\'s model:\n'
                  f'{mismatch.describe()}', logger='current', level=logging.WARNING)
