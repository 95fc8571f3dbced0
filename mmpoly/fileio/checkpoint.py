"""Safe loading of local checkpoints under torch >= 2.6 (``weights_only=True``).

mmengine 0.10.7 stores its ``MessageHub`` in every checkpoint: ``HistoryBuffer`` objects holding
numpy arrays and numpy scalars, which torch's ``weights_only=True`` refuses.
:func:`load_checkpoint_file` keeps ``weights_only=True`` and allows exactly the extra globals that
mmengine checkpoints contain (:data:`MMENGINE_CHECKPOINT_GLOBALS`). Anything else is refused with
:class:`UnsafeCheckpointError`, which names the refused globals, whatever the file's format (zip,
legacy ``_use_new_zipfile_serialization=False``, or a raw pickle). A file that is not a readable
checkpoint (empty, truncated, damaged, not a torch file) raises :class:`CorruptCheckpointError`.

Checkpoints you trust (e.g. ones that pickle custom classes) are listed, as files or folders, in
the environment variable ``MMPOLY_TRUSTED_CHECKPOINTS`` (``os.pathsep``-separated, like ``PATH``);
they are fully unpickled (``weights_only=False``), which can run arbitrary code stored in them.

This module only loads; :mod:`mmpoly.engine` makes mmengine's ``CheckpointLoader`` use it.
"""
import io
import os
import os.path as osp
import pickle
import pickletools
import zipfile
from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
from typing import Any, Callable, FrozenSet, List, Optional, Tuple, Union

import numpy as np
import torch
from mmengine.logging import HistoryBuffer, print_log

try:  # numpy >= 2
    from numpy._core import multiarray as _np_multiarray
except ImportError:  # numpy 1.x
    from numpy.core import multiarray as _np_multiarray  # type: ignore[no-redef]

__all__ = [
    'TRUSTED_CHECKPOINTS_ENV', 'MMENGINE_CHECKPOINT_GLOBALS', 'UnsafeCheckpointError',
    'CorruptCheckpointError', 'checkpoint_file_problem', 'other_file_format',
    'trusted_checkpoint_paths',
    'is_trusted_checkpoint', 'pickled_globals', 'refused_globals', 'load_checkpoint_file'
]

#: Environment variable listing trusted checkpoint files or directories (``os.pathsep``-separated).
TRUSTED_CHECKPOINTS_ENV = 'MMPOLY_TRUSTED_CHECKPOINTS'

#: The statistics methods a pickled ``HistoryBuffer`` refers to (``getattr(HistoryBuffer, name)``).
_HISTORY_BUFFER_METHODS: FrozenSet[str] = frozenset({'min', 'max', 'mean', 'current'})


def _history_buffer_method(owner: Any, name: str) -> Callable:
    """Stand-in for ``builtins.getattr`` while unpickling: only ``HistoryBuffer.<statistic>``.

    Python pickles the functions ``HistoryBuffer.min`` etc. (in
    ``HistoryBuffer._statistics_methods``) as ``getattr(HistoryBuffer, 'min')``. The real
    ``getattr`` would let a checkpoint fetch any attribute of any allowed global.
    """
    if owner is not HistoryBuffer or name not in _HISTORY_BUFFER_METHODS:
        raise pickle.UnpicklingError(f'checkpoint asks for getattr({owner!r}, {name!r}), which '
                                     'safe loading does not resolve')
    return getattr(HistoryBuffer, name)


def _dtype_class(dtype: Union[type, str]) -> type:
    """The class of a numpy dtype instance (``numpy.dtypes.Float64DType`` for float64)."""
    return type(np.dtype(dtype))


#: Every global, beyond torch's own allow-list, in checkpoints written by mmengine 0.10.7's
#: ``Runner.save_checkpoint`` (``tests/test_engine.py`` checks that each one is needed). An entry
#: is a global, or ``(global, 'name.in.the.pickle')`` where the pickled name differs:
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
        refused_globals: the pickled globals that are not allowed; empty when the refused object
            is the use of an allowed global (then ``reason``, torch's message, says which).
    """

    def __init__(self, path: str, refused_globals: List[str], reason: str) -> None:
        self.path = path
        self.refused_globals = refused_globals
        what = (f'the global(s) {", ".join(refused_globals)}' if refused_globals
                else f'an object in it ({reason})')
        super().__init__(
            f'Refused to load checkpoint {path}: safe loading does not allow {what}.\n'
            'mmpoly loads checkpoints with torch.load(weights_only=True) plus the few globals '
            'mmengine checkpoints need, because fully unpickling a file can execute arbitrary '
            'code stored in it.\n'
            'If you trust this file, allow full unpickling for it by adding the file or its '
            f'directory to the environment variable {TRUSTED_CHECKPOINTS_ENV} '
            f"(paths separated by {os.pathsep!r}), e.g.\n"
            f'    export {TRUSTED_CHECKPOINTS_ENV}={osp.abspath(path)}')


class CorruptCheckpointError(ValueError):
    """A file that is not a readable checkpoint: empty, truncated, damaged or not a torch file.

    A ``ValueError`` (the file's content is invalid), deliberately *not* a
    ``pickle.UnpicklingError`` like :class:`UnsafeCheckpointError`: catch this one to tell a
    broken file (re-download or re-save it) from a well-formed file holding refused objects.

    Attributes:
        path: the checkpoint file.
        reason: what is wrong with it.
        other_format: what the file is instead (:func:`other_file_format`: an ONNX model, a
            config...), or None; then the message says so rather than "corrupt".
    """

    def __init__(self, path: str, reason: str, other_format: Optional[str] = None) -> None:
        self.path = path
        self.reason = reason
        self.other_format = other_format  # what the file is instead, if recognised
        if other_format is None:
            message = (f'Checkpoint {path} is corrupt: {reason}. It cannot be loaded; '
                       're-download it or save it again.')
        else:
            message = (f'Checkpoint {path} is not a torch checkpoint: it is {other_format}. '
                       'Give the .pth file that training or torch.save wrote.')
        super().__init__(message)


#: The first bytes of a zip archive (a local file header), as torch checks for its format.
_ZIP_MAGIC = b'PK\x03\x04'


class _PlainUnpickler(pickle.Unpickler):
    """Reads plain data only (ints, strings, dicts...): used to check a file's structure."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f'unexpected global {module}.{name}')

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(f'unexpected persistent id {pid!r}')


#: Pickle opcodes that push nothing: they leave the strings a STACK_GLOBAL reads in place.
_NO_PUSH = frozenset({'MEMOIZE', 'PUT', 'BINPUT', 'LONG_BINPUT', 'PROTO', 'FRAME'})
_STRINGS = frozenset({'SHORT_BINUNICODE', 'BINUNICODE', 'BINUNICODE8', 'UNICODE', 'STRING',
                      'BINSTRING', 'SHORT_BINSTRING'})


def _check_pickle_stream(data: Any, what: str) -> List[str]:
    """Walk one pickle without running it (``data``: bytes or a file at the pickle's start) and
    return ``module.name`` of each global it imports (``GLOBAL``, ``INST``, ``STACK_GLOBAL``).

    Raises:
        ValueError: the pickle is cut short or holds bytes that are no pickle opcodes.
    """
    found: List[str] = []
    memo: dict = {}
    pushed: List[Optional[str]] = []  # what each opcode pushed: a string, or None for others
    last = None
    try:
        for op, arg, _ in pickletools.genops(data):
            last = op.name
            if last in ('GLOBAL', 'INST'):  # Python 2 names mapped, as torch's unpickler does
                module, name = arg.split(' ', 1)
                module, name = NAME_MAPPING.get((module, name),
                                                (IMPORT_MAPPING.get(module, module), name))
                found.append(f'{module}.{name}')
            elif last == 'STACK_GLOBAL':
                module, name = pushed[-2:] if len(pushed) >= 2 else (None, None)
                found.append(f'{module}.{name}' if module and name else
                             '<a global whose name is computed while unpickling>')
            if last == 'MEMOIZE':
                memo[len(memo)] = pushed[-1] if pushed else None
            elif last in ('PUT', 'BINPUT', 'LONG_BINPUT'):
                memo[arg] = pushed[-1] if pushed else None
            elif last in ('GET', 'BINGET', 'LONG_BINGET'):
                pushed.append(memo.get(arg))
            elif last not in _NO_PUSH:
                pushed.append(arg if last in _STRINGS and isinstance(arg, str) else None)
    except Exception as error:  # genops raises ValueError, struct.error, UnicodeDecodeError...
        raise ValueError(f'{what} is not a valid pickle ({type(error).__name__}: {error})')
    if last != 'STOP':
        raise ValueError(f'{what} ends before the end of its pickle')
    return found


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


def other_file_format(path: str) -> Optional[str]:
    """What ``path``, which is no torch checkpoint, is instead, if its first bytes (or, for ONNX,
    its suffix) say so: an ONNX model (e.g. tools/deployment/pytorch2onnx.py's output), a
    safetensors file, a gzip file, a JPEG or PNG image, or a text file (e.g. a config)."""
    with open(path, 'rb') as f:
        head = f.read(512)
    size = osp.getsize(path)
    if _ZIP_MAGIC.startswith(head[:len(_ZIP_MAGIC)]):  # empty, or a zip cut within its magic
        return None
    # ONNX ModelProto: field 1 (ir_version, a small varint), then usually field 2 (producer),
    # 3, 4, 5, 7 (graph) or 8 (opset_import)
    if path.lower().endswith('.onnx') or (len(head) > 2 and head[0] == 0x08 and 0 < head[1] < 0x80
                                          and head[2] in b'\x12\x1a\x22\x2a\x3a\x42'):
        return 'an ONNX model, which torch cannot load back (export from the .pth instead)'
    if len(head) > 8 and head[8:9] == b'{' and 8 < int.from_bytes(head[:8], 'little') < size:
        return ('a safetensors file (load it with safetensors.torch.load_file and save the '
                'dict with torch.save)')
    if head[:2] == b'\x1f\x8b':
        return 'a gzip file (decompress it first)'
    if head[:3] == b'\xff\xd8\xff' or head[:8] == b'\x89PNG\r\n\x1a\n':
        return 'an image'
    try:
        text = head.decode('utf-8')
    except UnicodeDecodeError:  # a multi-byte character cut at 512 bytes reads as binary too
        return None
    if len(text) >= 16 and all(c.isprintable() or c in '\t\r\n' for c in text):
        first = text.strip().splitlines()[0][:60] if text.strip() else ''
        return f'a text file (it starts {first!r})'
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


def pickled_globals(path: str) -> List[str]:
    """The globals the pickles of checkpoint ``path`` import, in order, without running them.

    Reads torch's zip format (``data.pkl``), the legacy format (its leading pickles) and a raw
    pickle alike; a pickle that does not read to its end counts for nothing.
    """
    with open(path, 'rb') as f:
        is_zip = f.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
    streams: List[Any] = []
    if is_zip:
        try:
            with zipfile.ZipFile(path) as archive:
                streams = [io.BytesIO(archive.read(n)) for n in archive.namelist()
                           if n == 'data.pkl' or n.endswith('/data.pkl')]
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError):
            return []
    found: List[str] = []
    with open(path, 'rb') as f:
        # legacy: magic number, protocol, system info, object, storage keys; raw: one pickle
        for stream in streams or [f] * 5:
            try:
                found += _check_pickle_stream(stream, 'a pickle')
            except ValueError:
                break
    return list(dict.fromkeys(found))


def _global_name(entry: Union[Callable, Tuple[Callable, str]]) -> str:
    """The pickled name of an allow-list entry (as torch's allow-list spells it)."""
    if isinstance(entry, tuple):
        return entry[1]
    return f'{entry.__module__}.{entry.__qualname__}'


def _allowed_names() -> FrozenSet[str]:
    """Globals ``weights_only=True`` loading allows here: torch's, the user's, mmengine's."""
    from torch import _weights_only_unpickler as unpickler
    return frozenset(unpickler._get_allowed_globals()) | frozenset(
        unpickler._get_user_allowed_globals()) | frozenset(
            _global_name(g) for g in MMENGINE_CHECKPOINT_GLOBALS)


def refused_globals(path: str) -> List[str]:
    """The globals of ``path`` (:func:`pickled_globals`) that safe loading refuses."""
    allowed = _allowed_names()
    return [name for name in pickled_globals(path) if name not in allowed]


def _torch_reason(error: pickle.UnpicklingError) -> str:
    """The unpickler's own complaint, without torch's generic advice around it."""
    marker = 'WeightsUnpickler error:'
    for line in str(error).splitlines():
        if marker in line:
            return line.split(marker, 1)[1].split(' Please use', 1)[0].strip()
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else repr(error)


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
        UnsafeCheckpointError: the file holds other globals (named) and is not trusted.
        CorruptCheckpointError: the file is empty, truncated, damaged or not a torch file.
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
        unsafe = isinstance(error, pickle.UnpicklingError) and not trusted
        refused = refused_globals(path) if unsafe else []
        if refused:
            raise UnsafeCheckpointError(path, refused, _torch_reason(error)) from None
        problem = checkpoint_file_problem(path, error)
        if problem is not None:
            raise CorruptCheckpointError(path, problem, other_file_format(path)) from error
        if unsafe:
            raise UnsafeCheckpointError(path, [], _torch_reason(error)) from None
        raise
