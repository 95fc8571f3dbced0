"""mmpoly's runtime support: safe checkpoint loading, the CPU distributed launcher and the
reliability guarantees of training runs (atomic saves :mod:`.saving`, honest resume
:mod:`.resume`, one run per work_dir :mod:`.run_lock`, bounded distributed hangs
:mod:`.launcher`).

Importing this package installs the safe local checkpoint loader in mmengine (see
:mod:`mmpoly.engine.checkpoint`); ``mmpoly.models`` imports it, so configs with
``custom_imports=dict(imports=['mmpoly.models'])`` get it too.
"""
from .checkpoint import (MMENGINE_CHECKPOINT_GLOBALS, TRUSTED_CHECKPOINTS_ENV,
                         UnsafeCheckpointError, install_safe_checkpoint_loader,
                         is_trusted_checkpoint, load_checkpoint_file, load_from_local_safe,
                         safe_checkpoint_loader_installed, trusted_checkpoint_paths)
from .checkpoint import (CheckpointMismatchError, CorruptCheckpointError, StateDictMismatch,
                         StrictCheckpointHook, checkpoint_file_problem, compare_state_dict)
from .hooks import ModelCheckHook, NonFiniteCheckHook, NonFiniteError
from .launcher import (DEFAULT_GLOO_TIMEOUT_S, build_runner, cpu_model_wrapper_cfg, dist_timeout,
                       resolve_dist_env, setup_cpu_distributed, shutdown_distributed)
from .resume import (ResumeError, find_resume_candidates, prepare_resume, resume_problems,
                     select_checkpoint)
from .run_lock import LOCK_FILENAME, RunLock, WorkDirLockedError, describe_run
from .saving import (AtomicCheckpointHook, AtomicLocalBackend, atomic_saving_installed,
                     atomic_write, install_atomic_saving, use_atomic_checkpoint_hook)

install_safe_checkpoint_loader()

__all__ = [
    'MMENGINE_CHECKPOINT_GLOBALS', 'TRUSTED_CHECKPOINTS_ENV', 'UnsafeCheckpointError',
    'install_safe_checkpoint_loader', 'is_trusted_checkpoint', 'load_checkpoint_file',
    'load_from_local_safe', 'safe_checkpoint_loader_installed', 'trusted_checkpoint_paths',
    'build_runner', 'cpu_model_wrapper_cfg', 'resolve_dist_env', 'setup_cpu_distributed',
    'shutdown_distributed',
    'DEFAULT_GLOO_TIMEOUT_S', 'dist_timeout', 'ResumeError', 'find_resume_candidates',
    'prepare_resume', 'resume_problems', 'select_checkpoint', 'LOCK_FILENAME', 'RunLock',
    'WorkDirLockedError', 'describe_run', 'AtomicCheckpointHook', 'AtomicLocalBackend',
    'atomic_saving_installed', 'atomic_write', 'install_atomic_saving',
    'use_atomic_checkpoint_hook'
]
__all__ += [
    'CheckpointMismatchError', 'CorruptCheckpointError', 'StateDictMismatch',
    'StrictCheckpointHook', 'checkpoint_file_problem', 'compare_state_dict'
]
__all__ += ['ModelCheckHook', 'NonFiniteCheckHook', 'NonFiniteError']
