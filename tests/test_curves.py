"""tools/analysis_tools/plot_curves.py: loss, learning rate and accuracy curves of work_dirs.

The real-run tests read the ``scalars.json`` files of a tiny PDC ResNet trained by
``tools/train.py`` on a 64 / 32 image Fashion-MNIST subset (the helpers of test_tools.py): one
run of 1 epoch resumed to 2 (two timestamp folders), and a second run with another learning rate.
The fast tests use ``scalars.json`` files written in mmengine's format.
"""
import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import matplotlib.pyplot as plt
import pytest
from helpers import TOOLS, load_tool
from test_tools import make_fashion_mnist_subset, run_tool, write_config

PNG_MAGIC = b'\x89PNG\r\n\x1a\n'

plot_curves = load_tool('analysis_tools/plot_curves')


def records_of(scalars: Path) -> List[dict]:
    return [json.loads(line) for line in scalars.read_text().splitlines() if line.strip()]


def file_series(records: Sequence[dict], metric: str) -> Tuple[List[float], List[float]]:
    """The test's own reading: training lines by ``iter``, validation lines by ``step``."""
    x_key = 'iter' if metric in ('loss', 'lr') else 'step'
    points = [(float(r[x_key]), float(r[metric])) for r in records if metric in r]
    return [x for x, _ in points], [y for _, y in points]


def write_scalars(work_dir: Path, timestamp: str, records: Sequence[dict]) -> Path:
    vis = work_dir / timestamp / 'vis_data'
    vis.mkdir(parents=True)
    path = vis / 'scalars.json'
    path.write_text(''.join(json.dumps(r) + '\n' for r in records))
    return path


def train_lines(iters: range, loss0: float, epoch_len: int = 4) -> List[dict]:
    """mmengine's training lines of an epoch-based run."""
    return [{'lr': 0.1, 'data_time': 0.01, 'loss': loss0 / i, 'time': 0.2,
             'epoch': (i - 1) // epoch_len + 1, 'iter': i, 'step': i} for i in iters]


def val_line(epoch: int, accuracy: float) -> dict:
    return {'accuracy/top1': accuracy, 'data_time': 0.005, 'time': 0.1, 'step': epoch}


# --------------------------------------------------------------------------- real runs


def train(config: Path, work_dir: Path, *args: str) -> None:
    # one thread: faster for this tiny model on a shared CPU
    run_tool([sys.executable, str(TOOLS / 'train.py'), str(config), '--work-dir', str(work_dir),
              *args], env={'OMP_NUM_THREADS': '1'})


@pytest.fixture(scope='module')
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """'resumed': 1 epoch, then --resume to 2 epochs; 'other': 1 epoch at another lr."""
    root = tmp_path_factory.mktemp('curves')
    config = write_config(root, make_fashion_mnist_subset(root / 'fashion-mnist'))
    resumed, other = root / 'resumed', root / 'other'
    train(config, resumed)
    train(config, resumed, '--resume', '--cfg-options', 'train_cfg.max_epochs=2')
    train(config, other, '--cfg-options', 'optim_wrapper.optimizer.lr=0.01')
    return dict(resumed=resumed, other=other)


@pytest.mark.slow
def test_real_run_series_equal_the_file_and_png_is_written(real_runs: Dict[str, Path],
                                                           tmp_path: Path) -> None:
    work_dir = real_runs['other']
    (scalars, ) = work_dir.glob('*/vis_data/scalars.json')
    records = records_of(scalars)
    run = plot_curves.load_run(str(work_dir))
    assert run.label == 'other' and run.val_x == 'epoch'
    for metric in ('loss', 'lr', 'accuracy/top1'):
        assert run.series[metric] == file_series(records, metric), metric
    assert run.series['loss'][0] == [1.0, 2.0, 3.0, 4.0]  # 64 images, batch 16
    assert run.series['lr'][1] == [0.01] * 4
    assert run.series['accuracy/top1'][0] == [1.0]

    out = tmp_path / 'figs' / 'curves.png'
    assert plot_curves.main([str(work_dir), '--out', str(out), '--title', 'tiny']) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 0
    image = plt.imread(str(out))
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 300
    assert image.std() > 0  # something was drawn
    assert sorted(p.name for p in out.parent.iterdir()) == ['curves.png']  # no temp file left


@pytest.mark.slow
def test_real_resumed_run_is_one_continuous_curve(real_runs: Dict[str, Path]) -> None:
    work_dir = real_runs['resumed']
    segments = sorted(work_dir.glob('*/vis_data/scalars.json'))
    assert len(segments) == 2  # the resumed run wrote a second timestamp folder
    first, second = (records_of(s) for s in segments)
    run = plot_curves.load_run(str(work_dir))
    for metric in ('loss', 'lr', 'accuracy/top1'):
        xs1, ys1 = file_series(first, metric)
        xs2, ys2 = file_series(second, metric)
        assert run.series[metric] == (xs1 + xs2, ys1 + ys2), metric
    assert run.series['loss'][0] == [float(i) for i in range(1, 9)]
    assert run.series['accuracy/top1'][0] == [1.0, 2.0]


@pytest.mark.slow
def test_real_two_runs_on_one_figure(real_runs: Dict[str, Path]) -> None:
    runs = [plot_curves.load_run(str(real_runs['resumed']), 'PDC lr 0.05'),
            plot_curves.load_run(str(real_runs['other']), 'PDC lr 0.01')]
    fig = plot_curves.plot_curves(runs, ['loss', 'lr', 'accuracy/top1'], title='compare')
    try:
        assert fig._suptitle.get_text() == 'compare'
        assert [ax.get_title() for ax in fig.axes] == ['loss', 'lr', 'accuracy/top1']
        assert [ax.get_xlabel() for ax in fig.axes] == ['iteration', 'iteration', 'epoch']
        colours = []
        for ax, metric in zip(fig.axes, ['loss', 'lr', 'accuracy/top1']):
            lines = ax.get_lines()
            assert [line.get_label() for line in lines] == ['PDC lr 0.05', 'PDC lr 0.01']
            assert [t.get_text() for t in ax.get_legend().get_texts()] == \
                ['PDC lr 0.05', 'PDC lr 0.01']
            for line, run in zip(lines, runs):
                assert (list(line.get_xdata()), list(line.get_ydata())) == \
                    tuple(run.series[metric])
            colours.append([line.get_color() for line in lines])
        assert colours[0][0] != colours[0][1]
        assert all(c == colours[0] for c in colours)  # a run keeps its colour in every panel
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------- fast


def test_resumed_segments_newer_wins_where_they_overlap(tmp_path: Path) -> None:
    """A run killed at iter 6 after the epoch-1 checkpoint (iter 4), resumed from it: iters
    5-6 of the killed segment are replaced by the resumed one's."""
    work_dir = tmp_path / 'killed_and_resumed'
    write_scalars(work_dir, '20260101_100000', train_lines(range(1, 7), 10.0) + [val_line(1, 40)])
    write_scalars(work_dir, '20260101_110000', train_lines(range(5, 9), 20.0) + [val_line(2, 50)])
    run = plot_curves.load_run(str(work_dir))
    xs, ys = run.series['loss']
    assert xs == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert ys == [10.0 / i for i in range(1, 5)] + [20.0 / i for i in range(5, 9)]
    assert run.series['accuracy/top1'] == ([1.0, 2.0], [40.0, 50.0])

    # a later run from scratch in the same work_dir replaces the old curve
    write_scalars(work_dir, '20260102_090000', train_lines(range(1, 3), 30.0))
    run = plot_curves.load_run(str(work_dir))
    assert run.series['loss'] == ([1.0, 2.0], [30.0, 15.0])
    assert run.series['accuracy/top1'] == ([1.0, 2.0], [40.0, 50.0])  # it has not validated


def test_run_without_accuracy_is_drawn_without_it(tmp_path: Path, capsys) -> None:
    with_acc, without = tmp_path / 'with_acc', tmp_path / 'no_val'
    write_scalars(with_acc, '20260101_100000', train_lines(range(1, 5), 2.0) + [val_line(1, 60)])
    write_scalars(without, '20260101_100000', train_lines(range(1, 5), 3.0))
    runs = [plot_curves.load_run(str(without)), plot_curves.load_run(str(with_acc))]
    fig = plot_curves.plot_curves(runs, ['loss', 'accuracy/top1'])
    try:
        loss_lines, acc_lines = fig.axes[0].get_lines(), fig.axes[1].get_lines()
        assert [line.get_label() for line in loss_lines] == ['no_val', 'with_acc']
        assert [line.get_label() for line in acc_lines] == ['with_acc']
        assert acc_lines[0].get_color() == loss_lines[1].get_color()  # its colour, not the 1st
    finally:
        plt.close(fig)
    out = tmp_path / 'c.png'
    assert plot_curves.main([str(without), str(with_acc), '--out', str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert f'{without} did not log accuracy/top1' in capsys.readouterr().err

    # only training lines anywhere: the accuracy panel is left out
    assert plot_curves.select_metrics(runs[:1], None) == ['loss', 'lr']


def test_iteration_based_validation_is_labelled_iteration(tmp_path: Path) -> None:
    work_dir = tmp_path / 'by_iter'
    lines = [{k: v for k, v in r.items() if k != 'epoch'} for r in train_lines(range(1, 5), 2.0)]
    write_scalars(work_dir, '20260101_100000', lines + [val_line(4, 70)])
    run = plot_curves.load_run(str(work_dir))
    assert run.val_x == 'iteration'
    assert plot_curves.x_label([run], 'accuracy/top1') == 'iteration'


def test_work_dir_without_scalars_is_an_error_naming_it(tmp_path: Path, capsys) -> None:
    work_dir = tmp_path / 'test_only'
    (work_dir / '20260101_100000' / 'vis_data').mkdir(parents=True)  # what tools/test.py leaves
    (work_dir / '20260101_100000' / '20260101_100000.log').write_text('log\n')
    with pytest.raises(FileNotFoundError, match=f'{work_dir}/\\*/vis_data/scalars.json'):
        plot_curves.load_run(str(work_dir))
    good = tmp_path / 'good'
    write_scalars(good, '20260101_100000', train_lines(range(1, 3), 2.0))
    out = tmp_path / 'c.png'
    assert plot_curves.main([str(good), str(work_dir), '--out', str(out)]) == 1
    assert str(work_dir) in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(FileNotFoundError, match='work_dir .*missing is not a folder'):
        plot_curves.load_run(str(tmp_path / 'missing'))


def test_cut_last_line_is_ignored_and_a_bad_line_is_named(tmp_path: Path) -> None:
    work_dir = tmp_path / 'killed'
    scalars = write_scalars(work_dir, '20260101_100000', train_lines(range(1, 4), 2.0))
    scalars.write_text(scalars.read_text() + '{"lr": 0.1, "loss": 0.')
    assert plot_curves.load_run(str(work_dir)).series['loss'][0] == [1.0, 2.0, 3.0]
    scalars.write_text('{"loss": \n' + json.dumps(train_lines(range(1, 2), 2.0)[0]) + '\n')
    with pytest.raises(ValueError, match=f'{scalars} line 1 is not JSON'):
        plot_curves.load_run(str(work_dir))
    scalars.write_bytes(b'{"loss": 1.0, "note": "\xff"}\n')  # named too, not a bare codec error
    with pytest.raises(ValueError, match=f'{scalars} is not UTF-8 text \\(byte offset 23: '):
        plot_curves.load_run(str(work_dir))


def test_bad_arguments_are_named(tmp_path: Path, capsys) -> None:
    work_dir = tmp_path / 'run'
    write_scalars(work_dir, '20260101_100000', train_lines(range(1, 3), 2.0))
    with pytest.raises(SystemExit):
        plot_curves.parse_args([str(work_dir), '--labels', 'a', 'b'])
    assert '--labels: got 2 labels for 1 work_dirs' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        plot_curves.parse_args([str(work_dir), '--out', 'curves.jpg'])
    assert '--out curves.jpg: must end in .png' in capsys.readouterr().err
    assert plot_curves.main([str(work_dir), '--metrics', 'loss', 'acc', '--out',
                             str(tmp_path / 'c.png')]) == 1
    err = capsys.readouterr().err
    assert '--metrics acc: no run logged it' in err and 'data_time, loss, lr, time' in err
    assert plot_curves.main([str(work_dir), '--metrics', 'lr', '--labels', 'mine', '--out',
                             str(tmp_path / 'c.png')]) == 0


def test_png_is_replaced_atomically(tmp_path: Path, monkeypatch) -> None:
    """A failing write leaves the previous PNG and no temporary file."""
    work_dir = tmp_path / 'run'
    write_scalars(work_dir, '20260101_100000', train_lines(range(1, 3), 2.0))
    out = tmp_path / 'curves.png'
    out.write_bytes(b'previous')
    fig = plot_curves.plot_curves([plot_curves.load_run(str(work_dir))], ['loss'])

    def broken(*args, **kwargs):
        raise OSError('disk full')

    monkeypatch.setattr(fig, 'savefig', broken)
    with pytest.raises(OSError, match='disk full'):
        plot_curves.save_png(fig, str(out))
    assert out.read_bytes() == b'previous'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['curves.png', 'run']
    monkeypatch.undo()
    plot_curves.save_png(fig, str(out))
    plt.close(fig)
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in tmp_path.iterdir()) == ['curves.png', 'run']
