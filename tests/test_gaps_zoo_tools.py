"""Gaps of the model-zoo and analysis tools: plot_curves.py on iteration-based runs,
zoo_results.py's --publish guard, deletions and --configs, run_suite.py's failed-before-update
runs, poly_degree.py's bad input, plot_data_regimes.py on the zoo's runs, the docs' copy of the
zoo plot (gen_tables.py), the Speech Commands rows of the paper table (Tables 7 and 12 of
arXiv:2104.07916) and publish_model.py's example."""
import hashlib
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Dict, List, Optional

import pytest
from helpers import CONFIGS, FASHION_MNIST, REPO, experiment_name, load_tool
from mmengine.config import Config

from mmpoly.engine.non_finite import NonFiniteError
from mmpoly.zoo import paper_rows, report
from mmpoly.zoo.fashion_mnist import (METRICS_FILE, RECORD_FILE, finished_record, run_dir,
                                      zoo_config)

plot_curves = load_tool('analysis_tools/plot_curves')
plot_data_regimes = load_tool('analysis_tools/plot_data_regimes')
poly_degree = load_tool('analysis_tools/poly_degree')
zoo_results = load_tool('model_zoo/zoo_results')
run_suite = load_tool('model_zoo/run_suite')
gen_tables = load_tool('docs/gen_tables')

needs_fmnist = pytest.mark.skipif(not (FASHION_MNIST / 't10k-images-idx3-ubyte.gz').is_file(),
                                  reason='tools/setup_env.sh installs Fashion-MNIST '
                                  '(dataset-fashion-mnist)')
RESNET8 = zoo_config('resnet8')


# --------------------------------------------------------------------------- plot_curves.py


def _train_zoo_config(work_dir: Path, max_iters: int, val_interval: int, log_interval: int,
                      resume: bool = False) -> None:
    """A real, short run of the zoo's iteration-based ResNet8 config (in this process: 64
    validation images, batch 16, no BN recomputation)."""
    from mmengine.runner import Runner

    from mmpoly.utils import register_all_modules

    register_all_modules(init_default_scope=False)
    cfg = Config.fromfile(str(CONFIGS / f'{RESNET8}.py'))
    cfg.merge_from_dict({
        'train_cfg.max_iters': max_iters, 'train_cfg.val_interval': val_interval,
        'default_hooks.logger.interval': log_interval, 'train_dataloader.batch_size': 16,
        'train_dataloader.num_workers': 0, 'train_dataloader.persistent_workers': False,
        'train_dataloader.dataset.indices': 256, 'val_dataloader.batch_size': 64,
        'val_dataloader.num_workers': 0, 'val_dataloader.persistent_workers': False,
        'val_dataloader.dataset.indices': 64})
    cfg.custom_hooks = []
    cfg.work_dir = str(work_dir)
    cfg.resume = resume
    cfg.experiment_name = experiment_name('gaps_curves')
    Runner.from_cfg(cfg).train()


def _records(scalars: Path) -> List[dict]:
    return [json.loads(line) for line in scalars.read_text().splitlines() if line.strip()]


@needs_fmnist
def test_plot_curves_places_iteration_based_validations_at_their_iteration(
        tmp_path: Path) -> None:
    """mmengine logs the validations of an IterBasedTrainLoop at step 0 (the epoch): they are
    drawn at the iteration they ran after, and a resumed run keeps its earlier ones."""
    work_dir = tmp_path / 'resnet8_iter'
    _train_zoo_config(work_dir, max_iters=20, val_interval=10, log_interval=5)
    (first, ) = work_dir.glob('*/vis_data/scalars.json')
    accuracy = [r['accuracy/top1'] for r in _records(first) if 'accuracy/top1' in r]
    assert [r['step'] for r in _records(first) if 'accuracy/top1' in r] == [0, 0]
    run = plot_curves.load_run(str(work_dir))
    assert run.val_x == 'iteration'
    assert run.series['accuracy/top1'] == ([10.0, 20.0], accuracy)
    assert run.series['loss'][0] == [5.0, 10.0, 15.0, 20.0]

    # the same log without its dumped config: the training line before each validation
    bare = tmp_path / 'bare'
    (bare / first.parent.parent.name / 'vis_data').mkdir(parents=True)
    (bare / first.parent.parent.name / 'vis_data' / 'scalars.json').write_text(first.read_text())
    assert plot_curves.load_run(str(bare)).series['accuracy/top1'] == ([10.0, 20.0], accuracy)

    # resumed to 30 iterations, validating every 5, a training line every 3 (21, 24, 27, 30):
    # the validation after iteration 25 follows the line of 24
    time.sleep(1.1)  # mmengine's timestamp folders are of whole seconds
    _train_zoo_config(work_dir, max_iters=30, val_interval=5, log_interval=3, resume=True)
    first_again, second = sorted(work_dir.glob('*/vis_data/scalars.json'))
    assert first_again == first
    resumed = [r['accuracy/top1'] for r in _records(second) if 'accuracy/top1' in r]
    assert [r['step'] for r in _records(second) if 'accuracy/top1' in r] == [0, 0]
    run = plot_curves.load_run(str(work_dir))
    assert run.series['accuracy/top1'] == ([10.0, 20.0, 25.0, 30.0], accuracy + resumed)
    assert run.series['loss'][0] == [5.0, 10.0, 15.0, 20.0, 21.0, 24.0, 27.0, 30.0]


def test_plot_curves_schedule_placement() -> None:
    """Validations before a segment's first training line take the schedule's last iterations
    before it; several after one line take the next ones; epoch-based steps are kept."""
    schedule = plot_curves.Schedule('iteration', val_interval=10, max_iters=35)
    records = [{'accuracy/top1': 1.0, 'step': 0}, {'loss': 1.0, 'iter': 25, 'step': 25},
               {'accuracy/top1': 2.0, 'step': 0}, {'accuracy/top1': 3.0, 'step': 0}]
    assert plot_curves.place_validations(records, schedule) == [20.0, 30.0, 35.0]
    epoch = plot_curves.Schedule('epoch')
    assert plot_curves.place_validations(records, epoch) == [0.0, 0.0, 0.0]
    by_iter = plot_curves.Schedule('iteration', step_is_iteration=True, val_interval=10)
    assert plot_curves.place_validations([{'a': 1.0, 'step': 30}], by_iter) == [30.0]


# --------------------------------------------------------------------------- zoo_results.py


def _finished_run(root: Path, config: str, seed: int, top1: float, **record) -> Path:
    folder = run_dir(root, config, seed)
    folder.mkdir(parents=True)
    (folder / 'iter_5.pth').write_bytes(b'training checkpoint')
    (folder / METRICS_FILE).write_text(json.dumps({'accuracy/top1': top1}))
    fields = dict(config=config, seed=seed, config_hash='same', max_iters=None,
                  test_images=None, cfg_options=None, status='complete', top1=top1,
                  checkpoint='iter_5.pth', error=None, train_seconds=60.0, test_seconds=5.0)
    fields.update(record)
    (folder / RECORD_FILE).write_text(json.dumps(fields))
    return folder


@pytest.fixture
def fake_publish(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """publish_model.publish replaced by one that writes a small file named as the real one."""
    calls: List[str] = []

    def publish(checkpoint: str, out_prefix: str, config: str,
                num_images: Optional[int] = None) -> Dict:
        calls.append(checkpoint)
        data = b'published ' + Path(checkpoint).read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        path = f'{out_prefix}-{sha256[:8]}.pth'
        Path(path).write_bytes(data)
        return dict(path=path, sha256=sha256, dtype='float16', top1=91.0, top1_float32=91.0,
                    test_images=num_images)

    module = ModuleType('publish_model')
    module.publish = publish
    monkeypatch.setitem(sys.modules, 'publish_model', module)
    return calls


def test_publish_refuses_smoke_runs_before_writing_anything(tmp_path: Path, capsys,
                                                            fake_publish: List[str]) -> None:
    root, ckpts = tmp_path / 'zoo', tmp_path / 'ckpts'
    ckpts.mkdir()
    real = ckpts / f'{RESNET8}-18dfabcb.pth'
    real.write_bytes(b'the published model')
    _finished_run(root, RESNET8, 0, 9.0, max_iters=5, test_images=100)
    args = ['--work-root', str(root), '--configs', RESNET8, '--publish', '--checkpoints',
            str(ckpts)]
    assert zoo_results.main(args) == 2
    err = capsys.readouterr().err
    assert 'error: --publish:' in err and RESNET8 in err and 'smoke' in err
    assert '--allow-smoke' in err and 'nothing was written' in err
    assert fake_publish == [] and [p.name for p in ckpts.iterdir()] == [real.name]

    # a full run published with --publish-test-images is a smoke result too
    (root / RESNET8).rename(tmp_path / 'smoke_run')
    _finished_run(root, RESNET8, 0, 90.0)
    assert zoo_results.main(args + ['--publish-test-images', '100']) == 2
    assert '--publish-test-images 100' in capsys.readouterr().err
    assert fake_publish == [] and real.read_bytes() == b'the published model'


def test_publish_removes_the_earlier_file_only_once_nothing_names_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,
        fake_publish: List[str]) -> None:
    root, ckpts = tmp_path / 'zoo', tmp_path / 'ckpts'
    ckpts.mkdir()
    old = ckpts / f'{RESNET8}-0123abcd.pth'
    old.write_bytes(b'earlier publication')
    results = tmp_path / 'zoo_results.json'
    results.write_text(json.dumps({'models': {RESNET8: {
        'top1': [90.0], 'weights': str(old), 'weights_top1': 90.0,
        'weights_dtype': 'float16'}}}))
    monkeypatch.setattr(zoo_results, 'RESULTS_FILE', results)
    monkeypatch.setattr(zoo_results, 'METAFILE', tmp_path / 'metafile.yml', raising=False)
    _finished_run(root, RESNET8, 0, 90.0)
    common = ['--work-root', str(root), '--configs', RESNET8, '--publish', '--checkpoints',
              str(ckpts)]

    # published alone: the results file still names the old file, which stays
    assert zoo_results.main(common) == 0
    out = capsys.readouterr().out
    (new, ) = [p for p in ckpts.iterdir() if p != old]
    assert old.is_file() and f'kept the earlier publication {old}: {results}' in out

    # published and written: the old file goes, after the results file names the new one
    seen = []
    write = zoo_results.atomic_write

    def recording_write(data, path) -> None:
        seen.append((Path(path), old.is_file()))
        write(data, path)

    monkeypatch.setattr(zoo_results, 'atomic_write', recording_write)
    assert zoo_results.main(common + ['--write-results', str(results)]) == 0
    assert seen == [(results, True)]
    assert not old.exists() and new.is_file()
    assert json.loads(results.read_text())['models'][RESNET8]['weights'] == str(new)
    assert f'removed the earlier publication {old}' in capsys.readouterr().out


def test_zoo_results_refuses_an_unknown_config(tmp_path: Path, capsys) -> None:
    root = tmp_path / 'zoo'
    _finished_run(root, RESNET8, 0, 90.0)
    with pytest.raises(SystemExit) as exit_info:
        zoo_results.main(['--work-root', str(root), '--configs', RESNET8, 'nonexistent_config'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'nonexistent_config.py does not exist' in err and zoo_config('pdc_resnet8') in err
    assert zoo_results.main(['--work-root', str(root), '--configs', RESNET8,
                             zoo_config('pdc_resnet8')]) == 0
    assert f'no finished runs of {zoo_config("pdc_resnet8")}' in capsys.readouterr().err


def test_zoo_results_checks_its_output_files_before_the_work(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Each was a traceback after the table had been made (and, with --publish, after the
    checkpoints had been written): an unwritable --json, a .txt --plot, a missing page or one
    without the markers for --update-readme."""
    root = tmp_path / 'zoo'
    _finished_run(root, RESNET8, 0, 90.0)
    monkeypatch.setattr(zoo_results, 'summarise', lambda *_: pytest.fail('not checked first'))
    page = tmp_path / 'page.md'
    page.write_text('# no markers\n')
    for option, value, message in [
            ('--json', '/proc/x/r.json', "--json '/proc/x/r.json': the folder /proc is not "
             'writable ('),
            ('--plot', str(tmp_path / 'r.txt'), f"--plot '{tmp_path / 'r.txt'}': must end in "
             '.png or .svg'),
            ('--plot', str(tmp_path), f"--plot '{tmp_path}': is a folder"),
            ('--update-readme', str(tmp_path / 'missing.md'), "--update-readme "
             f"'{tmp_path / 'missing.md'}': [Errno 2] No such file or directory"),
            ('--update-readme', str(page), f"--update-readme '{page}': {page} has 0 lines "
             "'<!-- BEGIN zoo-results -->'")]:
        with pytest.raises(SystemExit) as exit_info:
            zoo_results.main(['--work-root', str(root), '--configs', RESNET8, option, value])
        assert exit_info.value.code == 2
        assert f'error: {message}' in capsys.readouterr().err, (option, value)


def test_publish_model_checks_its_arguments_before_evaluating(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture
                                                              ) -> None:
    """A missing file, an unwritable OUT_PREFIX, a checkpoint of another model: tracebacks, the
    last after two evaluations of the test set. --max-change nan always published float32, and
    --max-change beside --fp16 was ignored, without a word."""
    tool = load_tool('model_zoo/publish_model')
    config = str(CONFIGS / f'{zoo_config("pdc_resnet8")}.py')
    checkpoint = next((REPO / 'checkpoints' / 'fashion-mnist').glob(
        f'{zoo_config("pdc_resnet8")}-*.pth'))
    other = next((REPO / 'checkpoints' / 'fashion-mnist').glob(f'{RESNET8}-*.pth'))
    out = str(tmp_path / 'm')
    for argv, code, message in [
            ([str(tmp_path / 'no.pth'), out, '--config', config], 2,
             f"CHECKPOINT '{tmp_path / 'no.pth'}' is not a file"),
            ([str(checkpoint), '/proc/x/m', '--config', config], 2,
             "OUT_PREFIX '/proc/x/m': the folder /proc is not writable ("),
            ([str(checkpoint), out, '--config', config, '--max-change', 'nan'], 2,
             '--max-change must be a finite number of top-1 points > 0, got nan'),
            ([str(checkpoint), out, '--config', config, '--fp16', '--max-change', '0.5'], 2,
             '--max-change 0.5 has no effect with --fp16, which sets the precision'),
            ([str(other), out, '--config', config], 1,
             "the checkpoint does not fit the config's model: missing ['backbone.layer1.0.")]:
        if code == 2:
            with pytest.raises(SystemExit) as exit_info:
                tool.main(argv)
            assert exit_info.value.code == 2
        else:
            assert tool.main(argv) == 1
        assert f'error: {message}' in capsys.readouterr().err, argv
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- run_suite.py

GRADIENT = ('mmpoly.engine.non_finite.NonFiniteError: non-finite gradient at iteration {i} '
            '(epoch 1): first in parameter backbone.conv1.weight; last logged loss nan. The '
            'update was not applied and no checkpoint of this state is saved. {diagnosis}')


def _failing_training(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    def run(cmd: List[str], log: Path):
        with open(log, 'a') as out:
            out.write('Traceback (most recent call last):\n' + message + '\n')
        return 1, 3.0

    monkeypatch.setattr(run_suite, '_run', run)


def test_run_suite_refuses_an_epoch_config_and_a_file_as_work_root(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An epoch-based config was an AttributeError traceback (train_cfg.max_iters); a file as
    --work-root passed --dry-run and failed at the first run."""
    (tmp_path / 'afile').write_text('')
    for argv, message in [
            (['--configs', 'configs/pdc_resnet8_1xb128_fashion-mnist.py'],
             '--configs: pdc_resnet8_1xb128_fashion-mnist trains by epochs (train_cfg has no '
             'max_iters); the suite runs the iteration-based zoo configs'),
            (['--configs', RESNET8, '--work-root', str(tmp_path / 'afile')],
             f"--work-root '{tmp_path / 'afile'}': is a file, not a folder; give a folder for "
             'the runs')]:
        with pytest.raises(SystemExit) as exit_info:
            run_suite.parse_args([*argv, '--seeds', '0', '--dry-run'])
        assert exit_info.value.code == 2
        assert f'error: {message}' in capsys.readouterr().err
    args = run_suite.parse_args(['--configs', RESNET8, '--seeds', '0', '--work-root',
                                 str(tmp_path / 'new' / 'root')])
    assert args.configs == [RESNET8] and not (tmp_path / 'new').exists()


def test_non_finite_before_any_update_is_a_failed_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    diagnosis = ('before any update of this run; first non-finite layer output of the forward '
                 'pass: data_preprocessor. ' + NonFiniteError.ADVICE[NonFiniteError.BEFORE_UPDATE])
    before = GRADIENT.format(i=1, diagnosis=diagnosis)
    _failing_training(monkeypatch, before)
    with pytest.raises(run_suite.SuiteError, match='non-finite before any update, which is no '
                       'divergence but a config, data or checkpoint problem'):
        run_suite.run_one(RESNET8, 0, tmp_path, 'hash')
    folder = run_dir(tmp_path, RESNET8, 0)
    record = json.loads((folder / RECORD_FILE).read_text())
    assert record['status'] == 'failed' and 'No update of this run' in record['error']
    assert finished_record(folder) is None  # rerun next time, not counted

    # a record written as diverged by the earlier run_suite.py is not a finished run either
    record['status'] = 'diverged'
    (folder / RECORD_FILE).write_text(json.dumps(record))
    assert finished_record(folder) is None

    # after some updates it is a divergence: recorded, counted at chance, not rerun
    diverging = NonFiniteError.ADVICE[NonFiniteError.DIVERGING_STEP].format(updates=7)
    _failing_training(monkeypatch, GRADIENT.format(
        i=8, diagnosis=f'after 7 update(s) of this run; {diverging}'))
    record = run_suite.run_one(RESNET8, 1, tmp_path, 'hash')
    assert record['status'] == 'diverged'
    assert finished_record(run_dir(tmp_path, RESNET8, 1)) == record


# --------------------------------------------------------------------------- poly_degree.py


@pytest.mark.parametrize('args, message', [
    (['--max-degree', '21'], '--max-degree 21: max_degree must be an int in [1, 20]'),
    (['--input-size', '0', '5'], '--input-size 0 5: must be two positive integers H W'),
])
def test_poly_degree_bad_options_are_one_line_exit_2(args: List[str], message: str,
                                                     capsys) -> None:
    config = str(CONFIGS / 'resnet18_1xb128_cifar10.py')
    assert poly_degree.cli([config, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'{poly_degree.PROG}: error: {message}')
    assert len(err.strip().splitlines()) == 1 and 'Traceback' not in err


def test_poly_degree_pdc_nl_at_the_wrong_input_size(capsys) -> None:
    config = str(CONFIGS / 'pdc-nl3_resnet8_1xb128-1400i_fashion-mnist.py')
    assert poly_degree.cli([config, '--input-size', '16', '16', '--max-degree', '4',
                            '--parts', 'blocks']) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and 'Traceback' not in err
    assert err.startswith(f'{poly_degree.PROG}: error: PDCNonLocal3 was built for spatial_size')
    assert 'measured at --input-size 16 16; leave --input-size out' in err


# --------------------------------------------------------------------------- plot_data_regimes


def _zoo_run(root: Path, model: str, regime: str, seed: int,
             top1: Optional[float]) -> Path:
    """A run folder as run_suite.py leaves it: dumped config, training-only scalars.json,
    test_metrics.json (none for a diverged run) and suite_record.json."""
    config = zoo_config(model, regime)
    folder = run_dir(root, config, seed)
    (folder / '20261207_010000' / 'vis_data').mkdir(parents=True)
    (folder / '20261207_010000' / 'vis_data' / 'scalars.json').write_text(
        json.dumps({'lr': 0.1, 'loss': 2.0, 'iter': 50, 'step': 50}) + '\n')
    Config.fromfile(str(CONFIGS / f'{config}.py')).dump(str(folder / f'{config}.py'))
    if top1 is not None:
        (folder / METRICS_FILE).write_text(json.dumps({'accuracy/top1': top1}))
    (folder / RECORD_FILE).write_text(json.dumps(
        {'status': 'complete' if top1 is not None else 'diverged', 'top1': top1}))
    return folder


def test_plot_data_regimes_reads_the_zoo_runs(tmp_path: Path) -> None:
    assert plot_data_regimes.model_name(Path(f'{zoo_config("pdc_resnet8", "lt-if100")}.py')) \
        == 'pdc_resnet8'
    root = tmp_path / 'work_dirs' / 'zoo'
    for model, base in (('resnet8', 70.0), ('pdc_resnet8', 72.0)):
        for seed in (0, 1):
            _zoo_run(root, model, '50perclass', seed, base + seed)
            _zoo_run(root, model, 'lt-if100', seed, base + 10 + seed)
    diverged = _zoo_run(root, 'pdc_resnet8', 'lt-if100', 2, None)
    skipped: List[str] = []
    runs = plot_data_regimes.collect_runs([str(tmp_path / 'work_dirs')], skipped=skipped)
    assert len(runs) == 8 and skipped == [f'{diverged}: the run diverged (suite_record.json): '
                                          'no accuracy/top1']
    drawn = plot_data_regimes.plot_data_regimes(runs, str(tmp_path / 'regimes.png'))
    assert drawn == {'imbalance_factor': {'pdc_resnet8': ([100.0], [82.5]),
                                          'resnet8': ([100.0], [80.5])},
                     'images_per_class': {'pdc_resnet8': ([50.0], [72.5]),
                                          'resnet8': ([50.0], [70.5])}}


# --------------------------------------------------------------------------- gen_tables.py


def test_gen_tables_copies_the_zoo_plot_the_docs_show(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys) -> None:
    ((page, block, source, copy), ) = gen_tables.DOC_COPIES
    assert (page, block) == ('docs/en/model_zoo.md', 'zoo-results')
    assert f']({Path(copy).relative_to("docs/en")})' in (REPO / page).read_text()
    name = 'speed cpu/2026-11-26_with-cp.json'
    doc = tmp_path / 'model_zoo.md'
    doc.write_text(f'<!-- BEGIN {name} -->\n<!-- END {name} -->\n')
    plot, shown = tmp_path / 'accuracy_vs_params.png', tmp_path / 'img' / 'zoo.png'
    monkeypatch.setattr(gen_tables, 'DOC_COPIES', ((str(doc), block, str(plot), str(shown)), ))
    assert gen_tables.main([str(doc), '--check']) == 1
    assert 'write it with `python tools/model_zoo/zoo_results.py --plot' in \
        capsys.readouterr().err
    plot.write_bytes(b'\x89PNG new plot')
    assert gen_tables.main([str(doc)]) == 0
    assert shown.read_bytes() == b'\x89PNG new plot'
    assert gen_tables.main([str(doc), '--check']) == 0
    plot.write_bytes(b'\x89PNG newer plot')
    capsys.readouterr()
    assert gen_tables.main([str(doc), '--check']) == 1
    assert f'{shown} differs from {plot}' in capsys.readouterr().out
    assert gen_tables.main([str(doc), '--only', 'speed']) == 0  # not the zoo block: no copy
    assert shown.read_bytes() == b'\x89PNG new plot'


# --------------------------------------------------------------------------- paper table

#: Tables 7 and 12 of arXiv:2104.07916: model -> parameters (M) as printed.
SPEECH_TABLES = {
    ('T-SC', 'ResNet7'): 4.9, ('T-SC', 'SENet (7)'): 5.1, ('T-SC', 'PDC (7)'): 3.9,
    ('T-SC', 'ResNet18'): 11.2, ('T-SC', 'SENet'): 11.5, ('T-SC', 'Π-net-ResNet'): 6.0,
    ('T-SC', 'PDC'): 8.0,
    ('T-NASC', 'ResNet18'): 11.2, ('T-NASC', 'Π-net-ResNet'): 11.9, ('T-NASC', 'PDC'): 5.4,
}


def test_speech_commands_rows_are_checked_by_the_paper_table(capsys) -> None:
    rows = [row for row in paper_rows() if row.table in ('T-SC', 'T-NASC')]
    assert {(row.table, row.model): row.paper_params for row in rows} == SPEECH_TABLES
    assert sorted(row.config for row in rows) == sorted(
        p.name for p in CONFIGS.glob('*_speech-commands.py'))
    assert all(row.in_channels == 1 and row.input_size == (32, 32) for row in rows)
    results = report.measure_rows(rows, with_flops=False)
    assert all(r.match and not r.failed for r in results), report.format_text(results)
    assert all(report.layout(row) in ('exact', 'fitted', 'guessed') for row in rows)
    paper_table = load_tool('analysis_tools/paper_table')
    assert paper_table.main(['--table', 'T-SC', '--table', 'T-NASC', '--no-flops']) == 0
    assert '10 rows: 10 match, 0 known misfit(s), 0 failure(s)' in capsys.readouterr().out


# --------------------------------------------------------------------------- publish_model.py


def test_publish_model_example_names_the_schedules_checkpoint() -> None:
    publish_model = load_tool('model_zoo/publish_model')
    schedule = Config.fromfile(str(CONFIGS / '_base_/schedules/fashion-mnist_bs128_1400i.py'))
    assert f'iter_{schedule.train_cfg.max_iters}.pth' in publish_model.__doc__
    assert 'iter_1500' not in publish_model.__doc__
