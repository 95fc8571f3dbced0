"""mmpoly's runtime support: safe checkpoint loading and the CPU distributed launcher.

Importing this package installs the safe local checkpoint loader in mmengine (see
:mod:`mmpoly.engine.checkpoint`); ``mmpoly.models`` imports it, so configs with
``custom_imports=dict(imports=['mmpoly.models'])`` get it too.
"""
from .checkpoint import (MMENGINE_CHECKPOINT_GLOBALS, TRUSTED_CHECKPOINTS_ENV,
                         UnsafeCheckpointError, install_safe_checkpoint_loader,
                         is_trusted_checkpoint, load_checkpoint_file, load_from_local_safe,
                         safe_checkpoint_loader_installed, trusted_checkpoint_paths)
from .launcher import build_runner, cpu_model_wrapper_cfg, resolve_dist_env, setup_cpu_distributed

install_safe_checkpoint_loader()

__all__ = [
    'MMENGINE_CHECKPOINT_GLOBALS', 'TRUSTED_CHECKPOINTS_ENV', 'UnsafeCheckpointError',
    'install_safe_checkpoint_loader', 'is_trusted_checkpoint', 'load_checkpoint_file',
    'load_from_local_safe', 'safe_checkpoint_loader_installed', 'trusted_checkpoint_paths',
    'build_runner', 'cpu_model_wrapper_cfg', 'resolve_dist_env', 'setup_cpu_distributed'
]
