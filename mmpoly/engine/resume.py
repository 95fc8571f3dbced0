"""Honest ``--resume``: resume from a checkpoint that loads and fits, or stop with the reasons.

mmengine 0.10.7's auto resume reads ``<work_dir>/last_checkpoint`` and nothing else: without that
file it logs ``Auto resumed from the latest checkpoint None.`` and trains from scratch next to
the checkpoints, and a truncated file ends in an unpickling error. ``--resume PATH`` with a
checkpoint of another model silently loads what fits (``strict=False``), and a bare state dict
ends in ``KeyError: 'meta'``.

:func:`prepare_resume` (called by :func:`mmpoly.engine.build_runner` when ``resume=True``) picks
the checkpoint before training starts:

* auto (``resume=True``, ``load_from=None``): the candidates are the file named by
  ``last_checkpoint``, then ``epoch_*.pth`` / ``iter_*.pth`` in the work_dir, newest
  (modification time) first. The first one that loads and fits the model is resumed; each
  skipped file is logged with its reason. If none qualifies the run stops with
  :class:`ResumeError` listing every file and its reason. With no candidate at all the run
  starts from scratch and says so.
* explicit (``load_from=PATH``): the file must load and fit, else :class:`ResumeError` says what
  is missing.

"Fits" means: a dict with ``meta`` (holding ``epoch`` and ``iter``), ``optimizer`` and a
``state_dict`` without missing, unexpected or mis-shaped keys as
:func:`mmpoly.engine.checkpoint.compare_state_dict` counts them (a ``module.`` prefix removed,
as mmengine does). To start from weights only, use ``load_from`` without ``--resume``.

Mid-epoch checkpoints (an ``iter``-interval ``CheckpointHook``, ``by_epoch=False``, in
epoch-based training): mmengine 0.10.7 restores the epoch and iteration counters but its
``EpochBasedTrainLoop`` runs the interrupted epoch again from its first batch, so the batches
before the checkpoint are trained twice (the same ones: ``DefaultSampler`` shuffles by seed and
epoch), the iteration counter ends above ``max_iters`` by that many batches (later
``iter_*.pth`` files are named by it), and the ETA ``IterTimerHook`` computes,
``time * (max_iters - iter - 1)``, goes negative over those last batches (the log truncates it
to whole seconds: ``0:00:00``, then ``-1 day, 23:59:59`` and below once it passes -1 s).
Resuming from ``epoch_*.pth`` is exact.
"""
import glob
import os.path as osp
import re
from typing import Any, Dict, List, Optional, Tuple

import torch.nn as nn
from mmengine.dist import broadcast_object_list, is_main_process
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader

from .checkpoint import compare_state_dict

__all__ = ['ResumeError', 'find_resume_candidates', 'resume_problems', 'select_checkpoint',
           'prepare_resume']

_STEP_CHECKPOINT = re.compile(r'^(epoch|iter)_(\d+)\.pth$')
_MAX_LISTED_KEYS = 8


class ResumeError(RuntimeError):
    """No checkpoint can be resumed; the message lists each file and why."""


def _is_local(path: str) -> bool:
    return '://' not in path


def find_resume_candidates(work_dir: str) -> List[Tuple[str, str]]:
    """The checkpoints auto resume tries, in order, as ``(path, where it was found)``.

    First the file ``last_checkpoint`` names, then ``epoch_*.pth`` / ``iter_*.pth`` in
    ``work_dir`` by modification time, newest first (ties: higher step first).
    """
    candidates: List[Tuple[str, str]] = []
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer, encoding='utf-8') as f:
            named = f.read().strip()
        if named:
            candidates.append((named, 'named by last_checkpoint'))
    steps = []
    for path in glob.glob(osp.join(glob.escape(work_dir), '*.pth')):
        match = _STEP_CHECKPOINT.match(osp.basename(path))
        if match and osp.isfile(path):
            steps.append((osp.getmtime(path), int(match.group(2)), path))
    seen = {osp.realpath(p) for p, _ in candidates if _is_local(p)}
    for _, _, path in sorted(steps, reverse=True):
        if osp.realpath(path) not in seen:
            candidates.append((path, 'in the work_dir'))
    return candidates


def resume_problems(checkpoint: Any, model: nn.Module) -> List[str]:
    """What keeps ``checkpoint`` (a loaded object) from resuming ``model``; [] if nothing."""
    if not isinstance(checkpoint, dict):
        return [f'it holds a {type(checkpoint).__name__}, not a training checkpoint dict']
    if 'state_dict' not in checkpoint and 'meta' not in checkpoint:
        return ["it is a bare state dict (no 'meta', 'state_dict', 'optimizer'): not a "
                'checkpoint written by training; use load_from without --resume to start from '
                'its weights']
    problems = []
    meta = checkpoint.get('meta')
    if not isinstance(meta, dict):
        problems.append("it has no 'meta' (epoch and iteration to continue from)")
    else:
        missing = [key for key in ('epoch', 'iter') if key not in meta]
        if missing:
            problems.append(f"its 'meta' lacks {missing}")
    if 'optimizer' not in checkpoint:
        problems.append("it has no 'optimizer' state (saved with save_optimizer=False?)")
    if not isinstance(checkpoint.get('state_dict'), dict):
        problems.append("it has no 'state_dict'")
        return problems
    mismatch = compare_state_dict(model, checkpoint)
    if mismatch:
        problems.append('its state_dict does not fit the model: '
                        + mismatch.describe(_MAX_LISTED_KEYS))
    return problems


def _check(path: str, model: nn.Module) -> Optional[str]:
    """Why ``path`` cannot be resumed, or None if it can."""
    if _is_local(path) and not osp.isfile(path):
        return 'no such file'
    try:
        checkpoint = CheckpointLoader.load_checkpoint(path, map_location='cpu')
    except Exception as error:  # noqa: BLE001 - any load failure disqualifies the file
        first_line = (str(error).strip().splitlines() or [''])[0]
        return f'does not load ({type(error).__name__}: {first_line})'
    problems = resume_problems(checkpoint, model)
    return '; '.join(problems) if problems else None


def select_checkpoint(work_dir: str, load_from: Optional[str], model: nn.Module,
                      logger: Any) -> Optional[str]:
    """The checkpoint to resume from (see the module docstring), or None to start afresh.

    Raises:
        ResumeError: ``load_from`` cannot be resumed, or no candidate of the work_dir can.
    """
    if load_from is not None:
        reason = _check(load_from, model)
        if reason is not None:
            raise ResumeError(f'cannot resume from {load_from}: {reason}')
        return load_from
    candidates = find_resume_candidates(work_dir)
    if not candidates:
        logger.info(f'--resume: no checkpoint (last_checkpoint, epoch_*.pth, iter_*.pth) in '
                    f'{work_dir}; training from scratch.')
        return None
    skipped: List[str] = []
    for path, origin in candidates:
        reason = _check(path, model)
        if reason is None:
            for line in skipped:
                logger.warning(f'--resume skipped {line}')
            logger.info(f'Auto resumed from the latest checkpoint {path}.')
            return path
        skipped.append(f'{path} ({origin}): {reason}')
    raise ResumeError(f'--resume found checkpoints in {work_dir} but none can be resumed:\n  '
                      + '\n  '.join(skipped)
                      + '\nDelete or move the broken files, or pass --resume PATH.')


def prepare_resume(runner: Runner) -> None:
    """Choose the checkpoint a ``resume=True`` runner resumes from, before ``runner.train()``.

    Rank 0 decides and broadcasts the decision, so every rank resumes the same file or raises
    the same :class:`ResumeError`. Sets the runner's ``_load_from`` (mmengine then calls
    ``Runner.resume`` on it) or, with no checkpoint at all, turns resuming off.
    """
    if not runner._resume:
        return
    decision: Dict[str, Optional[str]] = dict(path=None, error=None)
    if is_main_process():
        try:
            decision['path'] = select_checkpoint(runner.work_dir, runner._load_from,
                                                 runner.model, runner.logger)
        except ResumeError as error:
            decision['error'] = str(error)
    shared = [decision]
    broadcast_object_list(shared)
    decision = shared[0]
    if decision['error'] is not None:
        raise ResumeError(decision['error'])
    if decision['path'] is None:
        runner._resume = False
    runner._load_from = decision['path']
