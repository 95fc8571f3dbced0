"""Fail early and loudly: non-finite options, shape mismatches between data, backbone and head,
and the hook that stops training at the first non-finite gradient without checkpointing it."""
import math
from pathlib import Path
from typing import Dict, List

import pytest
import torch
from helpers import REPO
from mmengine.config import Config
from mmengine.model import BaseModel
from mmengine.runner import Runner
from mmpretrain.registry import MODELS
from torch import nn
from torch.utils.data import Dataset

from mmpoly.engine import ModelCheckHook, NonFiniteCheckHook, NonFiniteError



# --------------------------------------------------------------------------- options


@pytest.mark.parametrize('value', [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize('block', ['PDCBlock', 'PiNetBlock'])
def test_non_finite_scale_init_is_rejected(block: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf'scale_init must be a finite number, got {value}'):
        MODELS.build(dict(type=block, in_channels=8, out_channels=8, scale_init=value))


@pytest.mark.parametrize('value', [math.nan, math.inf])
def test_non_finite_dnl_temperature_is_rejected(value: float) -> None:
    with pytest.raises(ValueError, match=r'temperature must be a finite number'):
        MODELS.build(dict(type='DisentangledNonLocalBlock', in_channels=8, temperature=value))


def test_finite_scale_init_is_used() -> None:
    block = MODELS.build(dict(type='PDCBlock', in_channels=8, out_channels=8, scale_init=0.25))
    scales = [term.scale.item() for term in block.terms]
    assert scales and all(s == 0.25 for s in scales)


def test_input_channels_differing_from_backbone_in_channels_name_both() -> None:
    backbone = MODELS.build(dict(type='PDCResNetCIFAR', depth=None, stage_blocks=[1, 1],
                                 stage_channels=[8, 16], in_channels=3, out_indices=(1, )))
    with pytest.raises(ValueError) as error:
        backbone(torch.randn(2, 1, 32, 32))
    assert 'model.backbone.in_channels=3' in str(error.value)
    assert '(2, 1, 32, 32) (1 channels)' in str(error.value)
    assert backbone(torch.randn(2, 3, 32, 32))[-1].shape == (2, 16, 16, 16)


# --------------------------------------------------------------------------- hooks on a Runner


class ToyDataset(Dataset):

    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(index)
        return dict(inputs=torch.randn(4, generator=gen), target=torch.tensor(float(index % 2)))


class ExplodingModel(BaseModel):
    """A regression whose loss becomes NaN from training iteration ``nan_from`` (1-based) on."""

    def __init__(self, nan_from: int) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)
        self.nan_from = nan_from
        self.calls = 0

    def forward(self, inputs: List[torch.Tensor], target: List[torch.Tensor], mode: str = 'tensor'):
        x, y = torch.stack(list(inputs)), torch.stack(list(target))
        pred = self.out(self.body(x)).squeeze(-1)
        if mode == 'loss':
            self.calls += 1
            poison = math.nan if self.calls >= self.nan_from else 1.0
            return dict(loss=((pred - y)**2).mean() * poison)
        return [dict(pred=p) for p in pred]


def _runner(work_dir: Path, model: nn.Module, hooks: list) -> Runner:
    return Runner(
        model=model, work_dir=str(work_dir),
        train_dataloader=dict(dataset=ToyDataset(), batch_size=4,
                              sampler=dict(type='DefaultSampler', shuffle=False)),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01, momentum=0.9)),
        train_cfg=dict(by_epoch=False, max_iters=6),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1, by_epoch=False)),
        custom_hooks=hooks, randomness=dict(seed=0), default_scope='mmpretrain',
        experiment_name=f'checks_{work_dir.name}')


def test_non_finite_hook_stops_before_the_update_and_the_checkpoint(tmp_path: Path) -> None:
    model = ExplodingModel(nan_from=3)
    runner = _runner(tmp_path, model, [dict(type='NonFiniteCheckHook')])
    with pytest.raises(NonFiniteError) as error:
        runner.train()
    message = str(error.value)
    assert 'non-finite gradient at iteration 3' in message
    assert 'first in parameter out.weight' in message or 'first in parameter body.weight' in \
        message
    assert 'The update was not applied' in message
    assert sorted(p.name for p in tmp_path.glob('*.pth')) == ['iter_1.pth', 'iter_2.pth']
    assert all(torch.isfinite(p).all() for p in model.parameters())  # NaN never applied


def test_without_the_hook_nan_reaches_the_weights_and_checkpoints(tmp_path: Path) -> None:
    """What the hook prevents: mmengine alone trains on and checkpoints NaN weights."""
    model = ExplodingModel(nan_from=3)
    _runner(tmp_path, model, []).train()
    assert (tmp_path / 'iter_6.pth').is_file()
    assert not all(torch.isfinite(p).all() for p in model.parameters())


def test_the_hook_is_silent_on_a_finite_run(tmp_path: Path) -> None:
    model = ExplodingModel(nan_from=10**9)
    _runner(tmp_path, model, [dict(type='NonFiniteCheckHook')]).train()
    assert (tmp_path / 'iter_6.pth').is_file()


def test_mmpoly_configs_switch_the_checks_on() -> None:
    for config in ('pdc_resnet8_1xb128_fashion-mnist.py', 'nl_resnet18_1xb128_cifar100.py',
                   'mask-rcnn_pdc-resnet18_fpn_1x_coco.py'):
        types = [h.type for h in Config.fromfile(str(REPO / 'configs' / config)).custom_hooks]
        assert 'NonFiniteCheckHook' in types, config


class _Runner:
    """The parts of a Runner that ModelCheckHook reads."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model


def _classifier(head_in_channels: int) -> nn.Module:
    return MODELS.build(dict(
        type='ImageClassifier',
        backbone=dict(type='PDCResNetCIFAR', depth=None, stage_blocks=[1, 1],
                      stage_channels=[8, 16], out_indices=(1, )),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=head_in_channels)))


def test_head_in_channels_must_match_the_backbone_width() -> None:
    ModelCheckHook().before_run(_Runner(_classifier(16)))
    with pytest.raises(ValueError) as error:
        ModelCheckHook().before_run(_Runner(_classifier(512)))
    message = str(error.value)
    assert 'model.head.in_channels=512' in message
    assert 'model.backbone.stage_channels[1]=16' in message
