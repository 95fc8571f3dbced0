"""Every residual-family config of the paper's tables builds with a pinned parameter count, and
the rows claimed to reproduce the paper round to the paper's figure."""
from pathlib import Path

import pytest
from helpers import CONFIGS, build_from_config, load_tool
from mmengine.config import Config

from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import count_params, default_input_shape
from mmpoly.zoo import paper_rows
from mmpoly.zoo.resnet_family import RESNET_ROWS

register_all_modules()

# measured with tools/analysis_tools/get_flops.py --no-flops (equal to the paper's counts where
# the row's note says EXACT or FIT)
PINNED = {
    'resnet18_1xb128_cifar10.py': 11_173_962,
    'resnet18_1xb128_cifar100.py': 11_220_132,
    'se_resnet18_1xb128_cifar10.py': 11_524_522,
    'se_resnet18_1xb128_cifar100.py': 11_570_692,
    'pinet_resnet18_1xb128_cifar10.py': 6_016_848,
    'pinet_resnet18_1xb128_cifar100.py': 6_063_018,
    'pdc-comp_resnet18_1xb128_cifar10.py': 4_259_793,
    'pdc-comp_resnet18_1xb128_cifar100.py': 4_282_923,
    'pdc_resnet18_1xb128_cifar10.py': 8_022_993,
    'pdc_resnet18_1xb128_cifar100.py': 8_046_123,
    'pdc-param_resnet18_1xb128_cifar100.py': 11_371_947,
    'pdc-channels_resnet18_1xb128_cifar100.py': 19_190_444,
    'pdc3_resnet18_1xb128_cifar100.py': 16_901_938,
    'pdc4_resnet18_1xb128_cifar100.py': 27_972_409,
    'resnet34_1xb128_cifar10.py': 21_282_122,
    'resnet34_1xb128_cifar100.py': 21_328_292,
    'pinet_resnet34_1xb128_cifar10.py': 13_046_866,
    'pinet_resnet34_1xb128_cifar100.py': 14_730_927,
    'pdc_resnet34_1xb128_cifar10.py': 10_486_228,
    'pdc_resnet34_1xb128_cifar100.py': 10_520_878,
    'pdc-channels_resnet34_1xb128_cifar100.py': 36_344_756,
    'resnet18_8xb32_in1k.py': 11_689_512,
    'se_resnet18_8xb32_in1k.py': 11_778_592,
    'pinet_resnet18_8xb32_in1k.py': 11_693_352,
    'pdc-cmp_resnet18_8xb32_in1k.py': 8_150_708,
    'pdc_resnet18_8xb32_in1k.py': 10_773_228,
    'noact_resnet18_1xb128_cifar10.py': 11_173_962,
    'noact_resnet18_1xb128_cifar100.py': 11_220_132,
    'pinet-noact_resnet18_1xb128_cifar10.py': 11_877_970,
    'pinet-noact_resnet18_1xb128_cifar100.py': 11_924_140,
    'pinet3-noact_resnet18_1xb128_cifar10.py': 11_177_810,
    'pinet3-noact_resnet18_1xb128_cifar100.py': 11_223_980,
    'pinet4-noact_resnet18_1xb128_cifar10.py': 11_177_810,
    'pinet4-noact_resnet18_1xb128_cifar100.py': 11_223_980,
    'pdc-noact_resnet18_1xb128_cifar10.py': 5_433_809,
    'pdc-noact_resnet18_1xb128_cifar100.py': 5_456_939,
    'pdc3-noact_resnet18_1xb128_cifar10.py': 11_405_272,
    'pdc3-noact_resnet18_1xb128_cifar100.py': 11_428_402,
    'pdc4-noact_resnet18_1xb128_cifar10.py': 19_296_223,
    'pdc4-noact_resnet18_1xb128_cifar100.py': 19_319_353,
}


@pytest.mark.parametrize('config', sorted(PINNED))
def test_pinned_parameter_count(config):
    assert count_params(build_from_config(config)) == PINNED[config]


def test_every_row_is_pinned_and_every_pinned_config_is_a_row():
    assert {row.config for row in RESNET_ROWS} == set(PINNED)


@pytest.mark.parametrize('row', RESNET_ROWS, ids=[f'{r.table}:{r.model}' for r in RESNET_ROWS])
def test_claimed_matches_round_to_the_paper(row):
    measured = round(PINNED[row.config] / 1e6, row.params_digits)
    assert (measured == row.paper_params) == row.claimed_match, row.note


def test_rows_point_at_existing_configs_and_name_a_known_family():
    for row in paper_rows():
        assert (CONFIGS / row.config).is_file(), row.config
        assert row.family in ('ResNet', 'SE', 'Π-net', 'PDC', 'NL', 'DNL', 'PDC-NL'), row
        assert row.note, f'{row.table} {row.model} has no note'


def test_the_users_imagenet_example_exists():
    cfg = Config.fromfile(str(CONFIGS / 'pdc_resnet18_8xb32_in1k.py'))
    assert cfg.model.backbone.type == 'PDCResNet'
    assert cfg.train_cfg.max_epochs == 100 and cfg.param_scheduler.milestones == [30, 60, 90]
    assert cfg.train_dataloader.batch_size == 32 and cfg.auto_scale_lr.base_batch_size == 256
    assert cfg.optim_wrapper.optimizer.lr == 0.1


@pytest.mark.slow
def test_metafile_is_up_to_date():
    import subprocess
    import sys
    repo = CONFIGS.parent
    result = subprocess.run([sys.executable, 'tools/model_zoo/generate_metafile.py', '--check'],
                            cwd=repo, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_generate_metafile_refuses_a_results_file_that_is_not_there(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A mistyped --results was read as "no results yet": the metafile was rewritten without
    any Fashion-MNIST result or Weights line. Checked before anything is measured or written."""
    tool = load_tool('model_zoo/generate_metafile')
    out = tmp_path / 'metafile.yml'
    for results, message in (
            (tmp_path / 'zoo_resluts.json', 'is not a file; give the results file that '
             'tools/model_zoo/zoo_results.py --write-results wrote'),
            (tmp_path, 'is not a file')):
        with pytest.raises(SystemExit) as exit_info:
            tool.main(['--results', str(results), '--out', str(out)])
        assert exit_info.value.code == 2
        assert f"error: --results {str(results)!r} {message}" in capsys.readouterr().err
    broken = tmp_path / 'broken.json'
    broken.write_text('{"models": [')
    with pytest.raises(SystemExit):
        tool.main(['--results', str(broken), '--out', str(out)])
    err = capsys.readouterr().err
    assert f'error: --results: {broken}: not a JSON results file' in err, err
    assert not out.exists()


def test_metafile_collection_readme_is_a_path_from_the_repository_root():
    """As mmpretrain's metafiles (``README: configs/resnet/README.md``): model-index tools
    resolve it from the repository root, where configs/README.md is the collection's page."""
    import yaml
    repo = CONFIGS.parent
    collections = yaml.safe_load((CONFIGS / 'metafile.yml').read_text())['Collections']
    assert [c['README'] for c in collections] == ['configs/README.md']
    assert (repo / collections[0]['README']).read_text().startswith('# Polynomial networks')


def test_get_flops_tool_names_an_input_the_model_does_not_take(capsys):
    """--shape 2 2 leaves a norm one value per channel: a traceback from inside the FLOP
    count's trace, now one line naming the input and --shape."""
    tool = load_tool('analysis_tools/get_flops')
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(CONFIGS / 'pdc_resnet8_1xb128-1400i_fashion-mnist.py'), '--shape', '2',
                   '2'])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        'tools/analysis_tools/get_flops.py: error: the model does not take a (1, 1, 2, 2) input '
        '(--shape 2 2): Expected more than 1 value per channel'), err


def test_get_flops_tool_prints_params_and_flops(capsys):
    tool = load_tool('analysis_tools/get_flops')
    tool.main([str(CONFIGS / 'resnet18_1xb128_cifar10.py')])
    out = capsys.readouterr().out
    assert 'input shape: (3, 32, 32)' in out and 'params: 11,173,962 (11.17M)' in out
    # CIFAR ResNet18: 0.557 GMACs (mmengine's multiply-accumulate count)
    assert 'flops: 556,659,712 (0.5567G)' in out
    tool.main([str(CONFIGS / 'pdc-comp_resnet18_1xb128_cifar10.py'), '--part', 'backbone',
               '--no-flops'])
    out = capsys.readouterr().out
    assert 'params: 4,257,223' in out and 'flops' not in out  # the head's 2,570 left out


def test_get_flops_counts_fashion_mnist_configs_at_28x28_as_the_zoo_table(capsys):
    """A Fashion-MNIST config's FLOPs by default are those of its 28×28 images (the zoo table's,
    docs/en/model_zoo.md), not of the 32×32 of CIFAR whose backbone it shares; the data regimes'
    subset wrappers read through to the wrapped dataset."""
    tool = load_tool('analysis_tools/get_flops')
    table = (Path(__file__).parents[1] / 'docs' / 'en' / 'model_zoo.md').read_text()
    rows = [line.split('|') for line in table.splitlines()
            if line.startswith('| ') and '_fashion-mnist' in line]
    assert len(rows) == 17
    for row in rows:
        config = row[3].strip().strip('`')
        tool.main([str(CONFIGS / f'{config}.py')])
        out = capsys.readouterr().out
        assert 'input shape: (1, 28, 28)' in out, (config, out)
        flops = int(out.split('flops: ')[1].split()[0].replace(',', ''))
        assert f'{flops / 1e6:.1f}' == row[5].strip(), (config, flops, row[5])
    lt = Config.fromfile(str(CONFIGS / 'pdc_resnet8_1xb128-1400i_fashion-mnist-lt-if100.py'))
    lt.val_dataloader = lt.test_dataloader = lt.train_dataloader  # the wrapped training set
    assert lt.test_dataloader.dataset.type == 'LongTailedDataset'
    assert default_input_shape(lt) == (1, 28, 28)
    # the other data keep their sizes: CIFAR, Speech Commands' 1×32×32 spectrograms, ImageNet
    for config, shape in [('resnet18_1xb128_cifar10.py', '(3, 32, 32)'),
                          ('pdc_resnet18_1xb128_speech-commands.py', '(1, 32, 32)'),
                          ('pdc_resnet18_8xb32_in1k.py', '(3, 224, 224)')]:
        tool.main([str(CONFIGS / config), '--no-flops'])
        assert f'input shape: {shape}' in capsys.readouterr().out, config


def test_run_suite_removes_a_failed_attempts_checkpoints_before_rerunning(tmp_path, capsys,
                                                                          monkeypatch):
    """tools/train.py refuses a new run in a folder that holds checkpoints: before a failed
    (config, seed) is trained again, run_one removes what its attempt left there, with a note;
    the test run is not given a training load_from (it tests the trained checkpoint)."""
    import json

    from mmpoly.zoo.fashion_mnist import METRICS_FILE, RECORD_FILE, SUITE, run_dir
    suite = load_tool('model_zoo/run_suite')
    config, folder = SUITE[0], run_dir(tmp_path, SUITE[0], 0)
    calls = []

    def fake_run(cmd, log):
        tool = Path(cmd[1]).name
        calls.append((tool, sorted(p.name for p in folder.iterdir()), cmd))
        if tool == 'test.py':
            Path(cmd[cmd.index('--out') + 1]).write_text(json.dumps({'accuracy/top1': 80.5}))
            return 0, 1.0
        step = 100 * len(calls)
        (folder / f'iter_{step}.pth').write_bytes(b'x')
        (folder / 'last_checkpoint').write_text(str(folder / f'iter_{step}.pth'))
        return (1 if len(calls) == 1 else 0), 2.0

    monkeypatch.setattr(suite, '_run', fake_run)
    extra = {'load_from': '/ckpt/pretrained.pth'}
    with pytest.raises(suite.SuiteError, match='failed with exit status 1'):
        suite.run_one(config, 0, tmp_path, 'hash', extra=extra)
    assert json.loads((folder / RECORD_FILE).read_text())['status'] == 'failed'
    assert capsys.readouterr().out == ''  # nothing to remove on the first attempt
    record = suite.run_one(config, 0, tmp_path, 'hash', extra=extra)
    assert capsys.readouterr().out == (
        f'{folder}: removed the checkpoints of an earlier attempt that did not finish '
        '(iter_100.pth, last_checkpoint) before training this run again from scratch\n')
    (_, first, _), (_, second, train_cmd), (_, _, test_cmd) = calls
    assert first == ['suite.log']
    assert second == sorted([RECORD_FILE, 'suite.log'])  # the failed attempt's record stays
    assert 'load_from=/ckpt/pretrained.pth' in train_cmd
    assert not any(arg.startswith('load_from=') for arg in test_cmd)
    assert record['status'] == 'complete' and record['top1'] == 80.5
    assert record['checkpoint'] == 'iter_200.pth' and (folder / METRICS_FILE).is_file()
    assert 'removed the checkpoints' in (folder / 'suite.log').read_text()
