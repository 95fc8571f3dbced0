"""Run the Fashion-MNIST model zoo suite: every (config, seed) through tools/train.py and
tools/test.py, one after the other.

    python tools/model_zoo/run_suite.py --dry-run            # the plan and its time estimate
    python tools/model_zoo/run_suite.py                      # the 17 configs x seeds 0, 1, 2
    python tools/model_zoo/run_suite.py --configs resnet8_1xb128-1400i_fashion-mnist --seeds 0

Each run trains with ``--cfg-options randomness.seed=S`` into
``<work-root>/<config>/seed<S>/`` (``--no-validate``: the final checkpoint is evaluated once, by
tools/test.py on the full 10k test set, into ``test_metrics.json``) and then writes
``suite_record.json``: the seed, a hash of the config as run, the wall time of the training and
test commands, the top-1, and the status (``complete``, or ``diverged`` when training stopped at
a non-finite loss or gradient after some updates: mmpoly's NonFiniteCheckHook). A non-finite loss
or gradient before any update (the hook's cause ``before_update``: a config, data or checkpoint
problem such as ``data_preprocessor.std=[0.0]``, not a divergence) is recorded as ``failed`` with
the hook's diagnosis and stops the suite, as any other failure.
Finished runs (a valid record and metrics file) are skipped; a failed run is rerun, from scratch:
the checkpoints its failed or
interrupted attempt left in the folder are removed first, with a note (tools/train.py refuses a
new run in a folder holding checkpoints). A run folder whose record was made with a
different config (a config, a base, or ``--max-iters`` changed) is refused: results of two
configs are never mixed. ``--max-iters`` and ``--test-images`` shorten every run (smoke tests)
and ``--cfg-options`` changes it; all are part of the hash, and zoo_results.py keeps such runs out
of the repository's results.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from mmengine.config import Config

from mmpoly.engine.saving import atomic_write
from mmpoly.utils.startup import CfgOptionsAction, earlier_run_files, folder_problem
from mmpoly.zoo.fashion_mnist import (COMPLETE, DIVERGED, FAILED, METRICS_FILE, RECORD_FILE,
                                      SEEDS, SUITE, WORK_ROOT, config_hash, config_path,
                                      finished_record, non_finite_before_update, read_record,
                                      read_top1, run_dir)

REPO = Path(__file__).resolve().parents[2]
#: The time model of --dry-run, measured on the 2-core development machine on 2026-11-26 (README:
#: Fashion-MNIST model zoo): the training process's start and data loading; the test on 10,000
#: images (its process start included); and per training iteration a constant plus a term per
#: GMAC of one image's forward pass (fitted to ResNet8 0.067 s, PDC 0.106 s, PDC^[3] 0.136 s).
STARTUP_SECONDS = 6.0
TEST_SECONDS = 10.0
SECONDS_PER_ITER = 0.036
SECONDS_PER_ITER_PER_GMAC = 3.2
DIVERGENCE_MARKER = 'NonFiniteError'


class SuiteError(RuntimeError):
    """A run the suite refuses to do (e.g. a run folder made with another config)."""


def overrides(seed: int, max_iters: Optional[int] = None, test_images: Optional[int] = None,
              extra: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """The ``--cfg-options`` of one run (given to tools/train.py and tools/test.py alike)."""
    options: Dict[str, object] = {'randomness.seed': seed}
    if max_iters is not None:
        options['train_cfg.max_iters'] = max_iters
    if test_images is not None:
        options['test_dataloader.dataset.indices'] = test_images
    options.update(extra or {})
    return options


def run_hash(config: str, max_iters: Optional[int] = None, test_images: Optional[int] = None,
             extra: Optional[Dict[str, object]] = None) -> str:
    """The hash of ``config`` as the suite runs it (the seed left out: seeds share a config)."""
    cfg = Config.fromfile(str(config_path(config)))
    cfg.merge_from_dict({k: v for k, v in overrides(0, max_iters, test_images, extra).items()
                         if k != 'randomness.seed'})
    return config_hash(cfg)


def cfg_options_problem(config: str, extra: Optional[Dict[str, object]]) -> Optional[str]:
    """Why ``--cfg-options`` ``extra`` would fail (or do nothing) on ``config``: the check of
    tools/train.py (:func:`mmpoly.utils.startup.check_cfg_options`), made before any run, so that
    a typo is not found run after run (nor passed by ``--dry-run``). None if they are fine."""
    if not extra:
        return None
    from mmpoly.utils import register_all_modules
    from mmpoly.utils.startup import StartupError, check_cfg_options

    register_all_modules(init_default_scope=False)
    try:
        check_cfg_options(Config.fromfile(str(config_path(config))), extra)
    except StartupError as error:
        return f'{config}: {error}'
    return None


def estimate_seconds(config: str, max_iters: Optional[int] = None,
                     test_images: Optional[int] = None) -> float:
    """Estimated wall time of one run: the overhead (the 10k test included) plus its
    iterations, each costing a constant plus a term proportional to the model's forward GMACs
    (mmengine's count) at 28×28; a finished seed's measured time is used instead where there
    is one."""
    from mmpoly.utils import register_all_modules
    from mmpoly.utils.complexity import measure

    register_all_modules(init_default_scope=False)
    cfg = Config.fromfile(str(config_path(config)))
    iters = max_iters if max_iters is not None else cfg.train_cfg.max_iters
    gmacs = measure(cfg).flops / 1e9
    test = TEST_SECONDS * min(test_images or 10000, 10000) / 10000
    return STARTUP_SECONDS + test + iters * (SECONDS_PER_ITER + SECONDS_PER_ITER_PER_GMAC * gmacs)


def check_folder(folder: Path, expected_hash: str, config: str) -> Optional[dict]:
    """The finished record of ``folder`` (None: to run); raises SuiteError if the folder holds a
    record of another config."""
    record = read_record(folder)
    if record is not None and record.get('config_hash') != expected_hash:
        raise SuiteError(
            f'{folder} holds a run of {config} made with another config (config_hash '
            f'{str(record.get("config_hash"))[:12]}, now {expected_hash[:12]}): the config, one '
            'of its _base_ files, or the run options (--max-iters, --test-images, --cfg-options) '
            'changed since. Move that folder away (or pass another --work-root) to rerun; '
            'results of two configs are not mixed')
    return finished_record(folder)


def _run(cmd: List[str], log: Path) -> Tuple[int, float]:
    """Run ``cmd`` from the repository root with its output appended to ``log``; (status, s)."""
    start = time.monotonic()
    with open(log, 'a') as out:
        out.write(f'$ {" ".join(cmd)}\n')
        out.flush()
        status = subprocess.call(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    return status, time.monotonic() - start


def _tail(path: Path, chars: int = 20000) -> str:
    try:
        return path.read_text(errors='replace')[-chars:]
    except OSError:
        return ''


def _write_record(folder: Path, record: dict) -> None:
    atomic_write(json.dumps(record, indent=2, sort_keys=True) + '\n', folder / RECORD_FILE)


def remove_failed_attempt(folder: Path, log: Optional[Path] = None) -> List[str]:
    """Remove the checkpoints (``*.pth``, ``last_checkpoint``) that an unfinished attempt left
    in ``folder``, before the run is trained again from scratch there, and say so (stdout and
    ``log``); the names removed."""
    stale = earlier_run_files(str(folder))  # what tools/train.py would refuse
    for name in stale:
        (folder / name).unlink()
    if stale:
        note = (f'{folder}: removed the checkpoints of an earlier attempt that did not finish '
                f'({", ".join(stale)}) before training this run again from scratch')
        print(note, flush=True)
        if log is not None:
            with open(log, 'a') as out:
                out.write(note + '\n')
    return stale


def run_one(config: str, seed: int, work_root: Path, expected_hash: str,
            max_iters: Optional[int] = None, test_images: Optional[int] = None,
            extra: Optional[Dict[str, object]] = None) -> dict:
    """Train and test one (config, seed); return (and write) its record. A failed run (not a
    divergence; a non-finite loss or gradient before any update is a failure too) raises
    SuiteError after writing a ``failed`` record."""
    folder = run_dir(work_root, config, seed).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / 'suite.log'
    log.write_text('')  # this attempt's output only (a divergence is recognised in it)
    remove_failed_attempt(folder, log)
    settings = overrides(seed, max_iters, test_images, extra)
    options = [f'{k}={v}' for k, v in settings.items()]
    # the test loads the trained checkpoint: a load_from for the training is not passed on
    # (tools/test.py refuses a load_from other than its CHECKPOINT)
    test_options = [f'{k}={v}' for k, v in settings.items() if k != 'load_from']
    cfg_file = str(config_path(config))
    record = dict(config=Path(config).stem, seed=seed, config_hash=expected_hash,
                  max_iters=max_iters, test_images=test_images, cfg_options=extra or None,
                  started=time.strftime('%Y-%m-%dT%H:%M:%S%z'), train_seconds=None,
                  test_seconds=None, top1=None, checkpoint=None, error=None)
    status, record['train_seconds'] = _run(
        [sys.executable, 'tools/train.py', cfg_file, '--work-dir', str(folder), '--no-validate',
         '--cfg-options', *options], log)
    if status != 0:
        tail = _tail(log)
        before_update = non_finite_before_update(tail)
        diverged = DIVERGENCE_MARKER in tail and not before_update
        lines = [line for line in tail.splitlines() if DIVERGENCE_MARKER in line or 'Error' in line]
        record.update(status=DIVERGED if diverged else FAILED,
                      error=(lines[-1] if lines else f'tools/train.py exited with {status}'))
        _write_record(folder, record)
        if before_update:
            raise SuiteError(f'training {config} (seed {seed}) failed: its loss or gradient was '
                             'non-finite before any update, which is no divergence but a '
                             'config, data or checkpoint problem (recorded as failed; fix it '
                             f'and run again): {record["error"]} (log: {log})')
        if not diverged:
            raise SuiteError(f'training {config} (seed {seed}) failed with exit status {status}: '
                             f'{record["error"]} (log: {log})')
        return record
    checkpoint = (folder / 'last_checkpoint').read_text().strip()
    metrics = folder / METRICS_FILE
    status, record['test_seconds'] = _run(
        [sys.executable, 'tools/test.py', cfg_file, checkpoint, '--work-dir', str(folder),
         '--out', str(metrics), '--out-item', 'metrics', '--cfg-options', *test_options], log)
    top1 = read_top1(metrics) if status == 0 else None
    if top1 is None:
        record.update(status=FAILED, error=f'tools/test.py exited with {status} or wrote no '
                      f'finite top-1 to {metrics}')
        _write_record(folder, record)
        raise SuiteError(f'testing {config} (seed {seed}) failed: {record["error"]} (log: {log})')
    record.update(status=COMPLETE, top1=top1,
                  checkpoint=os.path.relpath(checkpoint, folder))
    _write_record(folder, record)
    return record


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--configs', nargs='+', default=list(SUITE),
                        help='config names (configs/<name>.py; default: the whole suite)')
    parser.add_argument('--seeds', nargs='+', type=int, default=list(SEEDS))
    parser.add_argument('--work-root', default=str(WORK_ROOT),
                        help='runs go to <work-root>/<config>/seed<S> (default: %(default)s)')
    parser.add_argument('--max-iters', type=int, default=None,
                        help='train every run for this many iterations (smoke tests)')
    parser.add_argument('--test-images', type=int, default=None,
                        help='test on the first N test images only (smoke tests; default: all '
                        '10,000)')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction, default={},
                        help='more overrides for every run (e.g. to test a divergence); part of '
                        'the hash, and such runs stay out of the repository\'s results')
    parser.add_argument('--dry-run', action='store_true',
                        help='print the plan and the time estimate, run nothing')
    args = parser.parse_args(argv)
    args.configs = [Path(name).stem for name in args.configs]  # 'x' and 'x.py' are one config
    for option, values in (('--configs', args.configs), ('--seeds', args.seeds)):
        repeated = sorted({str(v) for v in values if values.count(v) > 1})
        if repeated:
            parser.error(f'{option} names {", ".join(repeated)} more than once; each run would '
                         'be trained again over the one before (give each once)')
    for name in args.configs:
        if not config_path(name).is_file():
            parser.error(f'--configs: {config_path(name)} does not exist (the suite: '
                         f'{", ".join(SUITE)})')
        train_cfg = Config.fromfile(str(config_path(name))).get('train_cfg') or {}
        if 'max_iters' not in train_cfg:  # --max-iters, the hash and the estimate need it
            parser.error(f'--configs: {name} trains by epochs (train_cfg has no max_iters); the '
                         'suite runs the iteration-based zoo configs (the suite: '
                         f'{", ".join(SUITE)})')
    problem = folder_problem(args.work_root, '--work-root')
    if problem:  # found out before the first run, and by --dry-run
        parser.error(f'{problem}; give a folder for the runs')
    if any(seed < 0 for seed in args.seeds):
        parser.error(f'--seeds must be integers >= 0, got {args.seeds}')
    for field in ('max_iters', 'test_images'):
        value = getattr(args, field)
        if value is not None and value < 1:
            parser.error(f'--{field.replace("_", "-")} must be >= 1, got {value}')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    work_root = Path(args.work_root)
    plan, done = [], []
    estimates: Dict[str, float] = {}
    for config in args.configs:
        problem = cfg_options_problem(config, args.cfg_options)
        if problem:
            print(f'error: {problem}', file=sys.stderr)
            return 2
        expected = run_hash(config, args.max_iters, args.test_images, args.cfg_options)
        for seed in args.seeds:
            folder = run_dir(work_root, config, seed)
            try:
                record = check_folder(folder, expected, config)
            except SuiteError as error:
                print(f'error: {error}', file=sys.stderr)
                return 2
            if record is not None:
                done.append((config, seed, record))
                continue
            plan.append((config, seed, expected))
    for config, seed, record in done:  # measured times beat the estimate
        if record['status'] == COMPLETE:
            estimates.setdefault(config, record['train_seconds'] + record['test_seconds'])
    for config, _, _ in plan:
        if config not in estimates:
            estimates[config] = estimate_seconds(config, args.max_iters, args.test_images)
    total = sum(estimates[config] for config, _, _ in plan)
    print(f'{len(done)} run(s) finished already, {len(plan)} to run, estimated '
          f'{total / 60:.0f} min on the 2-core development machine')
    for config, seed, record in done:
        print(f'  done     {config} seed {seed}: {record["status"]}'
              + (f', top-1 {record["top1"]:.2f}' if record.get('top1') is not None else ''))
    for config, seed, _ in plan:
        print(f'  to run   {config} seed {seed} (~{estimates[config] / 60:.1f} min)')
    if args.dry_run:
        return 0
    for i, (config, seed, expected) in enumerate(plan, 1):
        print(f'[{i}/{len(plan)}] {config} seed {seed} ...', flush=True)
        try:
            record = run_one(config, seed, work_root, expected, args.max_iters,
                             args.test_images, args.cfg_options)
        except SuiteError as error:
            print(f'error: {error}', file=sys.stderr)
            return 1
        result = f'top-1 {record["top1"]:.2f}' if record['status'] == COMPLETE else \
            f'DIVERGED ({record["error"]})'
        print(f'[{i}/{len(plan)}] {config} seed {seed}: {result}; training '
              f'{record["train_seconds"]:.0f} s', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
