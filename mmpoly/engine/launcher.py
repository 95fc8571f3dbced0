"""Distributed training and testing on machines without CUDA (gloo backend).

mmengine 0.10.7 assumes GPUs when launched with ``--launcher pytorch|slurm|mpi``:

* ``mmengine.dist.init_dist`` calls ``torch.cuda.set_device(local_rank)`` before
  ``init_process_group``, which raises without an NVIDIA driver;
* ``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to ``MMDistributedDataParallel``,
  which DDP rejects for a module on the CPU.

:func:`setup_cpu_distributed` sidesteps both before the Runner is built: it initialises the
process group itself (``Runner.setup_env`` skips ``init_dist`` once ``torch.distributed`` is
initialised) and sets a ``model_wrapper_cfg`` with ``device_ids=None``.

Bounded hangs: ``env_cfg.dist_cfg.timeout`` (seconds) is the process-group timeout; a collective
that waits longer for a peer (e.g. a stopped or deadlocked worker) raises, the worker exits and
torchrun ends the job. It must be a positive finite number; on the gloo path it defaults to
:data:`DEFAULT_GLOO_TIMEOUT_S` (300 s, printed) instead of torch's 30 minutes. A killed worker
ends the job at once (its peers' sockets close).

Clean exit: :func:`shutdown_distributed` (called by ``tools/train.py`` and ``tools/test.py`` after
a finished run) frees the run's objects, waits for every rank and destroys the process group.
Without it, a rank that reaches interpreter shutdown while gloo's worker threads still run dies
with ``terminate called without an active exception`` (SIGABRT), and torchrun reports the whole
job as failed. So does a rank whose DistributedDataParallel wrapper is freed only at interpreter
shutdown, even after ``destroy_process_group``. Torch 2.14.1 with gloo, two-process runs of a
10-line DDP script whose wrapper sits in a reference cycle as a Runner's does: 6 of 60 aborted
with a barrier and ``destroy_process_group`` at the end, none of 60 with
:func:`shutdown_distributed` (2-core EPYC, 2026-12-08).

:func:`build_runner` also installs mmpoly's reliability guarantees: atomic checkpoint saving
(:mod:`mmpoly.engine.saving`) and honest resuming (:mod:`mmpoly.engine.resume`), renders the
config's text once (:mod:`mmpoly.engine.config_text`) and applies ``channels_last``
(:mod:`mmpoly.engine.memory_format`).
"""
import datetime
import gc
import math
import numbers
import os
import subprocess
from typing import Dict, NamedTuple, Optional

import torch
import torch.distributed as torch_dist
from mmengine.config import Config
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from .config_text import caching_pretty_text
from .memory_format import apply_channels_last, channels_last_before_wrapping

__all__ = [
    'DistEnv', 'DEFAULT_GLOO_TIMEOUT_S', 'LaunchEnvironmentError', 'resolve_dist_env',
    'cpu_model_wrapper_cfg',
    'dist_timeout', 'setup_cpu_distributed', 'build_runner', 'shutdown_distributed'
]

LAUNCHERS = ('none', 'pytorch', 'slurm', 'mpi')
DEFAULT_MASTER_PORT = '29500'  # torch.distributed's default
#: Process-group timeout (seconds) of the gloo path when ``env_cfg.dist_cfg.timeout`` is unset.
DEFAULT_GLOO_TIMEOUT_S = 300


class DistEnv(NamedTuple):
    """Where this process sits in the job, read from the launcher's environment."""
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: str


class LaunchEnvironmentError(RuntimeError):
    """``--launcher`` names a launcher whose environment variables this process lacks (e.g.
    ``--launcher pytorch`` run without torchrun)."""


def _require(env: Dict[str, str], names: tuple, launcher: str) -> None:
    missing = [name for name in names if not env.get(name)]
    if missing:
        raise LaunchEnvironmentError(
            f'--launcher {launcher} needs the environment variables {missing}, which are not '
            'set; start the job with '
            + {'pytorch': 'tools/dist_train.sh / python -m torch.distributed.run',
               'slurm': 'srun (tools/slurm_train.sh)',
               'mpi': 'mpirun (Open MPI), with MASTER_ADDR exported'}[launcher])


def _slurm_master_addr(node_list: str) -> str:
    """The first host of a SLURM node list, as ``scontrol show hostnames`` expands it."""
    try:
        out = subprocess.run(['scontrol', 'show', 'hostnames', node_list], check=True,
                             capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as error:
        raise RuntimeError(f'cannot expand SLURM_NODELIST={node_list!r} with scontrol ({error}); '
                           'export MASTER_ADDR instead') from error
    if not out:
        raise RuntimeError(f'scontrol returned no host for SLURM_NODELIST={node_list!r}')
    return out[0]


def resolve_dist_env(launcher: str, env: Optional[Dict[str, str]] = None) -> DistEnv:
    """Read rank, world size, local rank and rendezvous address for ``launcher``.

    ``pytorch`` reads torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``; ``slurm`` reads ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID`` and
    ``SLURM_NODELIST`` (``MASTER_ADDR``/``MASTER_PORT`` win when set); ``mpi`` reads Open MPI's
    ``OMPI_COMM_WORLD_*`` and needs ``MASTER_ADDR``. ``MASTER_PORT`` defaults to 29500.
    """
    env = dict(os.environ) if env is None else env
    if launcher == 'pytorch':
        _require(env, ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'), launcher)
        rank = int(env['RANK'])
        return DistEnv(rank, int(env['WORLD_SIZE']), int(env.get('LOCAL_RANK', rank)),
                       env['MASTER_ADDR'], env['MASTER_PORT'])
    if launcher == 'slurm':
        _require(env, ('SLURM_PROCID', 'SLURM_NTASKS'), launcher)
        rank = int(env['SLURM_PROCID'])
        addr = env.get('MASTER_ADDR') or _slurm_master_addr(env.get('SLURM_NODELIST', ''))
        return DistEnv(rank, int(env['SLURM_NTASKS']), int(env.get('SLURM_LOCALID', 0)), addr,
                       env.get('MASTER_PORT') or DEFAULT_MASTER_PORT)
    if launcher == 'mpi':
        _require(env, ('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'MASTER_ADDR'), launcher)
        return DistEnv(int(env['OMPI_COMM_WORLD_RANK']), int(env['OMPI_COMM_WORLD_SIZE']),
                       int(env.get('OMPI_COMM_WORLD_LOCAL_RANK', 0)), env['MASTER_ADDR'],
                       env.get('MASTER_PORT') or DEFAULT_MASTER_PORT)
    raise ValueError(f'launcher must be one of {LAUNCHERS[1:]} here, got {launcher!r}')


def cpu_model_wrapper_cfg(find_unused_parameters: bool = False) -> dict:
    """``model_wrapper_cfg`` for DDP on CPU modules.

    ``device_ids=None`` must be explicit: ``Runner.wrap_model`` adds
    ``device_ids=[LOCAL_RANK]`` as a default argument for every DDP subclass, and default
    arguments only fill keys the config lacks.
    """
    return dict(type='MMDistributedDataParallel', device_ids=None, broadcast_buffers=False,
                find_unused_parameters=find_unused_parameters)


def dist_timeout(cfg: Config) -> Optional[float]:
    """``cfg.env_cfg.dist_cfg.timeout`` in seconds, None if unset.

    Raises:
        ValueError: the value is not a positive finite number (bools are refused too).
    """
    timeout = ((cfg.get('env_cfg') or {}).get('dist_cfg') or {}).get('timeout')
    if timeout is None:
        return None
    if (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
            or not math.isfinite(timeout) or timeout <= 0):
        raise ValueError(f'env_cfg.dist_cfg.timeout must be a positive finite number of '
                         f'seconds, got {timeout!r}')
    return float(timeout)


def setup_cpu_distributed(cfg: Config, launcher: str) -> bool:
    """Prepare ``cfg`` and the process group for a distributed run without CUDA.

    Does nothing (returns False) for ``launcher='none'`` or when CUDA is available, where
    mmengine's own ``init_dist`` works. Otherwise initialises ``torch.distributed`` with the gloo
    backend from the launcher's environment (exporting ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR`` and ``MASTER_PORT`` for code that reads them), honours
    ``cfg.env_cfg.dist_cfg.timeout`` (seconds; validated by :func:`dist_timeout` for every
    launcher but ``none``, and set to :data:`DEFAULT_GLOO_TIMEOUT_S` when unset), records
    ``backend='gloo'`` in ``cfg.env_cfg.dist_cfg``, and sets ``cfg.model_wrapper_cfg`` to
    :func:`cpu_model_wrapper_cfg` unless the config has one (a DDP-type one without
    ``device_ids`` gets ``device_ids=None``). Call it before building the Runner.

    Returns:
        True if the CPU path was set up.
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f'launcher must be one of {LAUNCHERS}, got {launcher!r}')
    if launcher == 'none':
        return False
    timeout = dist_timeout(cfg)
    if torch.cuda.is_available():
        return False
    if not torch_dist.is_available():
        raise RuntimeError('this torch build has no torch.distributed; use --launcher none')

    if cfg.get('env_cfg') is None:
        cfg.env_cfg = dict()
    if cfg.env_cfg.get('dist_cfg') is None:
        cfg.env_cfg.dist_cfg = dict()
    dist_cfg = cfg.env_cfg.dist_cfg
    backend = dist_cfg.get('backend', 'gloo')
    if backend != 'gloo':
        print(f'[mmpoly] CUDA is not available: using the gloo backend instead of {backend!r}',
              flush=True)
    dist_cfg['backend'] = 'gloo'
    if timeout is None:
        timeout = DEFAULT_GLOO_TIMEOUT_S
        print(f'[mmpoly] env_cfg.dist_cfg.timeout is not set: a collective waits at most '
              f'{timeout} s for the other processes', flush=True)
        dist_cfg['timeout'] = timeout
    if not torch_dist.is_initialized():
        dist_env = resolve_dist_env(launcher)
        os.environ.update(RANK=str(dist_env.rank), WORLD_SIZE=str(dist_env.world_size),
                          LOCAL_RANK=str(dist_env.local_rank), MASTER_ADDR=dist_env.master_addr,
                          MASTER_PORT=str(dist_env.master_port))
        torch_dist.init_process_group(
            backend='gloo', init_method='env://', rank=dist_env.rank,
            world_size=dist_env.world_size, timeout=datetime.timedelta(seconds=timeout))
        print(f'[mmpoly] rank {dist_env.rank}/{dist_env.world_size} (local rank '
              f'{dist_env.local_rank}): gloo process group on the CPU via '
              f'{dist_env.master_addr}:{dist_env.master_port}', flush=True)

    wrapper_cfg = cfg.get('model_wrapper_cfg')
    if wrapper_cfg is None:
        cfg.model_wrapper_cfg = cpu_model_wrapper_cfg(cfg.get('find_unused_parameters', False))
    elif 'device_ids' not in wrapper_cfg and _is_ddp_type(
            wrapper_cfg.get('type', 'MMDistributedDataParallel')):
        wrapper_cfg['device_ids'] = None
    return True


def _is_ddp_type(wrapper_type: object) -> bool:
    """Whether a ``model_wrapper_cfg`` type names a ``DistributedDataParallel`` subclass."""
    from mmengine.registry import MODEL_WRAPPERS
    from torch.nn.parallel import DistributedDataParallel
    cls = MODEL_WRAPPERS.get(wrapper_type) if isinstance(wrapper_type, str) else wrapper_type
    return isinstance(cls, type) and issubclass(cls, DistributedDataParallel)


def build_runner(cfg: Config, new_run_load_from: Optional[str] = None) -> Runner:
    """Build the Runner of ``cfg`` (``runner_type`` honoured) with mmpoly's guarantees.

    In order: the CPU distributed set-up (:func:`setup_cpu_distributed`), atomic checkpoint
    saving (:func:`~mmpoly.engine.saving.install_atomic_saving` and
    :func:`~mmpoly.engine.saving.use_atomic_checkpoint_hook`, which edits ``cfg``), building the
    Runner, ``channels_last`` (:func:`~mmpoly.engine.memory_format.apply_channels_last`), and
    for ``resume=True`` choosing the checkpoint (:func:`~mmpoly.engine.resume.prepare_resume`;
    raises :class:`~mmpoly.engine.resume.ResumeError`; with nothing to resume, a new run starts
    from ``new_run_load_from`` where given). The Runner's config renders its text once
    (:class:`~mmpoly.engine.config_text.TextCachingConfig`), not at every checkpoint.
    """
    from .resume import prepare_resume
    from .saving import install_atomic_saving, use_atomic_checkpoint_hook
    setup_cpu_distributed(cfg, cfg.get('launcher', 'none'))
    install_atomic_saving()
    use_atomic_checkpoint_hook(cfg)
    cfg = caching_pretty_text(cfg)
    with channels_last_before_wrapping(cfg):
        runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)
    apply_channels_last(runner)
    prepare_resume(runner, new_run_load_from)
    return runner


def shutdown_distributed(wait_for_peers: bool = True) -> None:
    """End a distributed run cleanly: the run's objects freed, a barrier (``wait_for_peers``),
    then ``destroy_process_group``.

    A finished Runner can stay alive in its own reference cycle (its loops refer back to it),
    and with it the model's DistributedDataParallel wrapper, which can abort the process when it
    is freed only at interpreter shutdown (torch 2.14.1, gloo); ``gc.collect()`` frees them
    now. The barrier keeps a fast rank from tearing its group down while a peer still talks to
    it (e.g. rank 0 evaluating the collected predictions); a rank that stops on an error passes
    ``wait_for_peers=False``, as its peers may never reach a barrier. A no-op without a process
    group.
    """
    if not (torch_dist.is_available() and torch_dist.is_initialized()):
        return
    gc.collect()
    if wait_for_peers:
        torch_dist.barrier()
    torch_dist.destroy_process_group()
