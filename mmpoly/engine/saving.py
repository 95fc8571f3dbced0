"""Atomic checkpoint saving, checked for disk space before training starts.

mmengine 0.10.7 writes checkpoints with ``LocalBackend.put`` (``open(path, 'wb')`` and one
``write``) and ``last_checkpoint`` with a plain ``open(..., 'w')`` in ``CheckpointHook``: a run
killed while saving leaves a truncated ``epoch_N.pth``, and ``last_checkpoint`` may name a file
``max_keep_ckpts`` has just deleted. mmpoly fixes both through mmengine's extension points:

* :class:`AtomicLocalBackend` - a ``LocalBackend`` whose ``put`` / ``put_text`` go through
  :func:`mmpoly.fileio.atomic_write` (temporary file, ``fsync``, ``os.replace``).
  :func:`install_atomic_saving` (run by ``import mmpoly.engine``) registers it as mmengine's
  backend for local paths, so every ``mmengine.fileio`` write of the process is atomic.
* :class:`AtomicCheckpointHook` - a ``CheckpointHook`` that replaces ``last_checkpoint``
  atomically only after the new checkpoint is complete, deletes checkpoints beyond
  ``max_keep_ckpts`` only after that, removes temporary files of killed runs, refuses unknown
  options when it is built, and checks the free disk space before training (``disk_check``).
  :func:`use_atomic_checkpoint_hook` swaps it in for every ``type='CheckpointHook'`` of a config;
  :func:`mmpoly.engine.build_runner` does that for ``tools/train.py``.

A ``SIGKILL`` during a save can leave a ``*.mmpoly-tmp`` file behind (never a ``*.pth``); the next
run's hook deletes it. Hooks configured with the deprecated ``file_client_args`` keep mmengine's
non-atomic ``FileClient``.
"""
import glob
import os
import os.path as osp
from pathlib import Path
from typing import Any, List, Optional, Tuple, Union

import torch
from mmengine.config import Config
from mmengine.dist import broadcast_object_list, is_main_process
from mmengine.fileio import LocalBackend, register_backend
from mmengine.fileio import io as mmengine_io
from mmengine.fileio.backends import backends as registered_backends
from mmengine.fileio.backends import prefix_to_backends
from mmengine.hooks import CheckpointHook
from mmengine.registry import HOOKS
from mmengine.runner import Runner

from mmpoly.fileio import TEMP_SUFFIX, DiskFullError, atomic_write, format_bytes, free_bytes
from .checkpoint import unwrap_model
from .hooks import _optimizers, check_hook_options, named_parameters

__all__ = [
    'TEMP_SUFFIX', 'atomic_write', 'AtomicLocalBackend', 'install_atomic_saving',
    'atomic_saving_installed', 'AtomicCheckpointHook', 'use_atomic_checkpoint_hook',
    'DiskFullError', 'InsufficientDiskSpaceError', 'DISK_CHECKS', 'estimate_checkpoint_bytes'
]

#: Values of ``AtomicCheckpointHook(disk_check=...)``.
DISK_CHECKS = ('error', 'warn')
#: Options of mmengine's ``CheckpointHook``.
_HOOK_OPTIONS = named_parameters(CheckpointHook.__init__)
#: Keywords ``CheckpointHook`` passes on to ``Runner.save_checkpoint`` through its ``**kwargs``:
#: the parameters of ``save_checkpoint`` that the hook does not set itself.
_SAVE_OPTIONS = [name for name in named_parameters(Runner.save_checkpoint) if name not in (
    'out_dir', 'filename', 'file_client_args', 'save_optimizer', 'save_param_scheduler', 'meta',
    'by_epoch', 'backend_args')]
#: Optimizer state per parameter, in copies of the parameter, by optimizer class name; others 2.
_OPTIMIZER_COPIES = {
    'SGD': lambda group: 1 if group.get('momentum') else 0,
    'Adam': lambda group: 3 if group.get('amsgrad') else 2,
    'AdamW': lambda group: 3 if group.get('amsgrad') else 2,
    'RMSprop': lambda group: 1 + bool(group.get('momentum')) + bool(group.get('centered')),
    'Adagrad': lambda group: 1,
}


class InsufficientDiskSpaceError(OSError):
    """The checkpoint folder's file system has too little free space for the run's checkpoints."""


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
    """Register :class:`AtomicLocalBackend` for local paths in mmengine (idempotent), and drop
    the plain ``LocalBackend`` instances ``get_file_backend`` has cached."""
    if not atomic_saving_installed():
        register_backend('local', AtomicLocalBackend, force=True, prefixes='')
    for key, backend in list(mmengine_io.backend_instances.items()):
        if type(backend) is LocalBackend:
            del mmengine_io.backend_instances[key]


def _tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def estimate_checkpoint_bytes(model: torch.nn.Module, optim_wrapper: Any = None) -> int:
    """Bytes of a checkpoint of ``model`` (parameters and buffers) and of the optimizer state of
    ``optim_wrapper`` (an ``OptimWrapper`` or ``OptimWrapperDict``; None: not saved).

    Optimizer state that does not exist yet (before the first step) is estimated per parameter
    from the optimizer's class (``_OPTIMIZER_COPIES``: SGD with momentum 1 copy, Adam 2, ...).
    """
    total = sum(_tensor_bytes(t) for t in unwrap_model(model).state_dict().values()
                if torch.is_tensor(t))
    for optimizer in _optimizers(optim_wrapper) if optim_wrapper is not None else []:
        copies = _OPTIMIZER_COPIES.get(type(optimizer).__name__, lambda group: 2)
        for group in optimizer.param_groups:
            for param in group['params']:
                state = optimizer.state.get(param)
                if state:
                    total += sum(_tensor_bytes(v) for v in state.values() if torch.is_tensor(v))
                else:
                    total += copies(group) * _tensor_bytes(param)
    return total


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """``CheckpointHook`` whose ``last_checkpoint`` only ever names a complete checkpoint.

    The options of mmengine's ``CheckpointHook``, and ``disk_check``. Differences: an unknown
    option raises :class:`~mmpoly.engine.hooks.UnknownHookOptionError` when the hook is built
    (mmengine passes it on to ``Runner.save_checkpoint``, which fails at the first save); the
    checkpoint is saved atomically before ``last_checkpoint`` is replaced atomically, and only
    then are checkpoints beyond ``max_keep_ckpts`` deleted; with ``save_best``, the previous best
    checkpoint is deleted only after the new best one is complete. ``before_train`` deletes
    ``*.mmpoly-tmp`` files left by killed runs and compares the free space of the checkpoint
    folder's file system with twice the estimated checkpoint size
    (:func:`estimate_checkpoint_bytes`): a save writes the new file while the previous one
    still exists.

    Args:
        disk_check: ``'error'`` stops before training when the space is short; ``'warn'`` logs
            the same numbers and trains.
    """

    def __init__(self, *args: Any, disk_check: str = 'error', **kwargs: Any) -> None:
        check_hook_options(type(self).__name__, kwargs,
                           [*_HOOK_OPTIONS, *_SAVE_OPTIONS, 'disk_check'])
        if disk_check not in DISK_CHECKS:
            raise ValueError(f'{type(self).__name__}: disk_check={disk_check!r}; allowed: '
                             f'{", ".join(map(repr, DISK_CHECKS))}')
        interval = args[0] if args else kwargs.get('interval', -1)
        if isinstance(interval, bool) or not isinstance(interval, int) or \
                not (interval >= 1 or interval == -1):
            # mmengine saves every n-th epoch / iteration only for a whole n >= 1; it skips every
            # periodic save, silently, for 0, a negative number or a fraction
            raise ValueError(f'{type(self).__name__}: interval={interval!r}; allowed: a whole '
                             'number >= 1 (save every this many epochs, or iterations with '
                             'by_epoch=False), or -1 (no periodic checkpoints, only the last)')
        super().__init__(*args, **kwargs)
        self.disk_check = disk_check

    def before_train(self, runner) -> None:
        """Set up the file backend (see ``CheckpointHook``), delete stale temporary files and
        check the free disk space."""
        install_atomic_saving()
        super().before_train(runner)
        local = isinstance(self.file_backend, LocalBackend)
        if is_main_process() and local:
            for folder in {str(self.out_dir), str(runner.work_dir)}:
                for tmp in glob.glob(osp.join(glob.escape(folder), f'.*{TEMP_SUFFIX}')):
                    os.remove(tmp)
                    runner.logger.warning(f'Removed {tmp}, a partial file left by a run that '
                                          'was killed while saving')
        problem = [self._disk_space_problem(runner) if is_main_process() and local else None]
        broadcast_object_list(problem)  # every rank stops, or none
        if problem[0] is not None:
            if self.disk_check == 'error':
                raise InsufficientDiskSpaceError(problem[0])
            runner.logger.warning(problem[0])

    def _disk_space_problem(self, runner) -> Optional[str]:
        """Why the checkpoint folder has too little free space, or None."""
        size = estimate_checkpoint_bytes(runner.model,
                                         runner.optim_wrapper if self.save_optimizer else None)
        needed, free = 2 * size, free_bytes(str(self.out_dir))
        if free >= needed:
            return None
        what = 'parameters, buffers and optimizer state' if self.save_optimizer else \
            'parameters and buffers'
        go_on = ('disk_check=\'warn\' is set: training anyway.' if self.disk_check == 'warn'
                 else 'To train anyway, set default_hooks.checkpoint.disk_check=\'warn\' '
                 '(--cfg-options default_hooks.checkpoint.disk_check=warn).')
        return (f'Not enough free disk space for checkpoints in {self.out_dir}: {free} bytes '
                f'({format_bytes(free)}) are free, saving needs about {needed} bytes '
                f'({format_bytes(needed)}): twice the estimated checkpoint size of {size} bytes '
                f'({what}), because the new checkpoint is written completely before the '
                f'previous one is replaced or removed. Free space or choose another --work-dir. '
                + go_on)

    def _best_checkpoints(self) -> List[str]:
        """The paths of the current best checkpoints (one per key indicator)."""
        paths = [getattr(self, 'best_ckpt_path', None),
                 *getattr(self, 'best_ckpt_path_dict', {}).values()]
        return [path for path in paths if path]

    def _save_best_checkpoint(self, runner, metrics: dict) -> None:
        """mmengine's, except that a previous best checkpoint is deleted only after its
        replacement is complete: mmengine deletes it first, so a save that failed (a full
        disk, a kill) left no best checkpoint at all."""
        previous = self._best_checkpoints()
        backend, deferred = self.file_backend, _DeferredRemoval(self.file_backend)
        self.file_backend = deferred
        try:
            super()._save_best_checkpoint(runner, metrics)
        except DiskFullError as error:
            kept = (f'The previous best checkpoint {", ".join(previous)} is intact.'
                    if previous else 'This run has no earlier best checkpoint.')
            raise DiskFullError(error.path, error.needed, error.free,
                                f'{error} {kept}') from error
        finally:
            self.file_backend = backend
        current = set(self._best_checkpoints())
        for method, path in deferred.removals:
            if path not in current:  # a best checkpoint saved again under its own name stays
                getattr(backend, method)(path)

    def _save_checkpoint_with_step(self, runner, step: int, meta: dict) -> None:
        """Save ``filename_tmpl.format(step)``, then ``last_checkpoint``, then prune old ones."""
        outdated: Optional[int] = None
        previous = runner.message_hub.get_info('last_ckpt')  # restored by a resume too
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
        try:
            runner.save_checkpoint(
                self.out_dir, ckpt_filename, self.file_client_args,
                save_optimizer=self.save_optimizer,
                save_param_scheduler=self.save_param_scheduler, meta=meta, by_epoch=self.by_epoch,
                backend_args=self.backend_args, **self.args)
        except DiskFullError as error:
            kept = (f'The previous checkpoint {previous} is intact and '
                    f'{osp.join(runner.work_dir, "last_checkpoint")} still names it: free space '
                    'and continue with --resume.' if previous else
                    'This run has no earlier checkpoint.')
            raise DiskFullError(error.path, error.needed, error.free,
                                f'{error} {kept}') from error
        if not is_main_process():
            return
        atomic_write(str(self.last_ckpt), osp.join(runner.work_dir, 'last_checkpoint'))
        if outdated is not None:
            old = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(outdated))
            if self.file_backend.isfile(old):
                self.file_backend.remove(old)
            elif self.file_backend.isdir(old):  # checkpoints saved by deepspeed are folders
                self.file_backend.rmtree(old)


class _DeferredRemoval:
    """A file backend that records ``remove`` / ``rmtree`` calls instead of running them; every
    other attribute is the wrapped backend's."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.removals: List[Tuple[str, str]] = []  # (method name, path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def remove(self, path: str) -> None:
        self.removals.append(('remove', path))

    def rmtree(self, path: str) -> None:
        self.removals.append(('rmtree', path))


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
