"""Test (and evaluate) a checkpoint with an mmpoly (mmpretrain / mmdet) config.

Same flags as mmpretrain 1.2.0's ``tools/test.py``, plus ``--non-strict``. Checkpoints load with
torch's safe loading (see ``mmpoly.engine.checkpoint``); distributed runs also work without CUDA
(gloo).

``--out`` must end in a suffix mmengine writes: ``.pkl`` / ``.pickle`` for the predictions
(mmengine's ``DumpResults``), also ``.json`` / ``.yaml`` / ``.yml`` for the metrics
(``--out-item metrics``, ``mmengine.dump``); ``--cfg-options load_from=...`` naming another file
than CHECKPOINT is refused.

The checkpoint must fit the model as built here (the TTA model's inner model with ``--tta``):
missing, unexpected or mis-shaped weights stop the test with exit status 1 and a list of them
(:class:`mmpoly.engine.StrictCheckpointHook`), unless ``--non-strict`` is given, which only
warns. A corrupt, unsafe or mismatched checkpoint is reported in one message, not a traceback;
so are start-up mistakes, and top-level config keys that mmengine would ignore without a word
are warned about (:mod:`mmpoly.utils.startup`).

With ``--tta``, ``--cfg-options`` for ``tta_model`` / ``tta_pipeline`` are merged before the
model is wrapped and the pipeline replaced (so they act), the others after it (``model`` is
then the TTA model and the config's model ``model.module``: an unknown ``model.*`` key is
refused with that said), one for
``test_dataloader.dataset.pipeline`` is refused (it would override the TTA pipeline), and
``--show`` / ``--show-dir`` draw each sample's first TTA view
(:class:`mmpoly.engine.TTAVisualizationHook`);
without ``--tta``, options for ``tta_model`` / ``tta_pipeline`` are refused (no effect).
``--interval`` without ``--show`` / ``--show-dir`` and ``--wait-time`` without ``--show``
are refused: they would have no effect.
"""
import argparse
import math
import os
import os.path as osp
from copy import deepcopy
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import mmengine
from mmengine.config import Config, ConfigDict
from mmengine.evaluator import DumpResults

from mmpoly.engine import (STARTUP_REFUSALS, StrictCheckpointHook, build_runner,
                           shutdown_distributed)
from mmpoly.engine.memory_format import check_channels_last
from mmpoly.utils import register_all_modules
from mmpoly.utils.startup import (CfgOptionsAction, StartupError, check_cfg_options,
                                  check_checkpoint, check_dataloaders, check_datasets,
                                  check_dist_cfg, check_hooks, check_model_config,
                                  check_vis_backends, check_work_dir, folder_problem, load_config,
                                  model_build_errors, out_file_problem, same_checkpoint,
                                  startup_errors, warn_ignored_keys)

#: The suffixes mmengine's DumpResults takes for the predictions (--out-item pred).
PREDICTION_SUFFIXES = ('.pkl', '.pickle')
#: mmpretrain's defaults of --interval and --wait-time, used with --show / --show-dir.
DEFAULT_INTERVAL, DEFAULT_WAIT_TIME = 1, 2.0
#: The test pipeline, which --tta replaces with ``tta_pipeline``.
TEST_PIPELINE_KEY = 'test_dataloader.dataset.pipeline'
#: The top-level keys whose --cfg-options are merged before --tta wraps the model and replaces
#: the test pipeline (merged after, they would have no effect).
TTA_KEYS = ('tta_model', 'tta_pipeline')


def out_suffixes(out_item: Optional[str]) -> Tuple[str, ...]:
    """The suffixes ``--out`` may end in: those of mmengine.dump's file handlers for the
    metrics (``.json``, ``.pickle``, ``.pkl``, ``.yaml``, ``.yml``), :data:`PREDICTION_SUFFIXES`
    for the predictions (``pred``, the default)."""
    if out_item == 'metrics':
        from mmengine.fileio.handlers import file_handlers
        return tuple(sorted(f'.{ext}' for ext in file_handlers))
    return PREDICTION_SUFFIXES


def out_problem(out: str, out_item: Optional[str]) -> Optional[str]:
    """Why ``--out`` cannot be written as ``--out-item`` asks, or None."""
    if osp.isdir(out):
        return f'--out {out!r} is a directory; give the path of a file to write'
    suffixes = out_suffixes(out_item)
    if out.endswith(suffixes):
        return None
    allowed = ' or '.join([', '.join(suffixes[:-1]), suffixes[-1]] if len(suffixes) > 1
                          else suffixes)
    if out_item == 'metrics':
        return (f'--out {out!r}: the metrics (--out-item metrics) are written by mmengine.dump, '
                f'which takes the format from the suffix: give a file ending in {allowed}')
    return (f'--out {out!r}: the predictions (--out-item pred, the default) are written as a '
            f"pickle by mmengine's DumpResults: give a file ending in {allowed} (or add "
            f'--out-item metrics to write the metrics, e.g. as .json)')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the command line (``argv`` defaults to ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(prog='tools/test.py',
                                     description='Test (and evaluate) a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir',
                        help='the directory to save the file containing evaluation metrics')
    parser.add_argument('--out', help='the file to write results to: the predictions to a .pkl '
                        'or .pickle file, the metrics (--out-item metrics) to a .json, .yaml, '
                        '.yml, .pkl or .pickle file')
    parser.add_argument('--out-item', choices=['metrics', 'pred'],
                        help='write the metrics or the predictions to --out '
                        '(default: predictions)')
    parser.add_argument(
        '--cfg-options', nargs='+', action=CfgOptionsAction,
        help='override config settings, key=value pairs merged into the config, e.g. '
        'test_dataloader.batch_size=8 (no spaces in a list value; quote it)')
    parser.add_argument('--amp', action='store_true',
                        help='enable automatic-mixed-precision test')
    parser.add_argument('--channels-last', action='store_true',
                        help='store the model channels-last (sets the config key '
                        'channels_last=True; classifiers only, detectors are refused)')
    parser.add_argument('--show-dir',
                        help='directory where the visualization images will be saved (relative to '
                        'the current directory, for classifiers and detectors alike)')
    parser.add_argument('--show', action='store_true',
                        help='display the prediction results in a window')
    parser.add_argument('--interval', type=int,
                        help='visualize every this many samples (a whole number >= 1; '
                        f'default {DEFAULT_INTERVAL}); needs --show or --show-dir')
    parser.add_argument('--wait-time', type=float,
                        help='display time of every window (seconds, >= 0; default '
                        f'{DEFAULT_WAIT_TIME:g}); needs --show')
    parser.add_argument('--no-pin-memory', action='store_true',
                        help='disable the pin_memory option of the dataloaders')
    parser.add_argument(
        '--tta', action='store_true',
        help='test-time augmentation: the config\'s tta_pipeline and tta_model if it has '
        'them, otherwise horizontal-flip TTA averaging the class scores')
    parser.add_argument(
        '--non-strict', action='store_true',
        help='test even if the checkpoint\'s weights do not fit the model (missing, unexpected '
        'or mis-shaped keys): load the matching ones and warn; by default such a checkpoint '
        'is refused')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    # torch.distributed.launch passes --local-rank (torch >= 2.0) or --local_rank.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if args.out is None and args.out_item is not None:
        parser.error('--out-item needs --out (the file to write to)')
    problem = None if args.out is None else out_problem(args.out, args.out_item)
    if problem:
        parser.error(problem)
    if args.interval is not None and not (args.show or args.show_dir is not None):
        parser.error(f'--interval {args.interval} has no effect without --show or --show-dir '
                     '(it picks the samples to visualize): add one of them, or drop --interval')
    if args.wait_time is not None and not args.show:
        parser.error(f'--wait-time {args.wait_time:g} has no effect without --show (it is how '
                     'long each window stays open; --show-dir only writes files): add --show, '
                     'or drop --wait-time')
    if args.interval is None:
        args.interval = DEFAULT_INTERVAL
    if args.wait_time is None:
        args.wait_time = DEFAULT_WAIT_TIME
    if args.interval < 1:  # mmpretrain's hook draws nothing (< 0) or divides by it (0)
        parser.error(f'--interval must be a whole number >= 1 (visualize every this many '
                     f'samples), got {args.interval}')
    if not (math.isfinite(args.wait_time) and args.wait_time >= 0):
        parser.error(f'--wait-time must be a finite number of seconds >= 0, got '
                     f'{args.wait_time}')
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def _enable_visualization(cfg: Config, args: argparse.Namespace) -> None:
    """Switch the VisualizationHook on for --show / --show-dir."""
    hooks = cfg.get('default_hooks') or {}
    if 'visualization' not in hooks:
        raise ValueError('--show / --show-dir need a VisualizationHook in the config: '
                         'default_hooks.visualization=dict(type="VisualizationHook")')
    vis = cfg.default_hooks.visualization
    if vis.get('type') == 'DetVisualizationHook':  # mmdet's hook: draw / test_out_dir
        vis.draw = True
        # absolute: mmdet's hook puts a relative one under work_dir/<timestamp>/
        vis.test_out_dir = osp.abspath(args.show_dir)
    else:
        vis.enable = True
        vis.out_dir = args.show_dir
        if args.tta and vis.get('type') in ('VisualizationHook', 'mmpretrain.VisualizationHook'):
            vis.type = 'TTAVisualizationHook'  # mmpretrain's hook fails on a TTA batch
    vis.show = args.show
    vis.wait_time = args.wait_time
    vis.interval = args.interval


def split_tta_options(options: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``--cfg-options`` with ``--tta``: those of :data:`TTA_KEYS` (merged before the model is
    wrapped and the pipeline replaced, so that they act) and the others (merged last).

    Refuses an option for :data:`TEST_PIPELINE_KEY` (or inside it): merged after --tta, it
    would replace or edit the TTA pipeline without a word."""
    tta = {key: value for key, value in options.items() if key.split('.')[0] in TTA_KEYS}
    bad = [key for key in options
           if key == TEST_PIPELINE_KEY or key.startswith(TEST_PIPELINE_KEY + '.')]
    if bad:
        raise StartupError(
            '; '.join(f'--cfg-options {key}={options[key]!r}' for key in bad)
            + f': with --tta the test data go through tta_pipeline (the config\'s, or else the '
            f'test pipeline with horizontal-flip TTA), which replaces {TEST_PIPELINE_KEY}, and '
            'this would override it without a word. Set tta_pipeline instead, in the config or '
            'with --cfg-options '
            + ' '.join(f'tta_pipeline{key[len(TEST_PIPELINE_KEY):]}=...' for key in bad))
    return tta, {key: value for key, value in options.items() if key not in tta}


def refuse_tta_options(options: Mapping[str, Any]) -> None:
    """Without ``--tta``, ``--cfg-options`` for :data:`TTA_KEYS` would have no effect: refused
    with the flag they need."""
    unused = [key for key in options if key.split('.')[0] in TTA_KEYS]
    if unused:
        raise StartupError(', '.join(f'--cfg-options {key}={options[key]!r}' for key in unused)
                           + ': has no effect without --tta (tta_model and tta_pipeline are '
                           'used only for test-time augmentation); add --tta, or drop it')


def _enable_tta(cfg: Config, options: Mapping[str, Any]) -> None:
    """Wrap the model in the TTA model and test with the TTA pipeline (classifiers without
    them: flip TTA averaging the class scores; detectors must define both, as in mmdet).
    ``options``: the ``--cfg-options`` of :data:`TTA_KEYS`, merged before either is used."""
    if cfg.get('default_scope') == 'mmdet' and not ('tta_model' in cfg and 'tta_pipeline' in cfg):
        raise ValueError('--tta with a detection config needs tta_model and tta_pipeline in the '
                         "config (e.g. mmdet's DetTTAModel and a TestTimeAug pipeline)")
    if 'tta_model' not in cfg:
        cfg.tta_model = dict(type='mmpretrain.AverageClsScoreTTA')
    if 'tta_pipeline' not in cfg:
        test_pipeline = cfg.test_dataloader.dataset.pipeline
        tta_pipeline = deepcopy(test_pipeline)
        tta_pipeline[-1] = dict(
            type='TestTimeAug',
            transforms=[[dict(type='RandomFlip', prob=1.),
                         dict(type='RandomFlip', prob=0.)], [test_pipeline[-1]]])
        cfg.tta_pipeline = tta_pipeline
    if options:
        check_cfg_options(cfg, options)
        cfg.merge_from_dict(options)
    if not (isinstance(cfg.tta_model, Mapping) and 'type' in cfg.tta_model):
        raise ValueError(f'--tta: tta_model must be a model dict with a type, got '
                         f'{cfg.tta_model!r}')
    if not isinstance(cfg.tta_pipeline, (list, tuple)):
        raise ValueError(f'--tta: tta_pipeline must be a list of transforms, got '
                         f'{cfg.tta_pipeline!r}')
    cfg.model = ConfigDict(**cfg.tta_model, module=cfg.model)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline


def merge_args(cfg: Config, args: argparse.Namespace) -> Config:
    """Fold the command-line options into ``cfg`` (``--cfg-options`` last, so it wins)."""
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    cfg.load_from = args.checkpoint
    if args.amp:
        if cfg.get('test_cfg') is None:
            cfg.test_cfg = dict()
        cfg.test_cfg.fp16 = True
    if args.channels_last:
        cfg.channels_last = True
    options = dict(args.cfg_options or {})
    try:
        if args.show or args.show_dir is not None:
            _enable_visualization(cfg, args)
        if args.tta:
            tta_options, options = split_tta_options(options)
            _enable_tta(cfg, tta_options)
        else:
            refuse_tta_options(options)
    except ValueError as error:  # the config lacks what the flag needs: one message
        raise StartupError(str(error)) from None
    if cfg.get('test_dataloader') is not None:
        loader = ConfigDict(pin_memory=True)
        if cfg.get('default_scope', 'mmpretrain') == 'mmpretrain':  # see tools/train.py
            loader.collate_fn = dict(type='default_collate')
        loader.update(cfg.test_dataloader)
        if args.no_pin_memory:
            loader.pin_memory = False
        cfg.test_dataloader = loader
    if options:
        try:
            check_cfg_options(cfg, options)
        except StartupError as error:
            inner = [key for key in options
                     if key.startswith('model.') and not key.startswith('model.module.')]
            if args.tta and inner:  # --tta has wrapped the config's model
                example = 'model.module.' + inner[0][len('model.'):]
                raise StartupError(
                    f'{error} (with --tta, model is the TTA model {cfg.model.get("type")!r} '
                    f'around the config\'s model, which is model.module: e.g. {example})'
                ) from None
            raise
        load_from = options.get('load_from', args.checkpoint)
        if not same_checkpoint(load_from, args.checkpoint):
            raise StartupError(f'--cfg-options load_from={load_from!r} names another checkpoint '
                               f'than CHECKPOINT {args.checkpoint!r}: tools/test.py tests '
                               'CHECKPOINT (it sets load_from); drop load_from from '
                               '--cfg-options')
        cfg.merge_from_dict(options)
    try:
        check_channels_last(cfg)
    except ValueError as error:  # a bad value, or a detector: one message at start-up
        raise StartupError(str(error)) from None
    return cfg


def check_out_file(out: str) -> None:
    """``--out`` must be writable before the test runs: the file is written only after the
    whole test set has been predicted (:func:`mmpoly.utils.startup.out_file_problem`; its
    missing folders are created then)."""
    problem = out_file_problem(out, '--out')
    if problem:
        raise StartupError(f'{problem}; give a file in a writable folder')


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Build the Runner from the config, load the checkpoint and test."""
    args = parse_args(argv)
    with startup_errors('tools/test.py', args.launcher):
        register_all_modules(init_default_scope=True)
        cfg = merge_args(load_config(args.config), args)
        warn_ignored_keys(cfg, 'tools/test.py', args.launcher)
        check_model_config(cfg, args.config)
        check_dist_cfg(cfg)
        check_hooks(cfg)
        check_vis_backends(cfg)
        check_dataloaders(cfg, ['test_dataloader'])
        check_checkpoint(args.checkpoint, 'CHECKPOINT', 'give the path of a checkpoint file '
                         '(e.g. work_dirs/CONFIG_NAME/epoch_N.pth)')
        check_work_dir(cfg.work_dir)
        if args.out is not None:
            check_out_file(args.out)
        if args.show_dir is not None:  # drawn into as the test runs: checked before it
            problem = folder_problem(args.show_dir, '--show-dir')
            if problem:
                raise StartupError(f'{problem}; give a folder that can be written to')
        check_datasets(cfg, ['test_dataloader'])
        try:
            build_and_test(cfg, args)
        except STARTUP_REFUSALS as error:  # e.g. a checkpoint that does not fit: one message
            raise StartupError(str(error)) from error
    shutdown_distributed()  # every rank, after the run: no gloo thread left at exit


def build_and_test(cfg: Config, args: argparse.Namespace) -> None:
    """Build the Runner, load CHECKPOINT (strictly unless ``--non-strict``) and test; write
    ``--out``."""
    with model_build_errors(cfg, args.config):
        runner = build_runner(cfg)
    runner.register_hook(StrictCheckpointHook(strict=not args.non_strict, path=args.checkpoint))
    if args.out and args.out_item in ('pred', None):
        runner.test_evaluator.metrics.append(DumpResults(out_file_path=args.out))
    metrics = runner.test()
    if args.out and args.out_item == 'metrics' and runner.rank == 0:
        mmengine.dump(metrics, args.out)


if __name__ == '__main__':
    main()
