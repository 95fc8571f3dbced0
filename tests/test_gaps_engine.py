"""Gaps of the training / testing machinery: start-up mistakes of tools/train.py and
tools/test.py that ended in a traceback or only after the whole run, the launch scripts'
process count, and RecomputeBNHook before checkpoints on the hook's own schedule."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import CONFIGS, TOOLS, load_tool
from mmengine.config import Config
from test_precise_bn import _runner, register_metric

from mmpoly.engine import RecomputeBNHook, load_checkpoint_file, recompute_bn_statistics
from mmpoly.utils.startup import StartupError

CONFIG = str(CONFIGS / 'pdc_resnet8_1xb128-1400i_fashion-mnist.py')


def test_train_flag_needs_are_one_message() -> None:
    """--auto-scale-lr without auto_scale_lr and --amp with a wrapper it cannot use were
    ValueError tracebacks; now StartupError (one message, exit status 1)."""
    train_tool = load_tool('train')
    cfg = Config.fromfile(CONFIG)
    cfg.auto_scale_lr = None
    with pytest.raises(StartupError, match='--auto-scale-lr needs auto_scale_lr'):
        train_tool.merge_args(cfg, train_tool.parse_args([CONFIG, '--auto-scale-lr']))
    cfg = Config.fromfile(CONFIG)
    cfg.optim_wrapper.type = 'OptimWrapperDict'
    with pytest.raises(StartupError, match="--amp needs optim_wrapper.type .*'OptimWrapperDict'"):
        train_tool.merge_args(cfg, train_tool.parse_args([CONFIG, '--amp']))


@pytest.mark.parametrize('flags, message', [
    (['--show-dir', 'x', '--interval', '0'], '--interval must be a whole number >= 1.*got 0'),
    (['--show-dir', 'x', '--interval', '-3'], '--interval must be a whole number >= 1.*got -3'),
    (['--show', '--wait-time', '-1'], '--wait-time must be a finite number of seconds >= 0'),
    (['--show', '--wait-time', 'nan'], '--wait-time must be a finite number of seconds >= 0'),
])
def test_test_tool_visualization_values_are_checked(flags, message, capsys) -> None:
    """--interval 0 divided by zero mid-test, a negative one drew no image without a word."""
    with pytest.raises(SystemExit):
        load_tool('test').parse_args([CONFIG, 'ckpt.pth', *flags])
    assert re.search(message, capsys.readouterr().err)


def test_test_tool_flags_the_config_cannot_serve_are_one_message() -> None:
    test_tool = load_tool('test')
    cfg = Config.fromfile(CONFIG)
    del cfg.default_hooks['visualization']
    with pytest.raises(StartupError, match='need a VisualizationHook'):
        test_tool.merge_args(cfg, test_tool.parse_args([CONFIG, 'c.pth', '--show-dir', 'v']))


def test_test_tool_refuses_an_out_file_it_cannot_write_before_testing(tmp_path: Path) -> None:
    """--out in a folder that cannot be created failed only after the whole test set."""
    blocker = tmp_path / 'file'
    blocker.write_text('')
    ckpt = tmp_path / 'c.pth'
    torch.save({}, ckpt)
    proc = subprocess.run([sys.executable, str(TOOLS / 'test.py'), CONFIG, str(ckpt),
                           '--work-dir', str(tmp_path / 'w'), '--out',
                           str(blocker / 'sub' / 'preds.pkl')],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "tools/test.py: error: --out '" in proc.stderr
    assert 'cannot be created or written to' in proc.stderr
    assert 'Traceback' not in proc.stderr


@pytest.mark.parametrize('script, args, bad', [('dist_train.sh', ['cfg.py', '0'], '0'),
                                               ('dist_test.sh', ['cfg.py', '2', 'ckpt.pth'],
                                                'ckpt.pth')])
def test_launch_scripts_check_the_process_count(script: str, args, bad: str) -> None:
    """NUM_PROCESSES 0, or a checkpoint path given in its place, went to torchrun as is."""
    proc = subprocess.run(['bash', str(TOOLS / script), *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert ('NUM_PROCESSES must be a whole number >= 1 (processes on this node), got '
            f"'{bad}'") in proc.stderr


@pytest.mark.parametrize('checkpoint', [
    dict(by_epoch=True, interval=2, save_begin=1),  # epochs 1 and 3
    dict(by_epoch=False, interval=4),  # iter_4.pth: mid-training in an epoch-based loop
])
def test_recompute_bn_before_checkpoints_on_the_hooks_schedule(tmp_path: Path,
                                                               checkpoint: dict) -> None:
    """The checkpoint after epoch 1 (save_begin=1) or after iteration 4 (an iteration
    CheckpointHook in an epoch loop) held stale running statistics: the hook assumed
    ``done % interval == 0`` and iteration checkpoints only in iteration loops. Now the saved
    statistics are those recompute_bn_statistics gives for the saved weights."""
    register_metric()
    hook = RecomputeBNHook(num_samples=32)
    runner = _runner(tmp_path / 'run', [hook], True, max_epochs=3, val_interval=10)
    ckpt_hook = next(h for h in runner.hooks if type(h).__name__.endswith('CheckpointHook'))
    ckpt_hook.by_epoch = checkpoint['by_epoch']
    ckpt_hook.interval = checkpoint['interval']
    ckpt_hook.save_begin = checkpoint.get('save_begin', 0)
    ckpt_hook.filename_tmpl = 'epoch_{}.pth' if checkpoint['by_epoch'] else 'iter_{}.pth'
    runner.train()
    name, at = ('epoch_1.pth', 4) if checkpoint['by_epoch'] else ('iter_4.pth', 4)
    saved = load_checkpoint_file(str(tmp_path / 'run' / name))['state_dict']
    model = type(runner.model)()
    model.load_state_dict(saved)
    model.train()
    recompute_bn_statistics(model, runner.train_dataloader, 32, seed=at)
    assert torch.allclose(saved['bn.running_var'], model.bn.running_var, atol=1e-6)
    assert torch.allclose(saved['bn.running_mean'], model.bn.running_mean, atol=1e-6)
