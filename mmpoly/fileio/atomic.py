"""Atomic file writes: a file appears under its final name only when it is complete."""
import contextlib
import errno
import io
import os
import os.path as osp
import secrets
import shutil
import signal
import stat
import threading
from pathlib import Path
from typing import Any, Iterator, Optional, Union

__all__ = [
    'TEMP_SUFFIX', 'DiskFullError', 'atomic_write', 'atomic_savefig', 'free_bytes', 'format_bytes',
    'fsync_dir'
]

#: Suffix of the temporary files an atomic write creates next to its target.
TEMP_SUFFIX = '.mmpoly-tmp'


def format_bytes(count: int) -> str:
    """``1536`` -> ``'1.5 KiB'`` (1024-based; whole bytes below 1 KiB, GiB at most)."""
    if abs(count) < 1024:
        return f'{count} B'
    value = float(count)
    for unit in ('KiB', 'MiB', 'GiB'):
        value /= 1024
        if abs(value) < 1024 or unit == 'GiB':
            break
    return f'{value:.1f} {unit}'


def free_bytes(path: Union[str, Path]) -> int:
    """Free bytes (for this user) on the file system that holds ``path`` or, if ``path`` does
    not exist yet, its nearest existing parent folder."""
    folder = osp.abspath(os.fspath(path))
    while not osp.exists(folder):
        parent = osp.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return shutil.disk_usage(folder).free


class DiskFullError(OSError):
    """A write failed for lack of space (``errno.ENOSPC``); the target is unchanged.

    Attributes:
        path: the file that was being written.
        needed: bytes the write needed.
        free: bytes free on that file system after the partial file was removed.
    """

    def __init__(self, path: str, needed: int, free: int, message: str) -> None:
        super().__init__(errno.ENOSPC, message)
        self.path, self.needed, self.free = path, needed, free

    def __str__(self) -> str:
        return self.strerror


def fsync_dir(folder: str) -> None:
    """Persist a rename in ``folder`` (best effort: some file systems refuse directory fsync)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _default_mode() -> int:
    """The mode ``open(path, 'w')`` would give a new file: 0o666 minus the process umask."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


class _Terminated(BaseException):
    """SIGTERM arrived inside :func:`_cleanup_on_sigterm`."""


@contextlib.contextmanager
def _cleanup_on_sigterm() -> Iterator[None]:
    """Inside, a SIGTERM (under its default disposition, in the main thread) raises
    :class:`_Terminated`, so that the caller's clean-up of a partial temporary file runs; the
    process then ends by the signal, as it would have without this. A handler of the program's
    own is left in place (it decides), as is any other thread's write."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise _Terminated()

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # the default action: the process ends here
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def atomic_write(data: Union[bytes, str], path: Union[str, Path],
                 encoding: str = 'utf-8') -> None:
    """Write ``data`` to ``path`` so that ``path`` is either absent/old or complete.

    The data goes to a temporary file ``.<name>.<random>.mmpoly-tmp`` in the same folder, which
    is flushed, ``fsync``-ed and renamed onto ``path`` with ``os.replace``. On any error the
    temporary file is removed and ``path`` is left as it was. Missing parent folders are
    created. As ``open(path, 'wb')`` would, a symbolic link is written through (its target is
    replaced, the link kept) and an existing file keeps its permission bits; a new file gets the
    usual mode (0o666 minus the umask). A SIGTERM during the write removes the temporary file too
    (then the process ends by the signal, :func:`_cleanup_on_sigterm`).

    Raises:
        DiskFullError: the file system ran out of space; the message names ``path``, the bytes
            needed and free, and says that ``path`` is unchanged.
    """
    path = os.fspath(path)
    target = osp.realpath(path)  # through symbolic links, to the file they name
    folder = osp.dirname(target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode(encoding)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = _default_mode()
    with _cleanup_on_sigterm():  # a terminated write removes its temporary file too
        tmp = None
        try:
            # named before it is created, inside the try: a SIGTERM (or KeyboardInterrupt) that
            # arrives as the file is created finds its name here and removes it (mkstemp's file
            # was left behind when the signal came between its return and the try)
            while True:
                tmp = osp.join(folder, f'.{osp.basename(target)}.{secrets.token_hex(6)}'
                               f'{TEMP_SUFFIX}')
                try:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                                 | getattr(os, 'O_CLOEXEC', 0), 0o600)
                    break
                except FileExistsError:  # another writer's name (1 in 2**48): not ours
                    tmp = None
            with os.fdopen(fd, 'wb') as f:
                os.fchmod(f.fileno(), mode)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException as error:
            try:
                if tmp is not None:
                    os.remove(tmp)
            except FileNotFoundError:
                pass
            if isinstance(error, OSError) and error.errno == errno.ENOSPC:
                free = free_bytes(folder)
                kept = (f'{path} is unchanged (its previous version is intact)'
                        if osp.exists(path) else f'nothing was written to {path}')
                raise DiskFullError(
                    path, len(data), free,
                    f'No space left on device while writing {path}: it needs {len(data)} bytes '
                    f'({format_bytes(len(data))}), {free} bytes ({format_bytes(free)}) are free on '
                    f'its file system. The partial file was removed and {kept}.') from error
            raise
    fsync_dir(folder)


def atomic_savefig(fig: Any, path: Union[str, Path], dpi: int = 100,
                   format: Optional[str] = None) -> None:
    """Save a matplotlib figure to ``path`` with :func:`atomic_write`: the image is rendered in
    memory (``format``, by default the file's suffix, PNG without one), then written; a failure
    leaves ``path`` absent or as it was."""
    format = format or osp.splitext(os.fspath(path))[1].lstrip('.').lower() or 'png'
    buffer = io.BytesIO()
    fig.savefig(buffer, format=format, dpi=dpi)
    atomic_write(buffer.getvalue(), path)
