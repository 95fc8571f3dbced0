"""Train a model from an mmpoly (mmpretrain / mmdet) config.

Same flags as mmpretrain 1.2.0's ``tools/train.py``. Distributed runs also work without CUDA
(gloo), e.g. ``tools/dist_train.sh CONFIG 2`` on a CPU machine.

Reliability (see :mod:`mmpoly.engine`): checkpoints and ``last_checkpoint`` are written atomically;
``--resume`` resumes from the newest checkpoint that loads and fits the model, or stops with the
reasons (also when the checkpoint's run is finished or its optimizer or schedule changed since), and
with no checkpoint at all starts a new run from the config's ``load_from`` (strictly loaded) or from
scratch; one run at a time per work_dir (``<work_dir>/.mmpoly-run.lock``, taken by rank 0), and a
new run (no ``--resume``) refuses a work_dir holding an earlier run's checkpoints; ``load_from`` is
loaded strictly (its weights must fit the model; ``--non-strict`` loads the matching ones with a
warning); a distributed collective waits at most ``env_cfg.dist_cfg.timeout`` seconds (default 300
on the CPU). Start-up mistakes (config file, --cfg-options key, training loop lengths, work_dir,
checkpoint, missing data, compile_model, dist_cfg, hook options, dataloader workers) end in one
message before the Runner is built, and so do the refusals above; top-level config keys that
mmengine would ignore without a word (mmcv 1.x keys such as ``lr_config``, typos such as
``param_schedulr``) are warned about (:mod:`mmpoly.utils.startup`).
"""
import argparse
import contextlib
import difflib
import os
import os.path as osp
from typing import Any, Optional, Sequence

from mmengine.config import Config, ConfigDict

from mmpoly.engine import (STARTUP_REFUSALS, RunLock, StrictCheckpointHook, build_runner,
                           shutdown_distributed)
from mmpoly.engine.compile import (apply_compile, config_compile_kwargs, configure_amp,
                                   torch_compile_kwargs)
from mmpoly.engine.memory_format import check_channels_last
from mmpoly.engine.resume import checkpoint_folder, find_resume_candidates
from mmpoly.utils import register_all_modules
from mmpoly.utils.startup import (CfgOptionsAction, StartupError, check_cfg_options,
                                  check_checkpoint, check_dataloaders, check_datasets,
                                  check_dist_cfg, check_hooks, check_model_config,
                                  check_no_earlier_run, check_optimizer,
                                  check_pretrained_backbone, check_train_loop, check_vis_backends,
                                  check_work_dir, launcher_rank, load_config, model_build_errors,
                                  same_checkpoint, startup_errors, warn_ignored_keys)

#: The last sentence of the error for a ``load_from`` whose weights do not fit the model.
LOAD_FROM_HINT = ('To start from the matching weights anyway (the others keep their initial '
                  'values), load it non-strictly: tools/train.py --non-strict.')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line (``argv`` defaults to ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(prog='tools/train.py', description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from this checkpoint (it must hold meta, optimizer and a state_dict that '
        'fits the model); without a path, resume from the newest checkpoint of the work '
        'directory that loads (last_checkpoint, then epoch_*/iter_*.pth by time; broken ones '
        'are skipped and logged; none loadable is an error; none at all starts a new run, from '
        'the config\'s load_from if it sets one (strictly loaded), else from scratch). '
        'Refused: a checkpoint whose run is finished (its epoch or iteration reached '
        'max_epochs / max_iters) or whose optimizer or param_scheduler settings differ from '
        'the config\'s (mmengine would restore the old ones). Without --resume, a work '
        'directory that holds checkpoints is refused. '
        'Note: from a mid-epoch iter_*.pth of an epoch-based run, mmengine 0.10.7 reruns that '
        'epoch from its first batch (the batches before the checkpoint are trained twice, the '
        'iteration count ends above max_iters by as many batches and the computed ETA goes '
        'negative, logged as 0:00:00 or -1 day, 23:59:..); epoch_*.pth resumes exactly')
    parser.add_argument(
        '--non-strict', action='store_true',
        help='start from load_from even if its weights do not fit the model (missing, '
        'unexpected or mis-shaped keys): load the matching ones and warn; by default such a '
        'checkpoint is refused (a resumed checkpoint must always fit)')
    parser.add_argument('--amp', action='store_true',
                        help='enable automatic-mixed-precision training (without CUDA: '
                        'bfloat16 autocast on the CPU, no loss scaling)')
    parser.add_argument('--compile', action='store_true',
                        help='torch.compile the model\'s backbone, neck and head (sets the '
                        'config key compile_model=True unless it holds torch.compile options); '
                        'the optimizer step stays eager')
    parser.add_argument('--channels-last', action='store_true',
                        help='store the model channels-last (sets the config key '
                        'channels_last=True; classifiers only, detectors are refused)')
    parser.add_argument('--no-validate', action='store_true',
                        help='do not evaluate checkpoints during training')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate by the actual / the base batch size')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='disable the pin_memory option of the dataloaders')
    parser.add_argument('--no-persistent-workers', action='store_true',
                        help='disable the persistent_workers option of the dataloaders')
    parser.add_argument(
        '--cfg-options', nargs='+', action=CfgOptionsAction,
        help='override config settings, key=value pairs merged into the config, e.g. '
        'train_cfg.max_epochs=2 or model.backbone.stage_channels="[8,16]" (no spaces in a '
        'list value; quote it)')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    # torch.distributed.launch passes --local-rank (torch >= 2.0) or --local_rank.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def _dataloader_defaults(cfg: Config, args: argparse.Namespace) -> None:
    """Give every configured dataloader mmpretrain's defaults, then apply the --no-* flags.

    Defaults (overridden by the config): ``pin_memory=True``, ``persistent_workers=True`` (a
    loader with ``num_workers=0`` must set it False) and, for mmpretrain configs,
    ``collate_fn=default_collate`` (mmdet batches in its data preprocessor: mmengine's default
    ``pseudo_collate`` stays, as in mmdet's own tools/train.py).
    """
    for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        if cfg.get(field) is None:
            continue
        loader = ConfigDict(pin_memory=True, persistent_workers=True)
        if cfg.get('default_scope', 'mmpretrain') == 'mmpretrain':
            loader.collate_fn = dict(type='default_collate')
        loader.update(cfg[field])
        if args.no_pin_memory:
            loader.pin_memory = False
        if args.no_persistent_workers:
            loader.persistent_workers = False
        cfg[field] = loader


VALIDATION_KEYS = ('val_cfg', 'val_dataloader', 'val_evaluator')


def drop_validation(cfg: Config, cfg_options: dict) -> None:
    """``--no-validate``: remove the validation loop, its dataloader and its evaluator.

    Applied after ``--cfg-options``, so that options for them (as a shared launch script passes
    them to every run) merge into the config's own values instead of failing on a removed
    section; the ones that therefore have no effect are printed, not dropped without a word.
    """
    for key in VALIDATION_KEYS:
        cfg[key] = None
    unused = sorted(key for key in cfg_options if key.split('.')[0] in VALIDATION_KEYS)
    if unused:
        print(f'tools/train.py: --no-validate: no validation, so these --cfg-options have no '
              f'effect: {", ".join(unused)}', flush=True)


def merge_args(cfg: Config, args: argparse.Namespace) -> Config:
    """Fold the command-line options into ``cfg`` (``--cfg-options`` after the other flags, so
    it wins; ``--no-validate`` last: it removes the validation loop whatever the options set)."""
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    if args.amp:
        try:
            configure_amp(cfg)
        except ValueError as error:  # a wrapper or dtype --amp cannot use: one message
            raise StartupError(str(error)) from None
    if args.compile and not cfg.get('compile_model'):
        cfg.compile_model = True
    if cfg.get('compile_model') is True and any(
            key.startswith('compile_model.') for key in args.cfg_options or {}):
        cfg.compile_model = {}  # True means the defaults; the options' keys go into a dict
    if args.channels_last:
        cfg.channels_last = True
    if args.cfg_options is not None and 'load_from' in args.cfg_options:
        check_resume_and_load_from(args.resume, args.cfg_options['load_from'])
    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume
    if args.auto_scale_lr:
        if cfg.get('auto_scale_lr') is None:
            raise StartupError('--auto-scale-lr needs auto_scale_lr=dict(base_batch_size=...) '
                               'in the config')
        cfg.auto_scale_lr.enable = True
    _dataloader_defaults(cfg, args)
    if args.cfg_options is not None:
        check_cfg_options(cfg, args.cfg_options)
        cfg.merge_from_dict(args.cfg_options)
    if args.no_validate:
        drop_validation(cfg, args.cfg_options or {})
    try:
        check_channels_last(cfg)
    except ValueError as error:  # a bad value, or a detector: one message at start-up
        raise StartupError(str(error)) from None
    return cfg


def check_resume_and_load_from(resume: Optional[str], load_from: Any) -> None:
    """Refuse ``--cfg-options load_from=...`` that contradicts ``--resume``: ``--resume PATH``
    resumes from PATH (it sets load_from), and ``--resume`` without a path from the work_dir's
    newest checkpoint; mmengine would otherwise resume from the option's file without a word."""
    if resume is None or (resume == 'auto' and load_from is None):
        return
    if resume == 'auto':
        raise StartupError(f'--resume without a path resumes from the newest checkpoint of the '
                           f'work_dir, but --cfg-options load_from={load_from!r} names another '
                           f'one; to resume from it, give --resume {load_from}, and drop '
                           'load_from from --cfg-options')
    if not same_checkpoint(resume, load_from):
        raise StartupError(f'--resume {resume!r} and --cfg-options load_from={load_from!r} name '
                           'different checkpoints: --resume PATH resumes from PATH (it sets '
                           'load_from). Give --resume PATH alone to resume a run, or '
                           'load_from=PATH without --resume to start a new run from its '
                           'weights')


def new_run_load_from(config: Config, args: argparse.Namespace) -> Optional[str]:
    """The checkpoint a ``--resume`` run without a path starts from when its work_dir holds
    nothing to resume: the config's own ``load_from`` (read before :func:`merge_args`, which
    clears it), so that a job script that always passes ``--resume`` fine-tunes from it on its
    first start instead of training from scratch. None for other runs."""
    if args.resume != 'auto':
        return None
    return config.get('load_from') or None


def check_startup(cfg: Config, args: argparse.Namespace,
                  start_from: Optional[str] = None) -> None:
    """Refuse, before the Runner is built, a model the config cannot build
    (:func:`check_model_config`: an unregistered type, an argument its type does not take), a
    checkpoint that does not exist (also a backbone's ``Pretrained`` one), a training loop
    length or interval that is not a whole number >= 1, a bad ``compile_model``
    (:func:`check_compile`) or ``env_cfg.dist_cfg``, an unknown hook option, a visualizer
    backend whose package is not installed (:func:`check_vis_backends`), an unusable
    work_dir, a dataloader's bad ``num_workers`` or ``persistent_workers`` and missing data (of
    the validation loader too), and warn about top-level config keys that have no effect
    (:mod:`mmpoly.utils.startup`). ``start_from`` (:func:`new_run_load_from`) is checked when
    the work_dir holds no checkpoint to resume."""
    warn_ignored_keys(cfg, 'tools/train.py', args.launcher)
    check_model_config(cfg, args.config)
    check_train_loop(cfg)
    check_optimizer(cfg)
    check_dist_cfg(cfg)
    check_compile(cfg)
    check_hooks(cfg)
    check_vis_backends(cfg)
    if args.non_strict and cfg.get('resume'):
        raise StartupError('--non-strict applies to load_from, not to --resume: a resumed '
                           'checkpoint must fit the model (its optimizer state continues). '
                           'Drop --non-strict, or start a new run from its weights with '
                           '--cfg-options load_from=PATH --non-strict in another --work-dir')
    if args.non_strict and not cfg.get('load_from'):
        print('tools/train.py: --non-strict has no effect: the run loads no checkpoint '
              '(load_from is not set)', flush=True)
    if args.resume not in (None, 'auto'):
        check_checkpoint(args.resume, '--resume', 'give an existing checkpoint, or --resume '
                         'without a path for the newest one of the work_dir')
    elif cfg.get('load_from'):
        check_checkpoint(cfg.load_from, 'load_from', 'fix load_from in the config or with '
                         '--cfg-options load_from=PATH (load_from=None trains from scratch)')
    if start_from is not None and not find_resume_candidates(
            cfg.work_dir, [], checkpoint_folder(cfg.work_dir, cfg)):
        check_checkpoint(start_from, 'load_from', 'the work_dir holds no checkpoint to resume, '
                         'so --resume starts a new run from the config\'s load_from: fix it in '
                         'the config or with --cfg-options load_from=PATH (load_from=None '
                         'trains from scratch)')
    check_pretrained_backbone(cfg)
    check_work_dir(cfg.work_dir)
    # val_cfg = dict() (every config's) is falsy but validates; --no-validate sets it to None
    loaders = ['train_dataloader'] + (['val_dataloader'] if cfg.get('val_cfg') is not None
                                      else [])
    check_dataloaders(cfg, loaders, '--no-persistent-workers')
    check_datasets(cfg, loaders)


def check_compile(cfg: Config) -> None:
    """Refuse a ``compile_model`` that ``torch.compile`` would refuse once the Runner is built:
    an unknown option or a value that is not a dict (:func:`config_compile_kwargs`), a
    ``mode`` inductor does not have (:func:`torch_compile_kwargs`) and a ``backend`` name that
    ``torch._dynamo`` does not list."""
    try:
        kwargs = config_compile_kwargs(cfg)
        if kwargs is None:
            return
        torch_compile_kwargs(kwargs)
    except ValueError as error:  # a bad torch.compile option, or mmengine's compile beside it
        raise StartupError(str(error)) from None
    backend = kwargs.get('backend', 'inductor')
    if isinstance(backend, str):
        import torch._dynamo
        backends = torch._dynamo.list_backends(exclude_tags=())  # debug ones (eager) too
        if backend not in backends:
            close = difflib.get_close_matches(backend, backends, n=3)
            close = f' (close matches: {", ".join(close)})' if close else ''
            raise StartupError(f'compile_model: backend {backend!r} is not a torch.compile '
                               f'backend{close}; allowed: '
                               f'{", ".join(torch._dynamo.list_backends())} and the debug '
                               'backends of torch._dynamo.list_backends(exclude_tags=()) (e.g. '
                               'eager, aot_eager). Set compile_model.backend in the config or '
                               'with --cfg-options compile_model.backend=NAME')


def check_startup_locked(cfg: Config) -> None:
    """The start-up checks made while holding the work_dir's lock (rank 0): a new run (no
    resume) refuses a work_dir that holds an earlier run's checkpoints (a run that ended just
    before the lock was taken is seen too)."""
    if not cfg.get('resume'):
        check_no_earlier_run(cfg.work_dir)


def build_and_train(cfg: Config, args: argparse.Namespace,
                    start_from: Optional[str] = None) -> None:
    """Build the Runner and train; a checkpoint loaded by a new run (``load_from``, or
    ``start_from`` for ``--resume`` with nothing to resume) must fit the model
    (:class:`~mmpoly.engine.StrictCheckpointHook`; ``--non-strict`` only warns)."""
    with model_build_errors(cfg, args.config):
        runner = build_runner(cfg, new_run_load_from=start_from)
    runner = apply_compile(runner)
    if runner._load_from and not runner._resume:
        runner.register_hook(StrictCheckpointHook(strict=not args.non_strict,
                                                  path=runner._load_from, hint=LOAD_FROM_HINT))
    runner.train()


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Build the Runner from the config and train."""
    args = parse_args(argv)
    with startup_errors('tools/train.py', args.launcher):
        register_all_modules(init_default_scope=True)
        config = load_config(args.config)
        start_from = new_run_load_from(config, args)
        cfg = merge_args(config, args)
        check_startup(cfg, args, start_from)
        # only rank 0 locks the work_dir
        lock = RunLock(cfg.work_dir) if launcher_rank(args.launcher) == 0 \
            else contextlib.nullcontext()
        try:
            with lock:
                check_startup_locked(cfg)
                build_and_train(cfg, args, start_from)
        except STARTUP_REFUSALS as error:  # before the first iteration: one message
            raise StartupError(str(error)) from error
    shutdown_distributed()  # every rank, after the run: no gloo thread left at exit


if __name__ == '__main__':
    main()
