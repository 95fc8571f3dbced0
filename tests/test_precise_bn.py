"""RecomputeBNHook: the recomputed statistics against an independent computation, the random
number generators and the weights left untouched, when it runs in epoch- and iteration-based
loops, and the checks of the learning-rate scaling."""
import logging
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch
from helpers import experiment_name
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch import nn
from torch.utils.data import DataLoader, Dataset

from mmpoly.engine import (LrScaleCheckHook, RecomputeBNHook, load_checkpoint_file,
                           recompute_bn_statistics)


class Points(Dataset):
    """64 four-dimensional points (seeded), far from zero mean / unit variance."""

    def __init__(self, size: int = 64) -> None:
        gen = torch.Generator().manual_seed(1)
        self.x = torch.randn(size, 4, generator=gen) * 3.0 + 5.0
        self.y = (self.x.sum(1) > 20).float()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        return dict(inputs=self.x[index], target=self.y[index])


class BNRegression(BaseModel):
    """Linear → BN → ReLU → Linear, after a BN kept in eval mode (as ``norm_eval``)."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.BatchNorm1d(4)
        self.body = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 1)

    def train(self, mode: bool = True) -> 'BNRegression':
        super().train(mode)
        self.frozen.eval()
        return self

    def forward(self, inputs, target=None, mode: str = 'tensor'):
        x = torch.stack(list(inputs)) if isinstance(inputs, (list, tuple)) else inputs
        pred = self.out(torch.relu(self.bn(self.body(self.frozen(x))))).squeeze(-1)
        if mode == 'loss':
            return dict(loss=((pred - torch.stack(list(target)))**2).mean())
        if mode == 'predict':
            return [dict(pred=p) for p in pred]
        return pred


def _loader(dataset: Dataset, batch_size: int = 16) -> DataLoader:
    from mmengine.dataset import pseudo_collate
    return DataLoader(dataset, batch_size=batch_size, collate_fn=pseudo_collate)


def test_statistics_are_the_mean_of_the_batch_statistics() -> None:
    torch.manual_seed(0)
    model, data = BNRegression().train(), Points()
    frozen = {k: v.clone() for k, v in model.frozen.state_dict().items()}
    used = recompute_bn_statistics(model, _loader(data), num_samples=48, seed=7)
    assert used == 48
    # independently: the same seeded subset, 3 batches of 16, per-batch mean / unbiased var
    order = torch.randperm(64, generator=torch.Generator().manual_seed(7))[:48]
    with torch.no_grad():
        feats = model.body(model.frozen(data.x[order]))
    batches = feats.view(3, 16, 8)
    torch.testing.assert_close(model.bn.running_mean, batches.mean(1).mean(0))
    torch.testing.assert_close(model.bn.running_var, batches.var(1, unbiased=True).mean(0))
    assert model.bn.momentum == 0.1  # restored
    for key, value in model.frozen.state_dict().items():  # eval-mode BN keeps its statistics
        assert torch.equal(value, frozen[key]), key


def test_random_number_generators_are_restored() -> None:
    model = BNRegression().train()
    torch.manual_seed(3)
    np.random.seed(3)
    recompute_bn_statistics(model, _loader(Points()), num_samples=32)
    after = (torch.rand(3), np.random.rand(3))
    torch.manual_seed(3)
    np.random.seed(3)
    assert torch.equal(after[0], torch.rand(3)) and np.array_equal(after[1], np.random.rand(3))


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match='num_samples must be a positive int, got 0'):
        RecomputeBNHook(num_samples=0)
    with pytest.raises(ValueError, match="seed must be an int, got '1'"):
        RecomputeBNHook(seed='1')
    with pytest.raises(ValueError, match='num_samples must be a positive int'):
        recompute_bn_statistics(BNRegression(), _loader(Points()), num_samples=-5)


def _runner(work_dir: Path, hooks: List[dict], by_epoch: bool, **train_cfg) -> Runner:
    loop = dict(by_epoch=True, max_epochs=2, val_interval=2) if by_epoch else \
        dict(by_epoch=False, max_iters=6, val_interval=3)
    loop.update(train_cfg)
    torch.manual_seed(0)  # the same initial weights in every run
    return Runner(
        model=BNRegression(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=Points(), batch_size=16,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        val_dataloader=dict(dataset=Points(16), batch_size=8,
                            sampler=dict(type='DefaultSampler', shuffle=False)),
        val_evaluator=dict(type='mmpoly_test_MSE'), val_cfg=dict(),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01, momentum=0.9)),
        train_cfg=loop,
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1 if by_epoch else 6,
                                           by_epoch=by_epoch)),
        custom_hooks=hooks, randomness=dict(seed=0), default_scope='mmpretrain',
        experiment_name=experiment_name('precise_bn'))


def register_metric() -> None:
    from mmengine.evaluator import BaseMetric
    from mmpretrain.registry import METRICS

    if 'mmpoly_test_MSE' in METRICS.module_dict:
        return

    @METRICS.register_module(name='mmpoly_test_MSE')
    class MSE(BaseMetric):

        def process(self, data_batch, data_samples) -> None:
            for sample, target in zip(data_samples, data_batch['target']):
                self.results.append(float((sample['pred'] - target)**2))

        def compute_metrics(self, results: list) -> dict:
            return dict(mse=float(np.mean(results)))


@pytest.mark.parametrize('by_epoch', [True, False])
def test_hook_runs_before_validation_and_checkpoints_and_leaves_the_weights(
        tmp_path: Path, by_epoch: bool) -> None:
    """Weights bit-identical to a run without the hook; the BN statistics are recomputed (epoch
    loop: after epoch 1 for its checkpoint, after epoch 2 for validation and the last checkpoint;
    iteration loop: at iterations 3 (validation) and 6) and are those the checkpoint holds."""
    register_metric()
    plain = _runner(tmp_path / 'plain', [], by_epoch)
    plain.train()
    hook = RecomputeBNHook(num_samples=32)
    runner = _runner(tmp_path / 'hooked', [hook], by_epoch)
    runner.train()
    assert len(hook.seconds) == 2
    ours, theirs = runner.model.state_dict(), plain.model.state_dict()
    for key in ours:
        if key.startswith('bn.running') or key == 'bn.num_batches_tracked':
            continue
        assert torch.equal(ours[key], theirs[key]), key
    assert not torch.allclose(ours['bn.running_var'], theirs['bn.running_var'])
    last = 'epoch_2.pth' if by_epoch else 'iter_6.pth'
    saved = load_checkpoint_file(str(tmp_path / 'hooked' / last))['state_dict']
    assert torch.equal(saved['bn.running_var'], ours['bn.running_var'])


def test_lr_scale_check_warns_only_when_the_batch_differs_and_is_not_scaled(
        tmp_path: Path) -> None:
    messages = []
    for name, auto in (('same', dict(base_batch_size=16)), ('other', dict(base_batch_size=256)),
                       ('scaled', dict(base_batch_size=256, enable=True))):
        runner = _runner(tmp_path / name, [LrScaleCheckHook()], True, max_epochs=1)
        runner.auto_scale_lr = auto
        logger = runner.logger
        records: List[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.getMessage())
        logger.addHandler(handler)
        try:
            LrScaleCheckHook().before_train(runner)
        finally:
            logger.removeHandler(handler)
        messages.append([m for m in records if 'NOT scaled' in m])
    assert messages[0] == [] and messages[2] == []
    (warning, ) = messages[1]
    assert 'set for 256 images per step' in warning and 'this run uses 16' in warning
    assert 'scale it by 0.0625' in warning
