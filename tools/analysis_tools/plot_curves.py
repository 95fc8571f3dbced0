"""Plot the training curves (loss, learning rate, validation accuracy) of one or more runs.

    python tools/analysis_tools/plot_curves.py work_dirs/pdc_run work_dirs/resnet_run \\
        --labels PDC ResNet --out curves.png
    python tools/analysis_tools/plot_curves.py work_dirs/main_job --metrics loss accuracy/top1

Each argument is a work_dir of ``tools/train.py``. The tool reads mmengine's
``<work_dir>/<timestamp>/vis_data/scalars.json`` (one JSON object per line, written by the
``LocalVisBackend`` of every mmpoly config). A resumed run (``--resume``) writes a new timestamp
folder, so all of them are read, oldest first, and joined: where a newer segment starts (its first
x of a metric), it replaces whatever the older ones logged from that x on. A resumed run thus
continues its curve, and a run started again from scratch in the same work_dir replaces the old
one.

One panel per metric (``--metrics``, default ``loss lr accuracy/top1``), one colour per run, the
legend is the run's label (``--labels``, default the work_dir's name). Training scalars (the
lines with an ``iter``) are drawn against the iteration; validation scalars against the epoch for
epoch-based runs (mmengine's ``step``) and against the iteration for iteration-based ones.
mmengine's ``LoggerHook`` logs a validation with ``step`` = the runner's epoch
(``log_metric_by_epoch=True``, its default), which stays 0 in an ``IterBasedTrainLoop``: there
each validation line is placed at the iteration it ran after (:func:`place_validations`), the
next validation iteration of the segment's schedule (``train_cfg``: ``val_interval``,
``val_begin``, ``max_iters``) at or after the training line logged before it, or that training
line's iteration where the schedule is unknown. Whether a segment is iteration-based comes from
the config mmengine dumps next to its ``scalars.json`` (``vis_data/config.py``: ``train_cfg``'s
``type`` or ``by_epoch``, and the logger's ``log_metric_by_epoch``), else from its training lines
(no ``epoch`` key: iteration-based). A run that did not log a metric is left out of that panel; a
default metric no run logged is left out of the figure. The PNG is written to a temporary file
and renamed, so ``--out`` is never half-written.
"""
import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from mmpoly.fileio import atomic_savefig  # noqa: E402
from mmpoly.utils.startup import out_file_problem  # noqa: E402

DEFAULT_METRICS = ('loss', 'lr', 'accuracy/top1')
SCALARS = '*/vis_data/scalars.json'
#: The config mmengine's LocalVisBackend dumps next to ``scalars.json``.
DUMPED_CONFIG = 'config.py'

#: metric -> (xs, ys), sorted by x
Series = Dict[str, Tuple[List[float], List[float]]]


@dataclass
class RunCurves:
    """The curves of one work_dir: every scalar it logged, and the x of its validation lines."""
    label: str
    work_dir: str
    series: Series = field(default_factory=dict)
    train_metrics: List[str] = field(default_factory=list)
    val_x: str = 'epoch'  # 'epoch' or 'iteration'


def scalars_files(work_dir: Path) -> List[Path]:
    """The ``<timestamp>/vis_data/scalars.json`` files of ``work_dir``, oldest first."""
    if not work_dir.is_dir():
        raise FileNotFoundError(f'plot_curves: work_dir {work_dir} is not a folder')
    files = sorted(work_dir.glob(SCALARS))  # mmengine's timestamps (%Y%m%d_%H%M%S) sort by time
    if not files:
        raise FileNotFoundError(f'plot_curves: no {work_dir / SCALARS} (was {work_dir} written '
                                'by tools/train.py with a LocalVisBackend?)')
    return files


def read_records(path: Path) -> List[dict]:
    """The JSON objects of a ``scalars.json``; a cut last line (a killed run) is ignored."""
    try:
        lines = path.read_text(encoding='utf-8').splitlines()
    except UnicodeDecodeError as exc:  # named, as a line that is not JSON is
        raise ValueError(f'plot_curves: {path} is not UTF-8 text (byte offset {exc.start}: '
                         f'{exc.reason})') from exc
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break
            raise ValueError(f'plot_curves: {path} line {number} is not JSON: {exc}') from exc
    return records


def _literal(node: ast.AST) -> Any:
    """The value of a literal of a dumped config (numbers, strings, lists, tuples, dicts,
    ``dict(...)`` calls); None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)
                if k is not None}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == 'dict' and not node.args:
        return {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg is not None}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    return None


def read_dumped_config(path: Path) -> Optional[Dict[str, Any]]:
    """``train_cfg`` and ``default_hooks`` of the config mmengine dumped as ``path`` (read, never
    executed); None when there is no such file or it is not Python."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    found: Dict[str, Any] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and \
                isinstance(statement.targets[0], ast.Name) and \
                statement.targets[0].id in ('train_cfg', 'default_hooks'):
            found[statement.targets[0].id] = _literal(statement.value)
    return found


@dataclass(frozen=True)
class Schedule:
    """How a segment's run validates, as far as its dumped config tells.

    ``kind``: 'epoch', 'iteration' or None (unknown). ``step_is_iteration``: the validation
    lines' ``step`` already is the iteration (an iteration-based run whose ``LoggerHook`` has
    ``log_metric_by_epoch=False``). ``val_interval`` / ``val_begin`` / ``max_iters``: the
    ``train_cfg`` of an iteration-based run (None where unknown); mmengine's
    ``IterBasedTrainLoop`` validates after iteration i when i >= val_begin and
    (i % val_interval == 0 or i == max_iters).
    """
    kind: Optional[str] = None
    step_is_iteration: bool = False
    val_interval: Optional[int] = None
    val_begin: int = 1
    max_iters: Optional[int] = None

    def at_or_after(self, i: int) -> Optional[int]:
        """The first validation iteration >= ``i``; None if unknown or past ``max_iters``."""
        if self.val_interval is None:
            return None
        i = max(i, self.val_begin, 1)
        multiple = -(-i // self.val_interval) * self.val_interval
        if self.max_iters is not None and multiple > self.max_iters:
            return self.max_iters if i <= self.max_iters else None
        return multiple

    def last_before(self, i: int, count: int) -> Optional[List[int]]:
        """The last ``count`` validation iterations < ``i``, in order; None if unknown."""
        if self.val_interval is None:
            return None
        below = [v for v in range((i - 1) // self.val_interval * self.val_interval, 0,
                                  -self.val_interval)[:count] if v >= self.val_begin]
        return below[::-1] if len(below) == count else None


def _positive_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def schedule_of(config: Optional[Dict[str, Any]], train: Sequence[dict]) -> Schedule:
    """The :class:`Schedule` of a segment, from its dumped config (``read_dumped_config``), else
    from its training lines: with an ``epoch`` key epoch-based, without iteration-based, none:
    unknown."""
    train_cfg = (config or {}).get('train_cfg')
    kind = None
    if isinstance(train_cfg, dict):
        loop = train_cfg.get('type')
        if isinstance(loop, str):
            loop = loop.rsplit('.', 1)[-1]
            kind = {'IterBasedTrainLoop': 'iteration', 'EpochBasedTrainLoop': 'epoch'}.get(loop)
        elif isinstance(train_cfg.get('by_epoch'), bool):
            kind = 'epoch' if train_cfg['by_epoch'] else 'iteration'
    if kind is None:
        if train:
            kind = 'epoch' if any('epoch' in r for r in train) else 'iteration'
        return Schedule(kind)
    if kind == 'epoch':
        return Schedule(kind)
    logger = ((config or {}).get('default_hooks') or {}).get('logger')
    by_epoch = logger.get('log_metric_by_epoch', True) if isinstance(logger, dict) else True
    dynamic = train_cfg.get('dynamic_intervals')
    val_begin = _positive_int(train_cfg.get('val_begin')) or 1
    return Schedule(kind, step_is_iteration=by_epoch is False,
                    val_interval=None if dynamic else _positive_int(
                        train_cfg.get('val_interval', 1000)),
                    val_begin=val_begin, max_iters=_positive_int(train_cfg.get('max_iters')))


def place_validations(records: Sequence[dict], schedule: Schedule) -> List[float]:
    """The x of each validation line of a segment (the lines without ``iter`` that have a
    ``step``), in order: the ``step`` for an epoch-based or unknown run; for an iteration-based
    one the iteration the validation ran after. A group of validation lines after the training
    line of iteration t takes the next validation iterations of the schedule from t on (t itself
    where the schedule is unknown, or the ``step`` where it is already an iteration, whichever
    is larger); a group before the segment's first training line takes the last validation
    iterations before that line's; without any training line the schedule's first ones."""
    kinds = ['train' if 'iter' in r else 'val' if 'step' in r else None for r in records]
    xs: List[float] = []
    if schedule.kind != 'iteration' or schedule.step_is_iteration:
        return [float(r['step']) for r, k in zip(records, kinds) if k == 'val']
    i = 0
    while i < len(records):
        if kinds[i] != 'val':
            i += 1
            continue
        end = i
        while end < len(records) and kinds[end] != 'train':
            end += 1
        group = [r for r, k in zip(records[i:end], kinds[i:end]) if k == 'val']
        before = [r['iter'] for r, k in zip(records[:i], kinds[:i]) if k == 'train']
        prev = before[-1] if before else None
        nxt = records[end]['iter'] if end < len(records) else None
        placed: Optional[List[int]] = None
        if prev is None and nxt is not None:
            placed = schedule.last_before(nxt, len(group))
        elif schedule.val_interval is not None:
            placed, lower = [], prev or 0
            for _ in group:
                x = schedule.at_or_after(lower)
                if x is None:
                    placed = None
                    break
                placed.append(x)
                lower = x + 1
        if placed is None:  # the schedule is unknown: the training line's iteration
            placed = [max(float(r['step']), prev or 0) for r in group]
        xs += [float(x) for x in placed]
        i = end
    return xs


def segment_series(records: Sequence[dict],
                   schedule: Optional[Schedule] = None) -> Tuple[Series, List[str], Schedule]:
    """(metric -> (xs, ys), the training metrics, the segment's schedule) of one
    ``scalars.json``. Training lines (with ``iter``) are keyed by iteration, validation lines
    by :func:`place_validations` (``schedule``: default from the training lines, see
    :func:`schedule_of`); a metric on training lines takes only those."""
    train = [r for r in records if 'iter' in r]
    val = [r for r in records if 'iter' not in r and 'step' in r]
    schedule = schedule if schedule is not None else schedule_of(None, train)
    val_xs = place_validations(records, schedule)
    train_metrics = sorted({k for r in train for k in r} - {'iter', 'epoch', 'step'})
    val_metrics = sorted({k for r in val for k in r} - {'step'} - set(train_metrics))
    series: Series = {}
    for metrics, lines, xs in ((train_metrics, train, [float(r['iter']) for r in train]),
                               (val_metrics, val, val_xs)):
        for metric in metrics:
            points = [(x, float(r[metric])) for x, r in zip(xs, lines)
                      if isinstance(r.get(metric), (int, float))]
            if points:
                series[metric] = ([x for x, _ in points], [y for _, y in points])
    return series, train_metrics, schedule


def join_segments(older: Tuple[List[float], List[float]],
                  newer: Tuple[List[float], List[float]]) -> Tuple[List[float], List[float]]:
    """``older`` up to where ``newer`` starts, then ``newer``; sorted by x."""
    start = min(newer[0])
    kept = [(x, y) for x, y in zip(*older) if x < start]
    points = sorted(kept + list(zip(*newer)), key=lambda p: p[0])
    return [x for x, _ in points], [y for _, y in points]


def load_run(work_dir: str, label: Optional[str] = None) -> RunCurves:
    """The curves of ``work_dir``, all its timestamp segments joined (see the module doc)."""
    path = Path(work_dir)
    run = RunCurves(label=label or path.resolve().name, work_dir=work_dir)
    train_metrics = set()
    by_epoch = False
    for scalars in scalars_files(path):
        records = read_records(scalars)
        schedule = schedule_of(read_dumped_config(scalars.parent / DUMPED_CONFIG),
                               [r for r in records if 'iter' in r])
        series, train, _ = segment_series(records, schedule)
        train_metrics.update(train)
        by_epoch = by_epoch or schedule.kind == 'epoch'
        for metric, newer in series.items():
            older = run.series.get(metric)
            run.series[metric] = join_segments(older, newer) if older else newer
    run.train_metrics = sorted(train_metrics)
    run.val_x = 'epoch' if by_epoch else 'iteration'
    return run


def select_metrics(runs: Sequence[RunCurves], metrics: Optional[Sequence[str]]) -> List[str]:
    """The panels to draw: ``metrics`` (each must be logged by some run), or the default ones
    that some run logged."""
    logged = sorted({m for run in runs for m in run.series})
    if metrics:
        missing = [m for m in metrics if m not in logged]
        if missing:
            raise ValueError(f'plot_curves: --metrics {", ".join(missing)}: no run logged it; '
                             f'the runs logged: {", ".join(logged) or "nothing"}')
        return list(metrics)
    chosen = [m for m in DEFAULT_METRICS if m in logged]
    if not chosen:
        raise ValueError(f'plot_curves: no run logged any of {", ".join(DEFAULT_METRICS)}; '
                         f'choose --metrics among: {", ".join(logged) or "nothing"}')
    return chosen


def x_label(runs: Sequence[RunCurves], metric: str) -> str:
    """'iteration' for a training metric; for a validation metric the runs' x ('epoch' or
    'iteration', both when they differ)."""
    kinds = sorted({'iteration' if metric in run.train_metrics else run.val_x
                    for run in runs if metric in run.series})
    return ' / '.join(kinds)


def plot_curves(runs: Sequence[RunCurves], metrics: Sequence[str],
                title: Optional[str] = None) -> Figure:
    """A figure with one panel per metric and one line per run that logged it (legend: the
    run's label, one colour per run in every panel)."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for i, run in enumerate(runs):
            if metric in run.series:
                xs, ys = run.series[metric]
                ax.plot(xs, ys, label=run.label, color=f'C{i % 10}',
                        marker='o' if len(xs) < 30 else None, markersize=3)
        ax.set_title(metric)
        ax.set_xlabel(x_label(runs, metric))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations and epochs
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def save_png(fig: Figure, out: str) -> None:
    """Write ``fig`` to ``out`` as a PNG, atomically (:func:`mmpoly.fileio.atomic_savefig`)."""
    atomic_savefig(fig, out, dpi=100, format='png')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Plot loss, learning rate and accuracy curves '
                                     'of one or more work_dirs on one figure')
    parser.add_argument('work_dirs', nargs='+', help='work_dirs of tools/train.py')
    parser.add_argument('--labels', nargs='+', help='legend labels, one per work_dir '
                        '(default: the work_dir names)')
    parser.add_argument('--metrics', nargs='+', help='scalars to plot, one panel each '
                        f'(default: those of {" ".join(DEFAULT_METRICS)} that were logged)')
    parser.add_argument('--out', default='curves.png', help='the PNG to write')
    parser.add_argument('--title', help='the figure title')
    args = parser.parse_args(argv)
    if args.labels is not None and len(args.labels) != len(args.work_dirs):
        parser.error(f'--labels: got {len(args.labels)} labels for {len(args.work_dirs)} '
                     'work_dirs; give one per work_dir')
    if Path(args.out).suffix.lower() != '.png':
        parser.error(f'--out {args.out}: must end in .png')
    problem = out_file_problem(args.out, '--out')
    if problem:  # written after the logs are read and plotted: checked first
        parser.error(f'{problem}; give the PNG file to write, in a writable folder')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    labels = args.labels or [None] * len(args.work_dirs)
    try:
        runs = [load_run(work_dir, label) for work_dir, label in zip(args.work_dirs, labels)]
        metrics = select_metrics(runs, args.metrics)
    except (FileNotFoundError, ValueError) as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 1
    for run in runs:
        absent = [m for m in metrics if m not in run.series]
        if absent:
            print(f'note: {run.work_dir} did not log {", ".join(absent)}', file=sys.stderr)
    fig = plot_curves(runs, metrics, args.title)
    save_png(fig, args.out)
    plt.close(fig)
    print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
