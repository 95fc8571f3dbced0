"""A short real training run on Fashion-MNIST with each 3-stage PDC-ResNet8 config that has no
zoo run (the main job's and the wider 3-epoch one), on a subset, their models channels-last as
the configs set: the loss falls and the classifier beats chance on held-out test images."""
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
