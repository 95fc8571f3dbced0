"""Atomic checkpoint saving: a file appears under its final name only when it is complete.

mmengine 0.10.7 writes checkpoints with ``LocalBackend.put`` (``open(path, 'wb')`` and one
``write``) and ``last_checkpoint`` with a plain ``open(..., 'w')`` in ``CheckpointHook``; a run
killed while saving leaves a truncated ``epoch_N.pth``, and ``last_checkpoint`` may be empty or
name a file ``max_keep_ckpts`` has just deleted. mmpoly fixes both through mmengine's extension
points:

* :class:`AtomicLocalBackend` - a ``LocalBackend`` whose ``put`` / ``put_text`` write a temporary
  file in the same folder (``.<name>.<random>.mmpoly-tmp``), flush and ``fsync`` it, then
  ``os.replace`` it onto the final name and ``fsync`` the folder. :func:`install_atomic_saving`
  registers it as mmengine's file backend for local paths (prefix ``''`` and name ``'local'``),
  so ``Runner.save_checkpoint`` - and every other ``mmengine.fileio`` write of the process -
  is atomic.
* :class:`AtomicCheckpointHook` - a ``CheckpointHook`` that writes ``last_checkpoint``
  atomically, only after the new checkpoint is complete, and deletes checkpoints beyond
  ``max_keep_ckpts`` only after that (mmengine deletes first), so ``last_checkpoint`` always
  names a complete file. It also removes temporary files that killed runs left in its folder.
  :func:`use_atomic_checkpoint_hook` swaps it in for every ``type='CheckpointHook'`` (any scope)
  of a config's ``default_hooks`` and ``custom_hooks``; :func:`mmpoly.engine.build_runner` does
  both, so every config trained with ``tools/train.py`` gets them.

A ``SIGKILL`` during a save can still leave a ``*.mmpoly-tmp`` file behind (never a ``*.pth``);
the next run's hook deletes it. Hooks configured with the deprecated ``file_client_args`` keep
mmengine's non-atomic ``FileClient``.
"""
import glob
import os
import os.path as osp
import tempfile
from pathlib import Path
from typing import Optional, Union

from mmengine.config import Config
from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend, register_backend
from mmengine.fileio.backends import backends as registered_backends
from mmengine.fileio.backends import prefix_to_backends
from mmengine.hooks import CheckpointHook
from mmengine.registry import HOOKS

__all__ = [
    'TEMP_SUFFIX', 'atomic_write', 'AtomicLocalBackend', 'install_atomic_saving',
    'atomic_saving_installed', 'AtomicCheckpointHook', 'use_atomic_checkpoint_hook'
]

#: Suffix of the temporary files an atomic write creates next to its target.
TEMP_SUFFIX = '.mmpoly-tmp'


def _fsync_dir(folder: str) -> None:
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


def atomic_write(data: Union[bytes, str], path: Union[str, Path],
                 encoding: str = 'utf-8') -> None:
    """Write ``data`` to ``path`` so that ``path`` is either absent/old or complete.

    The data goes to a temporary file in the same folder, which is flushed, ``fsync``-ed and
    renamed onto ``path`` with ``os.replace``. On any error the temporary file is removed and
    ``path`` is left as it was. Missing parent folders are created; the file gets the usual
    mode of a new file (0o666 minus the umask), not ``mkstemp``'s 0o600.
    """
    path = os.fspath(path)
    folder = osp.dirname(osp.abspath(path))
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode(encoding)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f'.{osp.basename(path)}.', suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, 'wb') as f:
            os.fchmod(f.fileno(), _default_mode())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(folder)


class AtomicLocalBackend(LocalBackend):
    """mmengine's ``LocalBackend`` with atomic ``put`` and ``put_text`` (:func:`atomic_write`)."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        """Write bytes to ``filepath`` atomically."""
        atomic_write(obj, filepath)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        """Write text to ``filepath`` atomically."""
        atomic_write(obj, filepath, encoding=encoding)


def atomic_saving_installed() -> bool:
    """Whether mmengine writes local files through :class:`AtomicLocalBackend`."""
    return (prefix_to_backends.get('') is AtomicLocalBackend
            and registered_backends.get('local') is AtomicLocalBackend)


def install_atomic_saving() -> None:
    """Register :class:`AtomicLocalBackend` for local paths in mmengine (idempotent)."""
    if not atomic_saving_installed():
        register_backend('local', AtomicLocalBackend, force=True, prefixes='')


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """``CheckpointHook`` whose ``last_checkpoint`` only ever names a complete checkpoint.

    Same arguments as mmengine's ``CheckpointHook``. Differences: the checkpoint is saved
    (atomically, through :class:`AtomicLocalBackend`) before ``last_checkpoint`` is replaced
    atomically, and only then are checkpoints beyond ``max_keep_ckpts`` deleted. ``before_train``
    also deletes ``*.mmpoly-tmp`` files left by killed runs in the checkpoint folder.
    """

    def before_train(self, runner) -> None:
        """Set up the file backend (see ``CheckpointHook``) and delete stale temporary files."""
        install_atomic_saving()
        super().before_train(runner)
        if is_main_process() and isinstance(self.file_backend, LocalBackend):
            for folder in {str(self.out_dir), str(runner.work_dir)}:
                for tmp in glob.glob(osp.join(glob.escape(folder), f'.*{TEMP_SUFFIX}')):
                    os.remove(tmp)
                    runner.logger.warning(f'Removed {tmp}, a partial file left by a run that '
                                          'was killed while saving')

    def _save_checkpoint_with_step(self, runner, step: int, meta: dict) -> None:
        """Save ``filename_tmpl.format(step)``, then ``last_checkpoint``, then prune old ones."""
        outdated: Optional[int] = None
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids
                                            and self.keep_ckpt_ids[-1] == step):
            # same bookkeeping as mmengine (the ids are stored in the checkpoint's message hub),
            # but the file of the dropped id is deleted after the new checkpoint is complete
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                outdated = self.keep_ckpt_ids.popleft()
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))

        ckpt_filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, ckpt_filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        runner.save_checkpoint(
            self.out_dir, ckpt_filename, self.file_client_args,
            save_optimizer=self.save_optimizer, save_param_scheduler=self.save_param_scheduler,
            meta=meta, by_epoch=self.by_epoch, backend_args=self.backend_args, **self.args)
        if not is_main_process():
            return
        atomic_write(str(self.last_ckpt), osp.join(runner.work_dir, 'last_checkpoint'))
        if outdated is not None:
            old = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(outdated))
            if self.file_backend.isfile(old):
                self.file_backend.remove(old)
            elif self.file_backend.isdir(old):  # checkpoints saved by deepspeed are folders
                self.file_backend.rmtree(old)


def _is_plain_checkpoint_hook(hook_type: object) -> bool:
    """Whether a hook ``type`` is mmengine's ``CheckpointHook`` itself (by name in any scope)."""
    if isinstance(hook_type, str):
        return hook_type.split('.')[-1] == 'CheckpointHook'
    return hook_type is CheckpointHook


def use_atomic_checkpoint_hook(cfg: Config) -> int:
    """Replace every ``CheckpointHook`` of ``cfg`` by :class:`AtomicCheckpointHook`, in place.

    Looks at ``default_hooks`` (any key) and ``custom_hooks``; subclasses of ``CheckpointHook``
    are left alone. Returns how many hooks were replaced.
    """
    hooks = list((cfg.get('default_hooks') or {}).values()) + list(cfg.get('custom_hooks') or [])
    replaced = 0
    for hook in hooks:
        if isinstance(hook, dict) and _is_plain_checkpoint_hook(hook.get('type')):
            hook['type'] = 'mmengine.AtomicCheckpointHook'
            replaced += 1
    return replaced

