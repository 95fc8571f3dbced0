"""A short real training run on Fashion-MNIST with each 3-stage PDC-ResNet8 config that has no
zoo run (the main job's and the wider 3-epoch one), on a subset, their models channels-last as
the configs set: the loss falls and the classifier beats chance on held-out test images."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config

from mmpoly.engine import build_runner
from mmpoly.utils import register_all_modules

CONFIGS = Path(__file__).resolve().parents[1] / 'configs'
MAIN_JOB = 'pdc_resnet8-w16_1xb256-4e_fashion-mnist.py'  # tools/run_main_job.sh
FMNIST = Path('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz')


@pytest.mark.slow
@pytest.mark.skipif(not FMNIST.is_file(), reason='tools/setup_env.sh installs Fashion-MNIST')
@pytest.mark.parametrize('config', [MAIN_JOB, 'pdc_resnet8_1xb128_fashion-mnist.py'])
def test_short_fashion_mnist_training_lowers_the_loss(config, tmp_path):
    register_all_modules()
    cfg = Config.fromfile(str(CONFIGS / config))
    cfg.work_dir = str(tmp_path)
    cfg.train_dataloader.dataset.indices = 3072  # the first 3,072 training images
    cfg.train_dataloader.batch_size = 64
    cfg.val_dataloader.dataset.indices = 1000  # the first 1,000 test images
    cfg.test_dataloader = cfg.val_dataloader
    cfg.train_cfg.max_epochs = 2
    cfg.train_cfg.val_interval = 1
    cfg.param_scheduler = [dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
                                end=10)]
    cfg.default_hooks.logger.interval = 10
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=1)
    cfg.randomness = dict(seed=0)
    runner = build_runner(cfg)
    conv = runner.model.backbone.layer3[0].conv2.weight  # 3x3, 64 -> 64 or 128 -> 128
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous(), \
        'the config sets channels_last = True'
    runner.train()

    losses = np.asarray(runner.message_hub.get_scalar('train/loss').data[0])
    assert len(losses) == 96  # 2 epochs of 48 iterations
    assert np.isfinite(losses).all()
    assert losses[-8:].mean() < 0.6 * losses[:8].mean(), losses
    accuracy = runner.message_hub.get_scalar('val/accuracy/top1').current()
    assert accuracy > 50.0  # 10 classes: chance is 10%


def test_the_main_job_trains_the_config_tested_here():
    script = (CONFIGS.parent / 'tools' / 'run_main_job.sh').read_text()
    assert f'\nCONFIG=configs/{MAIN_JOB}\n' in script


@pytest.mark.slow
@pytest.mark.skipif(not FMNIST.is_file(), reason='tools/setup_env.sh installs Fashion-MNIST')
@pytest.mark.skipif(not (Path(sys.prefix) / '.mmpoly-stamp').is_file(),
                    reason='the main job sets up its environment: run the tests in the venv '
                    'that tools/setup_env.sh made')
def test_main_job_run_again_moves_the_earlier_run_aside(tmp_path):
    """The main job twice on one WORK_DIR (a short run: 1 epoch on 512 images; the test on the
    full 10k images): tools/train.py refuses a new run where checkpoints are, so the second run
    moves the first one aside to WORK_DIR.<UTC time> and says so; both keep their results."""
    work_dir = tmp_path / 'main_job'
    env = {**os.environ, 'WORK_DIR': f'{work_dir}/', 'MMPOLY_VENV': sys.prefix}
    short = ['--cfg-options', 'train_cfg.max_epochs=1', 'train_cfg.val_interval=1',
             'train_dataloader.dataset.indices=512', 'val_dataloader.dataset.indices=500']

    def main_job() -> subprocess.CompletedProcess:
        proc = subprocess.run(['bash', str(CONFIGS.parent / 'tools' / 'run_main_job.sh'),
                               *short], env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert 'top-1 accuracy' in proc.stdout, proc.stdout[-3000:]
        return proc

    first = main_job()
    assert 'moved it aside' not in first.stderr
    second = main_job()
    (aside, ) = tmp_path.glob('main_job.*')
    assert re.fullmatch(r'main_job\.\d{8}T\d{6}Z', aside.name), aside
    assert (f'run_main_job.sh: {work_dir} holds an earlier run (its checkpoints); moved it aside '
            f'to {aside} so that this run starts afresh (pass --resume to continue that run '
            'instead)') in second.stderr, second.stderr[-3000:]
    for folder in (aside, work_dir):
        assert (folder / 'epoch_1.pth').is_file() and (folder / 'test_metrics.json').is_file()
        assert (folder / 'curves.png').is_file()
    assert (work_dir / 'last_checkpoint').read_text() == str(work_dir / 'epoch_1.pth')
