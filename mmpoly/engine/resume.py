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
  :class:`ResumeError` listing every file and its reason. With no candidate at all a new run
  starts and says so: from ``new_run_load_from`` where given (``tools/train.py --resume`` passes
  the config's own ``load_from``, which the flag replaces), else from scratch.
* explicit (``load_from=PATH``): the file must load and fit, else :class:`ResumeError` says what
  is missing.

A ``last_checkpoint`` naming a file in another folder than the work_dir (or the checkpoint
hook's ``out_dir``) comes from a work_dir that was copied or moved: the file of that name in
this work_dir is tried instead, or, without one, the name is skipped with the reason (resuming
another folder's checkpoint would continue another run).

The chosen checkpoint must also belong to a run that the config continues
(:func:`run_problems`): a run that is finished (its ``meta`` epoch or iteration has reached
``train_cfg.max_epochs`` / ``max_iters``: a resumed run would train nothing), or whose
``optim_wrapper.optimizer`` or ``param_scheduler`` differ from the config's (mmengine restores
the checkpoint's optimizer and scheduler state, learning rate and schedule included, over the
new settings, which would have no effect), is refused with :class:`ResumeError`, which says how
to proceed: a new run in another work_dir, or ``load_from`` to fine-tune from the weights. The
settings are read from the config text mmengine stores in ``meta['cfg']``, parsed without
running it (:func:`saved_config_values`); keys it cannot read are not compared.

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
import ast
import glob
import logging
import numbers
import os.path as osp
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch.nn as nn
from mmengine.dist import broadcast_object_list, is_main_process
from mmengine.logging import print_log
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader

from .checkpoint import compare_state_dict

__all__ = ['ResumeError', 'find_resume_candidates', 'resume_problems', 'run_problems',
           'saved_config_values', 'checkpoint_folder', 'select_checkpoint', 'prepare_resume']

_STEP_CHECKPOINT = re.compile(r'^(epoch|iter)_(\d+)\.pth$')
_SKIPPED = '--resume skipped '
_MAX_LISTED_KEYS = 8


class ResumeError(RuntimeError):
    """No checkpoint can be resumed; the message lists each file and why."""


def _is_local(path: str) -> bool:
    return '://' not in path


def checkpoint_folder(work_dir: str, cfg: Optional[Mapping] = None) -> str:
    """Where the run's checkpoint hook writes: ``work_dir``, or with
    ``default_hooks.checkpoint.out_dir`` set, ``<out_dir>/<work_dir's name>`` (mmengine's
    ``CheckpointHook``)."""
    hooks = (cfg or {}).get('default_hooks') or {}
    out_dir = (hooks.get('checkpoint') or {}).get('out_dir') if isinstance(hooks, Mapping) \
        else None
    if not out_dir or osp.realpath(out_dir) == osp.realpath(work_dir):
        return work_dir
    return osp.join(out_dir, osp.basename(work_dir.rstrip(osp.sep)))


def _in_folder(path: str, folder: str) -> bool:
    return osp.realpath(osp.dirname(osp.abspath(path))) == osp.realpath(folder)


def find_resume_candidates(work_dir: str, notes: Optional[List[str]] = None,
                           folder: Optional[str] = None) -> List[Tuple[str, str]]:
    """The checkpoints auto resume tries, in order, as ``(path, where it was found)``.

    First the file ``last_checkpoint`` names, then ``epoch_*.pth`` / ``iter_*.pth`` in
    ``folder`` (the checkpoint folder, default ``work_dir``) by modification time, newest first
    (ties: higher step first). A local file named by ``last_checkpoint`` in another folder (a
    copied or moved work_dir) is replaced by ``folder``'s file of the same name, or skipped if
    there is none; either decision is appended to ``notes`` (logged as a warning without it).
    """
    folder = work_dir if folder is None else folder
    candidates: List[Tuple[str, str]] = []
    pointer = osp.join(work_dir, 'last_checkpoint')

    def note(text: str) -> None:
        if notes is None:
            print_log(text, logger='current', level=logging.WARNING)
        else:
            notes.append(text)

    if osp.isfile(pointer):
        with open(pointer, encoding='utf-8') as f:
            named = f.read().strip()
        if named and _is_local(named) and not _in_folder(named, folder):
            own = osp.join(folder, osp.basename(named))
            moved = (f'last_checkpoint names {named}, in another folder than {folder} (was the '
                     'work_dir copied or moved?)')
            if osp.isfile(own):
                candidates.append((own, f'the file of that name in {folder}; last_checkpoint '
                                        f'names {named} in another folder'))
                note(f'--resume: {moved}; trying the file of that name here, {own}, instead')
            else:
                note(f'{_SKIPPED}{named} (named by last_checkpoint): {moved}, and '
                     f'{folder} has no {osp.basename(named)}; resuming it would continue '
                     'another folder\'s run')
        elif named:
            candidates.append((named, 'named by last_checkpoint'))
    steps = []
    for path in glob.glob(osp.join(glob.escape(folder), '*.pth')):
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


class _Unreadable(ValueError):
    """A config text expression that is not a plain literal."""


def _literal(node: ast.AST) -> Any:
    """The value of a literal expression of a config text: constants, lists, tuples (as
    lists), dicts and ``dict(key=value, ...)`` calls, as mmengine's ``pretty_text`` writes
    them; nothing is run."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == 'dict' and not node.args and \
            all(keyword.arg is not None for keyword in node.keywords):
        return {keyword.arg: _literal(keyword.value) for keyword in node.keywords}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise _Unreadable(ast.dump(node)[:80])


def saved_config_values(text: Any) -> Dict[str, Any]:
    """The top-level keys of a config text (``meta['cfg']`` of an mmengine checkpoint) whose
    values are plain literals (:func:`_literal`), read without running the text: a checkpoint
    is data, and its config text could hold any code. {} if ``text`` is not a config text."""
    if not isinstance(text, str):
        return {}
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = _literal(node.value)
            except (_Unreadable, TypeError):
                continue
    return values


def _plain(value: Any) -> Any:
    """``value`` with mappings as dicts and tuples as lists, to compare with a parsed text."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


_NOT_SET = object()


def _show(value: Any, width: int = 60) -> str:
    text = '(not set)' if value is _NOT_SET else repr(value)
    return text if len(text) <= width else text[:width - 3] + '...'


def _changes(old: Any, new: Any, key: str) -> List[str]:
    """``KEY: OLD -> NEW`` for each leaf that differs between ``old`` and ``new``."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for name in sorted(set(old) | set(new), key=str)
                for change in _changes(old.get(name, _NOT_SET), new.get(name, _NOT_SET),
                                       f'{key}.{name}')]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [change for i, (a, b) in enumerate(zip(old, new))
                for change in _changes(a, b, f'{key}.{i}')]
    if old is not _NOT_SET and new is not _NOT_SET and old == new:
        return []
    return [f'{key}: {_show(old)} -> {_show(new)}']


def run_problems(meta: Any, cfg: Mapping) -> List[str]:
    """Why resuming a checkpoint with ``meta`` under ``cfg`` would be wrong; [] if nothing.

    * its run is finished: ``meta['epoch']`` has reached ``train_cfg.max_epochs``, or
      ``meta['iter']`` ``train_cfg.max_iters`` (a resumed run would train nothing);
    * ``optim_wrapper.optimizer`` or ``param_scheduler`` differ from the checkpoint's config
      (``meta['cfg']``, read by :func:`saved_config_values`; not compared where unreadable):
      mmengine restores the checkpoint's optimizer and scheduler state over the new settings.
      The changed keys are listed with both values.
    """
    if not isinstance(meta, Mapping):
        return []
    problems = []
    train_cfg = cfg.get('train_cfg') or {}
    for limit_key, counter in (('max_epochs', 'epoch'), ('max_iters', 'iter')):
        limit, done = train_cfg.get(limit_key), meta.get(counter)
        if isinstance(limit, numbers.Real) and isinstance(done, numbers.Real) and \
                not isinstance(done, bool) and done >= limit:
            problems.append(f'its run is finished: it was saved at {counter} {done}, and the '
                            f'config trains to train_cfg.{limit_key}={limit}, so a resumed run '
                            f'would train nothing (to train longer, raise '
                            f'train_cfg.{limit_key})')
    saved = saved_config_values(meta.get('cfg'))
    optim_old = saved.get('optim_wrapper')
    optim_new = _plain(cfg.get('optim_wrapper') or {})
    if isinstance(optim_old, dict) and 'optimizer' in optim_old:
        changed = _changes(optim_old['optimizer'], optim_new.get('optimizer', _NOT_SET),
                           'optim_wrapper.optimizer')
        if changed:
            problems.append(f'the optimizer settings changed since the checkpoint was saved '
                            f'({"; ".join(changed)}): a resumed run continues with the '
                            "checkpoint's optimizer state, its learning rate, momentum and "
                            'weight decay included, so the new settings would not take effect')
    if 'param_scheduler' in saved:
        changed = _changes(saved['param_scheduler'], _plain(cfg.get('param_scheduler')),
                           'param_scheduler')
        if changed:
            problems.append(f'the learning-rate schedule changed since the checkpoint was saved '
                            f'({"; ".join(changed)}): a resumed run continues with the '
                            "checkpoint's scheduler state (begin, end, T_max, milestones, ...), "
                            'so the new schedule would not take effect')
    return problems


def _check(path: str, model: nn.Module) -> Tuple[Optional[str], Any]:
    """Why ``path`` cannot be resumed (None if it can), and its ``meta``."""
    if _is_local(path) and not osp.isfile(path):
        return 'no such file', None
    try:
        checkpoint = CheckpointLoader.load_checkpoint(path, map_location='cpu')
    except Exception as error:  # noqa: BLE001 - any load failure disqualifies the file
        first_line = (str(error).strip().splitlines() or [''])[0]
        return f'does not load ({type(error).__name__}: {first_line})', None
    problems = resume_problems(checkpoint, model)
    return ('; '.join(problems) if problems else None), checkpoint.get('meta')


def _refuse_run_problems(path: str, meta: Any, cfg: Optional[Mapping]) -> None:
    """Raise :class:`ResumeError` if ``cfg`` must not continue the run of ``path``."""
    problems = run_problems(meta, cfg) if cfg is not None else []
    if problems:
        raise ResumeError(f'cannot resume from {path}: ' + '; '.join(problems)
                          + '. To train again, start a new run in another --work-dir (without '
                          '--resume); to fine-tune from its weights, start one with '
                          f'--cfg-options load_from={path}.')


def select_checkpoint(work_dir: str, load_from: Optional[str], model: nn.Module,
                      logger: Any, cfg: Optional[Mapping] = None,
                      new_run_load_from: Optional[str] = None) -> Optional[str]:
    """The checkpoint to resume from (see the module docstring), or None to start afresh.

    With ``cfg`` (the run's config) the chosen checkpoint must also pass :func:`run_problems`,
    and its checkpoint folder is the hook's ``out_dir`` where set (:func:`checkpoint_folder`).
    ``new_run_load_from`` only changes the log line of a work_dir without checkpoints: the new
    run starts from it instead of from scratch (:func:`prepare_resume` loads it).

    Raises:
        ResumeError: ``load_from`` cannot be resumed, or no candidate of the work_dir can, or
            the chosen one belongs to a finished run or to other optimizer or schedule settings.
    """
    if load_from is not None:
        reason, meta = _check(load_from, model)
        if reason is not None:
            raise ResumeError(f'cannot resume from {load_from}: {reason}')
        _refuse_run_problems(load_from, meta, cfg)
        return load_from
    notes: List[str] = []
    candidates = find_resume_candidates(work_dir, notes, checkpoint_folder(work_dir, cfg))
    skipped = [line[len(_SKIPPED):] for line in notes if line.startswith(_SKIPPED)]
    for line in notes:
        if not line.startswith(_SKIPPED):
            logger.warning(line)
    if not candidates and not skipped:
        start = ('training from scratch' if new_run_load_from is None else
                 f'starting a new run from the config\'s load_from {new_run_load_from}')
        logger.info(f'--resume: no checkpoint (last_checkpoint, epoch_*.pth, iter_*.pth) in '
                    f'{work_dir}; {start}.')
        return None
    for path, origin in candidates:
        reason, meta = _check(path, model)
        if reason is None:
            for line in skipped:
                logger.warning(f'{_SKIPPED}{line}')
            _refuse_run_problems(path, meta, cfg)
            logger.info(f'Auto resumed from the latest checkpoint {path}.')
            return path
        skipped.append(f'{path} ({origin}): {reason}')
    raise ResumeError(f'--resume found checkpoints in {work_dir} but none can be resumed:\n  '
                      + '\n  '.join(skipped)
                      + '\nDelete or move the broken files, or pass --resume PATH.')


def prepare_resume(runner: Runner, new_run_load_from: Optional[str] = None) -> None:
    """Choose the checkpoint a ``resume=True`` runner resumes from, before ``runner.train()``.

    Rank 0 decides (with the runner's config: :func:`run_problems`) and broadcasts the
    decision, so every rank resumes the same file or raises the same :class:`ResumeError`. Sets
    the runner's ``_load_from`` (mmengine then calls ``Runner.resume`` on it) or, with no
    checkpoint at all, turns resuming off and starts a new run: from ``new_run_load_from``
    where given (mmengine then loads its weights, as for a run without ``--resume``), else from
    scratch.
    """
    if not runner._resume:
        return
    decision: Dict[str, Optional[str]] = dict(path=None, error=None)
    if is_main_process():
        try:
            decision['path'] = select_checkpoint(runner.work_dir, runner._load_from,
                                                 runner.model, runner.logger, runner.cfg,
                                                 new_run_load_from)
        except ResumeError as error:
            decision['error'] = str(error)
    shared = [decision]
    broadcast_object_list(shared)
    decision = shared[0]
    if decision['error'] is not None:
        raise ResumeError(decision['error'])
    if decision['path'] is None:
        runner._resume = False
        runner._load_from = new_run_load_from
        return
    runner._load_from = decision['path']
