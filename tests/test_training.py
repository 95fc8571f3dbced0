"""A short real training run on Fashion-MNIST with each 3-stage PDC-ResNet8 config that has no
zoo run (the main job's and the wider 3-epoch one), on a subset, their models channels-last as
the configs set: the loss falls and the classifier beats chance on held-out test images."""
import json
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
def test_main_job_end_to_end(tmp_path):
    """The main job as a user runs it (a short run: 1 epoch on 512 images; the test on the full
    10k images): it trains, tests, draws its curves and prints its summary. Running it again on
    the same WORK_DIR (the earlier run moved aside) is tests/test_gaps_main_job.py's, with a
    fake interpreter. Its 2 steps, in the learning rate's warm-up, learn little (14 % top-1):
    that the config learns is test_short_fashion_mnist_training_lowers_the_loss's subject."""
    work_dir = tmp_path / 'main_job'
    env = {**os.environ, 'WORK_DIR': f'{work_dir}/', 'MMPOLY_VENV': sys.prefix}
    short = ['--cfg-options', 'train_cfg.max_epochs=1', 'train_cfg.val_interval=1',
             'train_dataloader.dataset.indices=512', 'val_dataloader.dataset.indices=500']
    proc = subprocess.run(['bash', str(CONFIGS.parent / 'tools' / 'run_main_job.sh'), *short],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    accuracy = re.search(r'Fashion-MNIST test set \(10,000 images\): top-1 accuracy '
                         r'(\d+\.\d\d)%', proc.stdout)
    assert accuracy, proc.stdout[-3000:]
    metrics = json.loads((work_dir / 'test_metrics.json').read_text())
    assert f'{metrics["accuracy/top1"]:.2f}' == accuracy.group(1)
    assert 'moved it aside' not in proc.stderr
    assert 'parameters: 150,781\n' in proc.stdout  # the README's count
    assert f'curves (loss, lr, accuracy): {work_dir / "curves.png"}' in proc.stdout
    assert (work_dir / 'curves.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert (work_dir / 'last_checkpoint').read_text() == str(work_dir / 'epoch_1.pth')
