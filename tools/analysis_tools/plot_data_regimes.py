"""Plot accuracy against the training-data regime of finished runs (arXiv:2104.07916 §4.4,
Table "CIFAR10-LT", and the appendix figure "Image classification with limited data").

    python tools/analysis_tools/plot_data_regimes.py work_dirs/ --out data_regimes.png
    python tools/analysis_tools/plot_data_regimes.py work_dirs/a work_dirs/b --metric accuracy/top1

Each argument is a work_dir of ``tools/train.py`` or a folder of work_dirs, searched up to
:data:`MAX_DEPTH` levels down (the model zoo's ``work_dirs/zoo``, whose runs are
``<config>/seed<S>/``, works as it is). A work_dir is a folder with a
``<timestamp>/vis_data/scalars.json`` or a ``test_metrics.json``. For every work_dir the tool
reads the accuracy (``--metric``, default ``accuracy/top1``): from ``test_metrics.json`` where
there is one (``tools/test.py --out test_metrics.json --out-item metrics``, what
``tools/model_zoo/run_suite.py`` writes: its runs train with ``--no-validate``, so their
``scalars.json`` has no accuracy), else the last value in mmengine's
``<work_dir>/<timestamp>/vis_data/scalars.json`` (the newest timestamp that has one); and the
config dumped as ``<work_dir>/<config name>.py``: the ``LongTailedDataset``'s
``imbalance_factor`` or the ``LimitedDataset``'s ``images_per_class`` of its training set. The
model is the config name up to its batch field ``_<N>xb<M>_`` or ``_<N>xb<M>-<schedule>_``
(``pdc-comp_resnet18_1xb128_cifar10-lt-if100`` gives ``pdc-comp_resnet18``,
``pdc_resnet8_1xb128-1400i_fashion-mnist-lt-if100`` gives ``pdc_resnet8``). Runs of one model
at one x (e.g. the zoo's seeds) are averaged.

The figure has two panels, accuracy vs imbalance factor and accuracy vs images per class, both
with a log x axis, one line per model. Work_dirs without an accuracy (an unfinished run, a zoo
run recorded as diverged in its ``suite_record.json``) or without either wrapper are listed and
skipped. Exit status: 0 when a figure was written, 1 when no run fitted.
"""
import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backend_bases import FigureCanvasBase  # noqa: E402
from mmengine.config import Config  # noqa: E402

from mmpoly.fileio import atomic_savefig  # noqa: E402

#: regime -> (the wrapper's type, its parameter, axis label)
REGIMES: Dict[str, Tuple[str, str, str]] = {
    'imbalance_factor': ('LongTailedDataset', 'imbalance_factor', 'imbalance factor'),
    'images_per_class': ('LimitedDataset', 'images_per_class', 'training images per class'),
}
#: ``{model}_{N}xb{M}_{data}`` or ``{model}_{N}xb{M}-{schedule}_{data}`` (the zoo's ``1400i``).
MODEL_NAME = re.compile(r'^(?P<model>.+?)_\d+xb\d+(?:-[^_]+)?_.+$')
#: How many folder levels below an argument work_dirs are looked for.
MAX_DEPTH = 4
#: The test metrics of a run (tools/model_zoo/run_suite.py; tools/test.py --out-item metrics).
TEST_METRICS = 'test_metrics.json'
#: The run record of a zoo run (its status: complete, diverged, failed).
SUITE_RECORD = 'suite_record.json'

#: regime -> model -> (xs, ys), sorted by x
PlotData = Dict[str, Dict[str, Tuple[List[float], List[float]]]]


@dataclass(frozen=True)
class Run:
    """One finished run: its model, data regime and x (IF or images per class), and accuracy."""
    work_dir: str
    model: str
    regime: str
    x: float
    accuracy: float


def last_metric(work_dir: Path, metric: str = 'accuracy/top1') -> Optional[float]:
    """The last value of ``metric`` in the newest ``<timestamp>/vis_data/scalars.json`` of
    ``work_dir`` that logs it; None if no run logged it."""
    for scalars in sorted(work_dir.glob('*/vis_data/scalars.json'), reverse=True):
        value = None
        for line in scalars.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a killed run
                continue
            if metric in record:
                value = float(record[metric])
        if value is not None:
            return value
    return None


def test_metric(work_dir: Path, metric: str = 'accuracy/top1') -> Optional[float]:
    """``metric`` of ``<work_dir>/test_metrics.json``; None if there is no such file, or it does
    not hold a number for ``metric``."""
    try:
        value = json.loads((work_dir / TEST_METRICS).read_text()).get(metric)
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def run_accuracy(work_dir: Path, metric: str = 'accuracy/top1') -> Tuple[Optional[float], str]:
    """(the run's ``metric``, where it was read): ``test_metrics.json`` first, else the last
    value logged in ``scalars.json``; (None, why) when neither has it."""
    value = test_metric(work_dir, metric)
    if value is not None:
        return value, TEST_METRICS
    value = last_metric(work_dir, metric)
    if value is not None:
        return value, 'scalars.json'
    try:
        status = json.loads((work_dir / SUITE_RECORD).read_text()).get('status')
    except (OSError, ValueError, AttributeError):
        status = None
    if status == 'diverged':
        return None, f'the run diverged ({SUITE_RECORD}): no {metric}'
    return None, f'no {metric} in {TEST_METRICS} nor in */vis_data/scalars.json'


def dumped_config(work_dir: Path) -> Optional[Path]:
    """The config ``tools/train.py`` dumped into ``work_dir`` (``<work_dir>/<name>.py``)."""
    configs = sorted(work_dir.glob('*.py'))
    if len(configs) > 1:  # prefer one whose name is the work_dir's, as train.py's default
        named = [c for c in configs if c.stem == work_dir.name]
        configs = named or configs
    return configs[0] if configs else None


def _walk_datasets(cfg: dict) -> Iterable[dict]:
    while isinstance(cfg, dict):
        yield cfg
        cfg = cfg.get('dataset')


def wrapper_default(wrapper: str, key: str) -> float:
    """The default of the ``key`` argument of mmpoly's dataset wrapper ``wrapper``."""
    import inspect

    from mmpoly.datasets import subsets
    return float(inspect.signature(getattr(subsets, wrapper)).parameters[key].default)


def data_regime(config: Config) -> Optional[Tuple[str, float]]:
    """(regime, x) from the training set's wrapper of ``config`` (the wrapper's default where
    the config does not set it); None without one."""
    dataset = config.get('train_dataloader', {}).get('dataset', {})
    for cfg in _walk_datasets(dataset):
        for regime, (wrapper, key, _) in REGIMES.items():
            if cfg.get('type') in (wrapper, f'mmpretrain.{wrapper}'):
                value = cfg.get(key)
                return regime, wrapper_default(wrapper, key) if value is None else float(value)
    return None


def model_name(config_path: Path) -> str:
    """``{model}_{backbone}`` of ``{model}_{backbone}_{N}xb{M}_{data}``; else the file stem."""
    match = MODEL_NAME.match(config_path.stem)
    return match.group('model') if match else config_path.stem


def is_work_dir(path: Path) -> bool:
    """A folder with ``<timestamp>/vis_data/scalars.json`` or ``test_metrics.json``."""
    return (path / TEST_METRICS).is_file() or any(path.glob('*/vis_data/scalars.json'))


def _work_dirs_below(path: Path, depth: int) -> List[Path]:
    if is_work_dir(path):
        return [path]
    if depth == 0:
        return []
    found = []
    for child in sorted(path.iterdir()):
        if child.is_dir() and not child.is_symlink():
            found += _work_dirs_below(child, depth - 1)
    return found


def find_work_dirs(paths: Sequence[str]) -> List[Path]:
    """Work_dirs among ``paths``: a path that is one (:func:`is_work_dir`), else the work_dirs
    below it, up to :data:`MAX_DEPTH` levels down (not below a work_dir)."""
    found = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise FileNotFoundError(f'plot_data_regimes: {path} is not a folder')
        found += _work_dirs_below(path, MAX_DEPTH)
    return found


def collect_runs(paths: Sequence[str], metric: str = 'accuracy/top1',
                 skipped: Optional[List[str]] = None) -> List[Run]:
    """The finished runs under ``paths``; the reason for each work_dir left out goes to
    ``skipped``."""
    skipped = [] if skipped is None else skipped
    runs = []
    for work_dir in find_work_dirs(paths):
        accuracy, source = run_accuracy(work_dir, metric)
        config_path = dumped_config(work_dir)
        if accuracy is None:
            skipped.append(f'{work_dir}: {source}')
            continue
        if config_path is None:
            skipped.append(f'{work_dir}: no dumped config (<work_dir>/<config name>.py)')
            continue
        regime = data_regime(Config.fromfile(str(config_path), import_custom_modules=False))
        if regime is None:
            skipped.append(f'{work_dir}: the training set is neither a LongTailedDataset nor a '
                           'LimitedDataset')
            continue
        runs.append(Run(str(work_dir), model_name(config_path), regime[0], regime[1], accuracy))
    return runs


def group_runs(runs: Iterable[Run]) -> PlotData:
    """regime -> model -> (xs, mean accuracy at each x), sorted by x."""
    points: Dict[str, Dict[str, Dict[float, List[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for run in runs:
        points[run.regime][run.model][run.x].append(run.accuracy)
    grouped: PlotData = {}
    for regime, models in points.items():
        grouped[regime] = {}
        for model, by_x in sorted(models.items()):
            xs = sorted(by_x)
            grouped[regime][model] = (xs, [sum(by_x[x]) / len(by_x[x]) for x in xs])
    return grouped


def plot_data_regimes(runs: Sequence[Run], out: str, metric: str = 'accuracy/top1') -> PlotData:
    """Draw both panels to the PNG ``out``; returns what was drawn, read back from the
    figure's lines: regime -> model -> (xs, ys)."""
    grouped = group_runs(runs)
    fig, axes = plt.subplots(1, len(REGIMES), figsize=(6 * len(REGIMES), 4.5))
    models = sorted({model for by_model in grouped.values() for model in by_model})
    colors = {model: f'C{i % 10}' for i, model in enumerate(models)}  # one colour per model
    drawn: PlotData = {}
    for ax, (regime, (_, _, label)) in zip(axes, REGIMES.items()):
        drawn[regime] = {}
        for model, (xs, ys) in grouped.get(regime, {}).items():
            (line, ) = ax.plot(xs, ys, marker='o', label=model, color=colors[model])
            drawn[regime][model] = ([float(x) for x in line.get_xdata()],
                                    [float(y) for y in line.get_ydata()])
        ax.set_xscale('log')
        ax.set_xlabel(f'{label} (log scale)')
        ax.set_ylabel(metric)
        ax.grid(True, which='both', alpha=0.3)
        if drawn[regime]:
            ax.legend()
            xs = sorted({x for line_xs, _ in drawn[regime].values() for x in line_xs})
            ax.set_xticks(xs)
            ax.set_xticklabels([f'{x:g}' for x in xs])
        else:
            ax.text(0.5, 0.5, 'no runs', ha='center', va='center', transform=ax.transAxes)
    axes[0].set_title('long-tailed training set')
    axes[1].set_title('limited training set')
    fig.tight_layout()
    try:
        atomic_savefig(fig, out, dpi=100)  # complete or not at all
    finally:
        plt.close(fig)
    return drawn


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Plot accuracy vs imbalance factor and vs '
                                     'images per class of finished runs')
    parser.add_argument('work_dirs', nargs='+', help='work_dirs, or folders of work_dirs')
    parser.add_argument('--out', default='data_regimes.png', help='the PNG to write')
    parser.add_argument('--metric', default='accuracy/top1',
                        help='the scalar to plot (its last value per run)')
    args = parser.parse_args(argv)
    suffix = Path(args.out).suffix.lstrip('.').lower() or 'png'
    supported = sorted(FigureCanvasBase.get_supported_filetypes())
    if suffix not in supported:
        parser.error(f'--out {args.out}: matplotlib cannot write .{suffix} files; allowed '
                     f'suffixes: {", ".join(supported)} (none: PNG)')
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    skipped: List[str] = []
    try:
        runs = collect_runs(args.work_dirs, args.metric, skipped)
    except FileNotFoundError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 1
    for reason in skipped:
        print(f'skipped {reason}', file=sys.stderr)
    if not runs:
        print('error: no finished run with a LongTailedDataset or LimitedDataset training set',
              file=sys.stderr)
        return 1
    drawn = plot_data_regimes(runs, args.out, args.metric)
    for regime, models in drawn.items():
        for model, (xs, ys) in models.items():
            print(f'{regime} {model}: ' + ', '.join(f'{x:g} -> {y:.2f}' for x, y in zip(xs, ys)))
    print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
