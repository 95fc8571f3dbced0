"""End-to-end tests of tools/train.py, tools/test.py and the launch scripts.

The slow ones train a tiny PDC ResNet on a 64 / 32 image subset of Fashion-MNIST (the Debian
package tools/setup_env.sh installs; random images if it is missing), written as the idx-ubyte
files mmpretrain's ``FashionMNIST`` reads, with a self-contained config in ``tmp_path``.
"""
import gzip
import json
import os
import os.path as osp
import re
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import mmengine
import numpy as np
import pytest
from helpers import (CONFIGS, FASHION_MNIST, REPO, TINY_PDC_MODEL, TOOLS, load_tool,
                     runtime_tail)

NUM_TRAIN, NUM_TEST = 64, 32
TIMEOUT_S = 300  # per tool run: a hang fails the test instead of stalling the suite

IDX_FILES = {  # split: (images, labels)
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    't10k': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}

CONFIG_TEMPLATE = '''\
# A tiny self-contained mmpretrain config for the tool tests.
default_scope = 'mmpretrain'
custom_imports = dict(imports=['mmpoly.models'], allow_failed_imports=False)

''' + TINY_PDC_MODEL + '''
pipeline = [dict(type='Resize', scale=32), dict(type='PackInputs')]
train_dataloader = dict(
    batch_size=16, num_workers=0, persistent_workers=False,
    dataset=dict(type='FashionMNIST', data_root={data_root!r}, split='train',
                 download=False, pipeline=pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=16, num_workers=0, persistent_workers=False,
    # mmpretrain 1.2.0's MNIST picks the t10k files by test_mode, not by split
    dataset=dict(type='FashionMNIST', data_root={data_root!r}, split='test', test_mode=True,
                 download=False, pipeline=pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-4))
param_scheduler = dict(type='MultiStepLR', by_epoch=True, milestones=[1], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs=1, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=16)
# nccl on purpose: without CUDA, mmpoly's launcher must switch to gloo.
''' + runtime_tail('1', log_interval=1, dist_backend='nccl')


def _write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as an idx-ubyte file (magic 0x08 0xNDIM, big-endian dims)."""
    header = struct.pack('>BBBB', 0, 0, 0x08, array.ndim)
    header += struct.pack(f'>{array.ndim}I', *array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def _read_idx_gz(path: Path, count: int) -> np.ndarray:
    """The first ``count`` items of a gzipped idx-ubyte file."""
    with gzip.open(path, 'rb') as f:
        data = f.read()
    ndim = data[3]
    shape = struct.unpack(f'>{ndim}I', data[4:4 + 4 * ndim])
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)
    return array[:count]


def make_fashion_mnist_subset(root: Path) -> Path:
    """Write ``NUM_TRAIN`` train and ``NUM_TEST`` test images as unzipped idx-ubyte files."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, count in (('train', NUM_TRAIN), ('t10k', NUM_TEST)):
        images_name, labels_name = IDX_FILES[split]
        if (FASHION_MNIST / f'{images_name}.gz').is_file():
            images = _read_idx_gz(FASHION_MNIST / f'{images_name}.gz', count)
            labels = _read_idx_gz(FASHION_MNIST / f'{labels_name}.gz', count)
        else:  # no Debian package: random images with a label-dependent brightness
            labels = rng.integers(0, 10, size=count, dtype=np.uint8)
            images = (rng.integers(0, 60, size=(count, 28, 28)) + 19 * labels[:, None, None])
        _write_idx(root / images_name, images.astype(np.uint8))
        _write_idx(root / labels_name, labels.astype(np.uint8))
    return root


def write_config(tmp_path: Path, data_root: Path) -> Path:
    config = tmp_path / 'tiny_pdc_fashionmnist.py'
    config.write_text(CONFIG_TEMPLATE.format(data_root=str(data_root)))
    return config


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def run_tool(args: List[str], cwd: Path = REPO,
             env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run a command; on failure show its output in the assertion message."""
    proc = subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    assert proc.returncode == 0, f'{args} exited {proc.returncode}:\n{proc.stdout[-6000:]}'
    return proc


def train(*args: str) -> subprocess.CompletedProcess:
    return run_tool([sys.executable, str(TOOLS / 'train.py'), *args])


def last_checkpoint(work_dir: Path) -> str:
    return (work_dir / 'last_checkpoint').read_text().strip()


# --------------------------------------------------------------------------- fast


@pytest.mark.parametrize('script', ['dist_train.sh', 'dist_test.sh', 'slurm_train.sh',
                                    'slurm_test.sh'])
def test_scripts_parse_and_are_executable(script: str) -> None:
    path = TOOLS / script
    assert os.access(path, os.X_OK), f'{script} is not executable'
    subprocess.run(['bash', '-n', str(path)], check=True)


def test_scripts_print_usage_without_arguments() -> None:
    for script in ('dist_train.sh', 'dist_test.sh', 'slurm_train.sh', 'slurm_test.sh'):
        proc = subprocess.run(['bash', str(TOOLS / script)], text=True, capture_output=True)
        assert proc.returncode == 2 and 'usage:' in proc.stderr, (script, proc.stderr)


def test_slurm_train_builds_srun_command(tmp_path: Path) -> None:
    """A fake srun records its arguments: options, WORK_DIR and extra args arrive intact."""
    fake = tmp_path / 'srun'
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    env = {'PATH': f'{tmp_path}{os.pathsep}{os.environ["PATH"]}', 'GPUS': '4',
           'GPUS_PER_NODE': '2', 'CPUS_PER_TASK': '3', 'SRUN_ARGS': '--time=10 --mem=4G',
           'PYTHON': sys.executable}
    proc = run_tool(['bash', str(TOOLS / 'slurm_train.sh'), 'part', 'job', 'my cfg.py',
                     'work dir', '--amp'], cwd=tmp_path, env=env)
    argv = proc.stdout.splitlines()
    argv = argv[argv.index('-p'):]  # drop set -x tracing, if any went to stdout
    assert argv[:2] == ['-p', 'part']
    for option in ('--job-name=job', '--gres=gpu:2', '--ntasks=4', '--ntasks-per-node=2',
                   '--cpus-per-task=3', '--kill-on-bad-exit=1', '--time=10', '--mem=4G'):
        assert option in argv
    tail = argv[argv.index(sys.executable):]
    assert tail == [sys.executable, '-u', str(TOOLS / 'train.py'), 'my cfg.py', '--work-dir',
                    'work dir', '--launcher', 'slurm', '--amp']

    env['GRES'] = ''
    proc = run_tool(['bash', str(TOOLS / 'slurm_test.sh'), 'part', 'job', 'cfg.py', 'ck.pth',
                     '--out', 'r.pkl'], cwd=tmp_path, env=env)
    argv = proc.stdout.splitlines()
    assert not any(a.startswith('--gres') for a in argv)
    assert argv[argv.index(sys.executable):] == [
        sys.executable, '-u', str(TOOLS / 'test.py'), 'cfg.py', 'ck.pth', '--launcher', 'slurm',
        '--out', 'r.pkl']


def test_tool_argument_sets() -> None:
    """The flags of mmpretrain 1.2.0's tools/train.py and tools/test.py are accepted."""
    train_tool = load_tool('train')
    test_tool = load_tool('test')
    args = train_tool.parse_args([
        'cfg.py', '--work-dir', 'wd', '--resume', '--amp', '--no-validate', '--auto-scale-lr',
        '--no-pin-memory', '--no-persistent-workers', '--cfg-options', 'a.b=1',
        '--launcher', 'pytorch', '--local-rank', '1'])
    assert args.resume == 'auto' and args.amp and args.no_validate and args.auto_scale_lr
    assert args.cfg_options == {'a.b': 1} and args.launcher == 'pytorch'
    assert train_tool.parse_args(['cfg.py', '--resume', 'x.pth']).resume == 'x.pth'
    assert train_tool.parse_args(['cfg.py']).resume is None
    args = test_tool.parse_args([
        'cfg.py', 'ck.pth', '--work-dir', 'wd', '--out', 'r.pkl', '--out-item', 'metrics',
        '--cfg-options', 'a=1', '--show-dir', 'vis', '--show', '--interval', '3',
        '--wait-time', '0.5', '--no-pin-memory', '--tta', '--launcher', 'slurm',
        '--local_rank', '0'])
    assert (args.out_item, args.interval, args.wait_time, args.launcher) == ('metrics', 3, 0.5,
                                                                             'slurm')
    with pytest.raises(SystemExit):
        test_tool.parse_args(['cfg.py', 'ck.pth', '--out-item', 'pred'])  # needs --out


def test_no_validate_drops_validation_after_cfg_options(capsys: pytest.CaptureFixture) -> None:
    """--no-validate with --cfg-options for the validation loader (as a shared launch script
    passes them to every run): the options merge, then validation is removed, and the options
    that have no effect are named. It was a TypeError of mmengine's merge into a removed
    section."""
    from mmengine.config import Config
    train_tool = load_tool('train')
    cfg = Config.fromfile(str(CONFIGS / 'resnet18_1xb128_cifar10.py'))
    args = train_tool.parse_args([
        'cfg.py', '--no-validate', '--cfg-options', 'val_dataloader.num_workers=0',
        'val_evaluator.topk=[1]', 'train_cfg.max_epochs=2', 'train_dataloader.num_workers=0'])
    cfg = train_tool.merge_args(cfg, args)
    assert (cfg.val_cfg, cfg.val_dataloader, cfg.val_evaluator) == (None, None, None)
    assert cfg.train_cfg.max_epochs == 2 and cfg.train_dataloader.num_workers == 0
    assert cfg.test_dataloader is not None  # testing after training is not validation
    assert capsys.readouterr().out == (
        'tools/train.py: --no-validate: no validation, so these --cfg-options have no effect: '
        'val_dataloader.num_workers, val_evaluator.topk\n')
    train_tool.merge_args(Config.fromfile(str(CONFIGS / 'resnet18_1xb128_cifar10.py')),
                          train_tool.parse_args(['cfg.py', '--no-validate']))
    assert capsys.readouterr().out == ''  # nothing to name


# --------------------------------------------------------------------------- slow


@pytest.fixture(scope='module')
def tiny_setup(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """Data, config and a 1-epoch training run shared by the slow tests of this module."""
    root = tmp_path_factory.mktemp('tools')
    data_root = make_fashion_mnist_subset(root / 'fashion-mnist')
    config = write_config(root, data_root)
    work_dir = root / 'train_1epoch'
    proc = train(str(config), '--work-dir', str(work_dir))
    return dict(root=root, config=config, work_dir=work_dir, log=proc.stdout)


@pytest.mark.slow
def test_train_one_epoch_writes_checkpoint(tiny_setup: Dict[str, Path]) -> None:
    work_dir = tiny_setup['work_dir']
    assert (work_dir / 'epoch_1.pth').is_file()
    assert last_checkpoint(work_dir).endswith('epoch_1.pth')
    log = str(tiny_setup['log'])
    assert 'Epoch(train) [1][4/4]' in log
    assert re.search(r'Epoch\(val\) \[1\]\[2/2\]\s+accuracy/top1: \d', log), log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize('resume_arg', ['auto', 'path'])
def test_train_resume_continues_to_epoch_2(tiny_setup: Dict[str, Path], tmp_path: Path,
                                           resume_arg: str) -> None:
    """--resume (latest in the work dir) and --resume PATH load the checkpoint safely."""
    work_dir = tmp_path / 'resumed'
    shutil.copytree(tiny_setup['work_dir'], work_dir)
    if resume_arg == 'auto':
        resume = ['--resume']
    else:
        resume = ['--resume', str(tiny_setup['work_dir'] / 'epoch_1.pth')]
        (work_dir / 'last_checkpoint').unlink()  # PATH, not the work dir, must be used
    proc = train(str(tiny_setup['config']), '--work-dir', str(work_dir), *resume,
                 '--cfg-options', 'train_cfg.max_epochs=2')
    assert 'Loads checkpoint by local_safe backend' in proc.stdout
    assert 'resumed epoch: 1, iter: 4' in proc.stdout
    assert 'Epoch(train) [1]' not in proc.stdout
    assert 'Epoch(train) [2][4/4]' in proc.stdout
    assert (work_dir / 'epoch_2.pth').is_file()


@pytest.mark.slow
def test_resume_with_nothing_to_resume_starts_from_the_configs_load_from(
        tiny_setup: Dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A job script that always passes --resume: on its first start (an empty work_dir) the run
    starts from the config's load_from, loaded strictly, not from scratch; a load_from that is
    missing is one start-up message then, and no concern once there is a checkpoint to resume."""
    import torch
    pretrained = tiny_setup['work_dir'] / 'epoch_1.pth'
    config = tmp_path / 'finetune.py'
    config.write_text(f'_base_ = [{str(tiny_setup["config"])!r}]\n'
                      f'load_from = {str(pretrained)!r}\n')
    frozen = ['optim_wrapper.optimizer.lr=0', 'optim_wrapper.optimizer.momentum=0',
              'optim_wrapper.optimizer.weight_decay=0']
    work_dir = tmp_path / 'work'
    proc = train(str(config), '--work-dir', str(work_dir), '--resume', '--no-validate',
                 '--cfg-options', *frozen)
    assert (f"no checkpoint (last_checkpoint, epoch_*.pth, iter_*.pth) in {work_dir}; starting "
            f"a new run from the config's load_from {pretrained}.") in proc.stdout, \
        proc.stdout[-3000:]
    assert f'Load checkpoint from {pretrained}' in proc.stdout
    assert 'resumed epoch' not in proc.stdout and 'training from scratch' not in proc.stdout
    # lr 0: the trained weights are the loaded ones (BN statistics aside)
    start = torch.load(pretrained, map_location='cpu', weights_only=False)['state_dict']
    end = torch.load(work_dir / 'epoch_1.pth', map_location='cpu',
                     weights_only=False)['state_dict']
    weights = [k for k in start if k.endswith('.weight')]
    assert len(weights) > 10
    for key in weights:
        assert torch.equal(start[key], end[key]), key

    # in-process from here (no run is trained): the same load_from is loaded strictly, so
    # weights of another width stop the run before its first iteration
    train_tool = load_tool('train')
    with pytest.raises(SystemExit) as exit_info:
        train_tool.main([str(config), '--work-dir', str(tmp_path / 'wide'), '--resume',
                         '--no-validate', '--cfg-options', 'model.backbone.stage_channels=[8,24]'])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and str(pretrained) in err, err[-3000:]
    assert 'do not fit the model' in err and 'with another shape' in err
    assert 'tools/train.py --non-strict' in err
    assert not any((tmp_path / 'wide').rglob('*.pth'))

    # a missing load_from: one message before anything is built, on an empty work_dir only
    missing = tmp_path / 'gone.pth'
    config.write_text(f'_base_ = [{str(tiny_setup["config"])!r}]\n'
                      f'load_from = {str(missing)!r}\n')
    empty = tmp_path / 'empty'
    with pytest.raises(SystemExit) as exit_info:
        train_tool.main([str(config), '--work-dir', str(empty), '--resume'])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1, err[-3000:]
    assert f"load_from {str(missing)!r} does not exist" in err, err[-3000:]
    assert 'no checkpoint to resume' in err and 'Traceback' not in err
    assert not empty.exists()
    proc = train(str(config), '--work-dir', str(work_dir), '--resume', '--no-validate',
                 '--cfg-options', 'train_cfg.max_epochs=2', *frozen)
    assert f'Auto resumed from the latest checkpoint {work_dir / "epoch_1.pth"}.' in proc.stdout
    assert 'resumed epoch: 1' in proc.stdout and (work_dir / 'epoch_2.pth').is_file()


@pytest.mark.slow
def test_train_load_from_and_pretrained_init(tiny_setup: Dict[str, Path],
                                             tmp_path: Path) -> None:
    """load_from and init_cfg=dict(type='Pretrained') read the mmengine checkpoint safely."""
    ckpt = str(tiny_setup['work_dir'] / 'epoch_1.pth')
    proc = train(str(tiny_setup['config']), '--work-dir', str(tmp_path / 'finetune'),
                 '--no-validate', '--cfg-options', f'load_from={ckpt}',
                 'model.backbone.init_cfg.type=Pretrained',
                 f'model.backbone.init_cfg.checkpoint={ckpt}',
                 'model.backbone.init_cfg.prefix=backbone.')
    # load_from goes through mmengine's (patched) loader; the backbone's Pretrained init reads
    # the file with mmpoly.fileio's safe loader and reports what it loaded
    assert proc.stdout.count(f'Loads checkpoint by local_safe backend from path: {ckpt}') == 1
    assert re.search(rf'Pretrained: loaded all \d+ backbone tensors of \w+ from {re.escape(ckpt)}',
                     proc.stdout), proc.stdout[-3000:]
    assert f'Load checkpoint from {ckpt}' in proc.stdout
    assert (tmp_path / 'finetune' / 'epoch_1.pth').is_file()


@pytest.mark.slow
def test_test_tool_reports_accuracy(tiny_setup: Dict[str, Path], tmp_path: Path) -> None:
    ckpt = tiny_setup['work_dir'] / 'epoch_1.pth'
    out = tmp_path / 'metrics.json'
    proc = run_tool([sys.executable, str(TOOLS / 'test.py'), str(tiny_setup['config']),
                     str(ckpt), '--work-dir', str(tmp_path / 'test'), '--out', str(out),
                     '--out-item', 'metrics'])
    logged = re.search(r'Epoch\(test\) \[2/2\]\s+accuracy/top1: (\d+\.\d+)', proc.stdout)
    assert logged, proc.stdout[-3000:]
    metrics = json.loads(out.read_text())
    # the --out file holds the metric the evaluator logged (not a default or a stale value)
    assert metrics['accuracy/top1'] == pytest.approx(float(logged.group(1)), abs=1e-4)


@pytest.mark.slow
def test_dist_train_two_gloo_processes(tiny_setup: Dict[str, Path], tmp_path: Path) -> None:
    """tools/dist_train.sh CONFIG 2 on the CPU: gloo, DDP without device_ids, collected val.

    Run from ``tmp_path``: mmengine's CPU result collection makes ``.dist_test/`` in the
    current directory, which should not land in the repository.
    """
    work_dir = tmp_path / 'dist'
    proc = run_tool(['bash', str(TOOLS / 'dist_train.sh'), str(tiny_setup['config']), '2',
                     '--work-dir', str(work_dir)], cwd=tmp_path,
                    env={'PYTHON': sys.executable, 'PORT': str(free_port())})
    log = proc.stdout
    for rank in (0, 1):
        assert f'[mmpoly] rank {rank}/2 (local rank {rank}): gloo process group' in log, log
    tail = log[-4000:]
    assert 'Distributed launcher: pytorch' in log, tail
    assert 'GPU number: 2' in log, tail  # mmengine's name for the world size
    assert "backend='gloo'" in log or "'backend': 'gloo'" in log, tail
    assert 'Epoch(train) [1][2/2]' in log, tail  # 64 images, 2 ranks x 2 iterations of 16
    # both ranks' 16 predictions are collected on rank 0 and evaluated
    assert re.search(r'Epoch\(val\) \[1\]\[1/1\]\s+accuracy/top1: \d', log), log[-3000:]
    assert (work_dir / 'epoch_1.pth').is_file(), tail
    assert osp.isdir(tmp_path / '.dist_test'), tail


@pytest.mark.slow
def test_dist_test_collects_predictions_of_both_ranks(tiny_setup: Dict[str, Path],
                                                      tmp_path: Path) -> None:
    """tools/dist_test.sh CONFIG CKPT 2: each rank predicts 16 images, rank 0 dumps all 32."""
    preds = tmp_path / 'preds.pkl'
    proc = run_tool(['bash', str(TOOLS / 'dist_test.sh'), str(tiny_setup['config']),
                     str(tiny_setup['work_dir'] / 'epoch_1.pth'), '2', '--work-dir',
                     str(tmp_path / 'dist_test'), '--out', str(preds)], cwd=tmp_path,
                    env={'PYTHON': sys.executable, 'PORT': str(free_port())})
    for rank in (0, 1):
        assert f'[mmpoly] rank {rank}/2 (local rank {rank}): gloo process group' in proc.stdout
    assert re.search(r'Epoch\(test\) \[1/1\]\s+accuracy/top1: \d', proc.stdout), \
        proc.stdout[-3000:]
    results = mmengine.load(str(preds))
    assert len(results) == NUM_TEST
    assert sorted(int(r['sample_idx']) for r in results) == list(range(NUM_TEST))
