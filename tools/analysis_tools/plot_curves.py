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
lines with an ``iter``) are drawn against the iteration; validation scalars against mmengine's
``step``: the epoch for epoch-based runs (mmengine's default), else the iteration. A run that did
not log a metric is left out of that panel; a default metric no run logged is left out of the
figure. The PNG is written to a temporary file and renamed, so ``--out`` is never half-written.
"""
import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from mmpoly.fileio import atomic_savefig  # noqa: E402

DEFAULT_METRICS = ('loss', 'lr', 'accuracy/top1')
SCALARS = '*/vis_data/scalars.json'

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
    lines = path.read_text().splitlines()
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


def segment_series(records: Sequence[dict]) -> Tuple[Series, List[str], bool]:
    """(metric -> (xs, ys), the training metrics, whether training logged epochs) of one
    ``scalars.json``. Training lines (with ``iter``) are keyed by iteration, the others by
    ``step``; a metric on training lines takes only those."""
    train = [r for r in records if 'iter' in r]
    val = [r for r in records if 'iter' not in r and 'step' in r]
    train_metrics = sorted({k for r in train for k in r} - {'iter', 'epoch', 'step'})
    val_metrics = sorted({k for r in val for k in r} - {'step'} - set(train_metrics))
    series: Series = {}
    for metrics, lines, x_key in ((train_metrics, train, 'iter'), (val_metrics, val, 'step')):
        for metric in metrics:
            points = [(float(r[x_key]), float(r[metric])) for r in lines
                      if isinstance(r.get(metric), (int, float))]
            if points:
                series[metric] = ([x for x, _ in points], [y for _, y in points])
    return series, train_metrics, any('epoch' in r for r in train)


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
        series, train, logged_epochs = segment_series(read_records(scalars))
        train_metrics.update(train)
        by_epoch = by_epoch or logged_epochs
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
