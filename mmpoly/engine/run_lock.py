"""One training run per work_dir: a lock file that names the run holding it.

:class:`RunLock` creates ``<work_dir>/.mmpoly-run.lock`` holding JSON (``pid``, ``host``,
``start_time``, ``command``) and keeps an exclusive ``fcntl.flock`` on it for the whole run. A
second run on the same work_dir fails to take the flock and stops with :class:`WorkDirLockedError`
naming the first run. The kernel drops the flock when a process dies, however it dies, so a
killed run never leaves the work_dir locked: the next run takes the lock over and logs the dead
run's details. The lock file is deleted when the run ends, also on exceptions. On a shared file
system (NFS) the flock is also seen by other hosts. Only rank 0 of a distributed job takes it
(``tools/train.py``).
"""
import datetime
import fcntl
import json
import logging
import os
import os.path as osp
import socket
import sys
from typing import Optional, Sequence

from mmengine.logging import print_log

__all__ = ['LOCK_FILENAME', 'WorkDirLockedError', 'RunLock', 'describe_run']

#: Name of the lock file inside the work_dir.
LOCK_FILENAME = '.mmpoly-run.lock'


class WorkDirLockedError(RuntimeError):
    """Another live run holds the work_dir's lock."""


def describe_run(info: dict) -> str:
    """``PID 12 on host h, started 2024-01-01T00:00:00+00:00: python tools/train.py ...``."""
    return (f"PID {info.get('pid', '?')} on host {info.get('host', '?')}, started "
            f"{info.get('start_time', '?')}: {info.get('command', '?')}")


def _read_info(fd: int) -> Optional[dict]:
    """The JSON a lock file holds, or None if it is empty or unreadable."""
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b''
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        raw += chunk
    try:
        info = json.loads(raw.decode('utf-8'))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return info if isinstance(info, dict) else None


class RunLock:
    """Exclusive lock of a work_dir for one training run (a context manager).

    Args:
        work_dir: the run's work_dir (created if missing).
        command: the command line recorded in the lock; defaults to ``sys.argv``.
    """

    def __init__(self, work_dir: str, command: Optional[Sequence[str]] = None) -> None:
        self.path = osp.join(work_dir, LOCK_FILENAME)
        self.info = dict(
            pid=os.getpid(), host=socket.gethostname(),
            start_time=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
            command=' '.join([sys.executable, *(sys.argv if command is None else command)]))
        #: the details of the ended run whose lock :meth:`acquire` took over, if any
        self.taken_over: Optional[dict] = None
        self._fd: Optional[int] = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`WorkDirLockedError` naming the run that holds it."""
        os.makedirs(osp.dirname(self.path) or '.', exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_info(fd)
                os.close(fd)
                raise WorkDirLockedError(
                    f'work_dir {osp.dirname(self.path)} is in use by another training run ('
                    f'{describe_run(holder) if holder else "no details recorded yet"}); '
                    f'lock file {self.path}. Wait for that run to end, stop it, or use another '
                    '--work-dir.') from None
            try:
                same_file = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                break
            os.close(fd)  # the previous holder deleted the file meanwhile: lock the new one
        previous = _read_info(fd)
        self.taken_over = previous
        if previous is not None:
            print_log(f'Taking over the stale lock {self.path} of a run that ended without '
                      f'releasing it ({describe_run(previous)})', logger='current',
                      level=logging.WARNING)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(self.info).encode('utf-8'))
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        """Delete the lock file and drop the lock (no-op if not held)."""
        if self._fd is None:
            return
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> 'RunLock':
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
