"""A short real training run on Fashion-MNIST (the main job's config, on a subset, its model
channels-last as the config sets): the loss falls and the classifier beats chance on held-out
test images."""
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config

from mmpoly.engine import build_runner
from mmpoly.utils import register_all_modules

CONFIG = Path(__file__).resolve().parents[1] / 'configs' / 'pdc_resnet8_1xb128_fashion-mnist.py'
FMNIST = Path('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz')


@pytest.mark.slow
@pytest.mark.skipif(not FMNIST.is_file(), reason='tools/setup_env.sh installs Fashion-MNIST')
def test_short_fashion_mnist_training_lowers_the_loss(tmp_path):
    register_all_modules()
    cfg = Config.fromfile(str(CONFIG))
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
    conv = runner.model.backbone.layer2[0].conv2.weight  # 3x3, 64 -> 64
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous(), \
        'the config sets channels_last = True'
    runner.train()

    losses = np.asarray(runner.message_hub.get_scalar('train/loss').data[0])
    assert len(losses) == 96  # 2 epochs of 48 iterations
    assert np.isfinite(losses).all()
    assert losses[-8:].mean() < 0.6 * losses[:8].mean(), losses
    accuracy = runner.message_hub.get_scalar('val/accuracy/top1').current()
    assert accuracy > 50.0  # 10 classes: chance is 10%
