"""What a runner needs from mmpoly: safe checkpoint loading and atomic saving installed in
mmengine, the checkpoint and training-check hooks, honest resume (:mod:`.resume`), one run per
work_dir (:mod:`.run_lock`) and the CPU distributed launcher (:mod:`.launcher`).

Importing this package changes how mmengine loads and saves local files, for the whole process:
it installs the safe local checkpoint loader (:func:`install_safe_checkpoint_loader`) and the
atomic file backend (:func:`install_atomic_saving`). ``tools/`` import it, and mmpoly's runtime
configs list it in ``custom_imports``; ``mmpoly.models`` and ``mmpoly.datasets`` never import it.
"""
from mmpoly.fileio import atomic_write, compare_state_dicts
from .checkpoint import (MMENGINE_CHECKPOINT_GLOBALS, TRUSTED_CHECKPOINTS_ENV,
                         CheckpointMismatchError, CorruptCheckpointError, StateDictMismatch,
                         StrictCheckpointHook, UnsafeCheckpointError, checkpoint_file_problem,
                         compare_state_dict, install_safe_checkpoint_loader,
                         is_trusted_checkpoint, load_checkpoint_file, load_from_local_safe,
                         safe_checkpoint_loader_installed, trusted_checkpoint_paths,
                         unwrap_model)
from .hooks import (ClassCountError, ModelCheckHook, NonFiniteCheckHook, NonFiniteError,
                    UnknownHookOptionError, check_hook_options)
from .config_text import TextCachingConfig, caching_pretty_text
from .lr_scale import LrScaleCheckHook
from .memory_format import (apply_channels_last, channels_last_before_wrapping,
                            channels_last_option, check_channels_last, to_channels_last)
from .non_finite import NonFiniteValidationHook, first_non_finite_output
from .precise_bn import RecomputeBNHook, recompute_bn_statistics
from .visualization import TTAVisualizationHook
from .launcher import (DEFAULT_GLOO_TIMEOUT_S, LaunchEnvironmentError, build_runner,
                       cpu_model_wrapper_cfg, dist_timeout, resolve_dist_env,
                       setup_cpu_distributed, shutdown_distributed)
from .resume import (ResumeError, find_resume_candidates, prepare_resume, resume_problems,
                     run_problems, select_checkpoint)
from .run_lock import LOCK_FILENAME, RunLock, WorkDirLockedError, describe_run
from .saving import (DISK_CHECKS, AtomicCheckpointHook, AtomicLocalBackend, DiskFullError,
                     InsufficientDiskSpaceError, atomic_saving_installed,
                     estimate_checkpoint_bytes, install_atomic_saving,
                     use_atomic_checkpoint_hook)

install_safe_checkpoint_loader()
install_atomic_saving()

#: Refusals met while a tool builds the Runner and loads its checkpoint, before the first
#: iteration: tools/train.py and tools/test.py report them like start-up mistakes (one message,
#: exit status 1, no traceback).
STARTUP_REFUSALS = (ResumeError, WorkDirLockedError, CheckpointMismatchError,
                    CorruptCheckpointError, UnsafeCheckpointError, LaunchEnvironmentError,
                    ClassCountError)

__all__ = [
    'MMENGINE_CHECKPOINT_GLOBALS', 'TRUSTED_CHECKPOINTS_ENV', 'UnsafeCheckpointError',
    'CorruptCheckpointError', 'checkpoint_file_problem', 'install_safe_checkpoint_loader',
    'is_trusted_checkpoint', 'load_checkpoint_file', 'load_from_local_safe',
    'safe_checkpoint_loader_installed', 'trusted_checkpoint_paths', 'CheckpointMismatchError',
    'StateDictMismatch', 'StrictCheckpointHook', 'compare_state_dict', 'compare_state_dicts',
    'unwrap_model', 'ClassCountError', 'ModelCheckHook', 'NonFiniteCheckHook', 'NonFiniteError',
    'UnknownHookOptionError', 'check_hook_options', 'build_runner', 'cpu_model_wrapper_cfg',
    'resolve_dist_env', 'setup_cpu_distributed', 'shutdown_distributed',
    'DEFAULT_GLOO_TIMEOUT_S', 'LaunchEnvironmentError', 'STARTUP_REFUSALS', 'dist_timeout',
    'ResumeError', 'find_resume_candidates', 'prepare_resume', 'resume_problems', 'run_problems',
    'select_checkpoint', 'LOCK_FILENAME',
    'RunLock', 'WorkDirLockedError', 'describe_run', 'AtomicCheckpointHook', 'AtomicLocalBackend',
    'DISK_CHECKS', 'DiskFullError', 'InsufficientDiskSpaceError', 'atomic_saving_installed',
    'atomic_write', 'estimate_checkpoint_bytes', 'install_atomic_saving',
    'use_atomic_checkpoint_hook'
]
__all__ += ['LrScaleCheckHook', 'NonFiniteValidationHook', 'first_non_finite_output',
            'RecomputeBNHook', 'recompute_bn_statistics', 'TextCachingConfig',
            'caching_pretty_text', 'apply_channels_last', 'channels_last_before_wrapping',
            'channels_last_option', 'check_channels_last', 'to_channels_last',
            'TTAVisualizationHook']
