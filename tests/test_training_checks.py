"""Fail early and loudly: non-finite options, shape mismatches between data, backbone and head,
and the hook that stops training at the first non-finite gradient without checkpointing it."""
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import pytest
import torch
from helpers import REPO, experiment_name
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.optim import OptimWrapper
from mmengine.runner import Runner
from mmpretrain.registry import MODELS
from torch import nn
from test_precise_bn import BNRegression, Points, register_metric
from torch.utils.data import Dataset

from mmpoly.engine import ModelCheckHook, NonFiniteCheckHook, NonFiniteError
from mmpoly.engine.non_finite import all_finite

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
        experiment_name=experiment_name('checks'))


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


def test_a_diverging_step_is_told_from_a_bad_start(tmp_path: Path) -> None:
    """NaN after two updates: a diverging step (lower the lr); an infinite weight before any
    update: the checkpoint/initialisation, naming the first non-finite layer output."""
    with pytest.raises(NonFiniteError) as error:
        _runner(tmp_path / 'diverging', ExplodingModel(nan_from=3),
                [dict(type='NonFiniteCheckHook')]).train()
    assert error.value.cause == NonFiniteError.DIVERGING_STEP
    message = str(error.value)
    assert 'after 2 update(s) of this run' in message
    assert 'every layer output of the forward pass is finite' in message
    assert 'lower the learning rate' in message and 'not the cause' not in message

    model = ExplodingModel(nan_from=10**9)
    with torch.no_grad():
        model.body.weight[1, 2] = math.inf  # as a bad checkpoint would hold
    with pytest.raises(NonFiniteError) as error:
        _runner(tmp_path / 'bad_start', model, [dict(type='NonFiniteCheckHook')]).train()
    assert error.value.cause == NonFiniteError.BEFORE_UPDATE
    message = str(error.value)
    assert 'non-finite gradient at iteration 1 ' in message
    assert 'before any update of this run' in message
    assert 'first non-finite layer output of the forward pass: body (Linear) from finite ' \
        'inputs' in message
    assert 'the learning rate is not the cause' in message and 'Check the checkpoint' in message
    assert 'lower the learning rate' not in message
    assert not list((tmp_path / 'bad_start').glob('*.pth'))


class LoggedNaNModel(ExplodingModel):
    """A finite regression loss, plus from training iteration ``logged_nan_from`` on a constant
    NaN loss term (as a logged-only loss gone wrong): the gradients stay finite, so only the
    check of the losses can see it."""

    def __init__(self, logged_nan_from: int) -> None:
        super().__init__(nan_from=10**9)
        self.logged_nan_from = logged_nan_from

    def forward(self, inputs, target, mode: str = 'tensor'):
        out = super().forward(inputs, target, mode)
        if mode == 'loss':
            out['loss_logged'] = torch.tensor(
                math.nan if self.calls >= self.logged_nan_from else 0.5)
        return out


def test_a_non_finite_loss_with_finite_gradients_is_stopped(tmp_path: Path) -> None:
    runner = _runner(tmp_path, LoggedNaNModel(logged_nan_from=3),
                     [dict(type='NonFiniteCheckHook')])
    with pytest.raises(NonFiniteError) as error:
        runner.train()
    assert 'non-finite loss_logged (nan) at iteration 3;' in str(error.value), error.value
    assert sorted(p.name for p in tmp_path.glob('*.pth')) == ['iter_1.pth', 'iter_2.pth']


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


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_all_finite_agrees_with_a_check_per_element(dtype: torch.dtype) -> None:
    """NaN, +Inf and -Inf anywhere are found; the largest finite values are finite (a sum
    would overflow); empty and sparse tensors are fine."""
    big = torch.finfo(dtype).max
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(3, 4, generator=gen).to(dtype), torch.full((5, ), big, dtype=dtype),
            torch.full((2, 2), -big, dtype=dtype), torch.empty(0, dtype=dtype),
            torch.randn(7, generator=gen).to(dtype)]
    assert all_finite(base) and all_finite([]) and all_finite([torch.empty(0)])
    for value in (math.nan, math.inf, -math.inf):
        for index in (0, 1, 4):
            tensors = [t.clone() for t in base]
            tensors[index].view(-1)[-1] = value
            assert not all(bool(torch.isfinite(t).all()) for t in tensors)  # per element
            assert all_finite(tensors) is False, (value, index)
    if dtype in (torch.float32, torch.float64):
        sparse = torch.sparse_coo_tensor([[0, 2]], torch.tensor([1.0, math.nan], dtype=dtype),
                                         (4, ))
        assert not all_finite([base[0], sparse])
        assert all_finite([base[0], sparse.coalesce().abs().nan_to_num()])


def test_the_hook_reads_one_value_per_step_whatever_the_parameter_count() -> None:
    """Reading a tensor's value on the host (``bool``, ``item``: ``aten::_local_scalar_dense``)
    waits for a GPU; the gradient check does it once per step, not once per parameter."""
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(30)])  # 60 parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    runner = SimpleNamespace(model=model, optim_wrapper=OptimWrapper(optimizer))
    hook = NonFiniteCheckHook()
    hook.before_train(runner)
    model(torch.randn(4, 8)).square().mean().backward()
    try:
        with torch.profiler.profile() as profile:
            optimizer.step()
    finally:
        hook.after_train(runner)
    reads = [e for e in profile.events() if e.name == 'aten::_local_scalar_dense']
    assert len(reads) == 1


def test_mmpoly_configs_switch_the_checks_on() -> None:
    classifier = {'NonFiniteCheckHook', 'NonFiniteValidationHook', 'LrScaleCheckHook',
                  'RecomputeBNHook'}
    detector = {'NonFiniteCheckHook', 'NonFiniteValidationHook', 'LrScaleCheckHook'}
    for config, wanted in (('pdc_resnet8-w16_1xb256-4e_fashion-mnist.py', classifier),
                           ('pdc_resnet8_1xb128_fashion-mnist.py', classifier),
                           ('nl_resnet18_1xb128_cifar100.py', classifier),
                           ('pdc_resnet18_8xb32_in1k.py', classifier),
                           ('mask-rcnn_pdc-resnet18_fpn_1x_coco.py', detector)):
        types = [h.type for h in Config.fromfile(str(REPO / 'configs' / config)).custom_hooks]
        assert wanted <= set(types), config


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


# --------------------------------------------------------------------------- validation


class Square(nn.Module):

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


class PolyRegression(BNRegression):
    """BN followed by a degree-4 product: a running mean far off overflows float32 in eval mode
    while batch statistics stay finite."""

    def __init__(self) -> None:
        super().__init__()
        self.square1, self.square2 = Square(), Square()

    def forward(self, inputs, target=None, mode: str = 'tensor'):
        x = torch.stack(list(inputs))
        pred = self.out(self.square2(self.square1(self.bn(self.body(x))))).squeeze(-1)
        if mode == 'loss':
            return dict(loss=((pred - torch.stack(list(target)))**2).mean())
        return [dict(pred=p) for p in pred]


class StaleStatistics(Hook):
    """Moves the BN running mean far from the batch statistics after each training epoch."""

    priority = 'LOWEST'

    def after_train_epoch(self, runner) -> None:
        runner.model.bn.running_mean.fill_(-1e10)


def _val_runner(work_dir: Path, model: nn.Module, hooks: list) -> Runner:
    register_metric()
    return Runner(
        model=model, work_dir=str(work_dir),
        train_dataloader=dict(dataset=Points(), batch_size=16,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        val_dataloader=dict(dataset=Points(16), batch_size=8,
                            sampler=dict(type='DefaultSampler', shuffle=False)),
        val_evaluator=dict(type='mmpoly_test_MSE'), val_cfg=dict(),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.001)),
        train_cfg=dict(by_epoch=True, max_epochs=2, val_interval=1),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1,
                                           save_best='mse', rule='less')),
        custom_hooks=hooks, randomness=dict(seed=0), default_scope='mmpretrain',
        experiment_name=experiment_name('val_checks'))


def test_finite_validation_passes_and_saves_the_best(tmp_path: Path) -> None:
    runner = _val_runner(tmp_path, PolyRegression(), [dict(type='NonFiniteValidationHook')])
    runner.train()
    assert len(list(tmp_path.glob('best_mse_epoch_*.pth'))) == 1


def test_non_finite_validation_is_an_error_and_saves_no_best(tmp_path: Path) -> None:
    """Stale running statistics overflow the products in eval mode: the error names the first
    non-finite layer output and the cause (finite with batch statistics); no best checkpoint."""
    runner = _val_runner(tmp_path, PolyRegression(),
                         [dict(type='NonFiniteValidationHook'), StaleStatistics()])
    with pytest.raises(NonFiniteError) as error:
        runner.train()
    assert error.value.cause == NonFiniteError.RUNNING_STATS
    message = str(error.value)
    assert 'non-finite val outputs at batch 0 (after 4 training iteration(s))' in message
    assert re.search(r'first non-finite layer output: square2 \(Square\) from finite inputs '
                     r'\(largest \|x\| 1\.\d+e\+20\)', message), message
    assert 'every parameter and buffer is finite' in message
    assert "dict(type='RecomputeBNHook')" in message and 'No metric is computed' in message
    assert not list(tmp_path.glob('best_*.pth'))
    # the model's hooks are gone and the statistics as they were
    assert not runner.model.square2._forward_hooks
    assert (runner.model.bn.running_mean == -1e10).all()


def test_non_finite_buffer_before_any_update_names_it(tmp_path: Path) -> None:
    model = PolyRegression()
    model.bn.running_var[3] = math.nan  # as a bad checkpoint would hold
    runner = _val_runner(tmp_path, model, [dict(type='NonFiniteValidationHook')])
    with pytest.raises(NonFiniteError) as error:
        runner.val()
    assert error.value.cause == NonFiniteError.BEFORE_UPDATE
    message = str(error.value)
    assert '(after 0 training iteration(s)): first non-finite layer output: bn (BatchNorm1d) ' \
        'from finite inputs' in message
    assert 'the model holds non-finite values, first in bn.running_var' in message
    assert 'the learning rate is not the cause' in message
