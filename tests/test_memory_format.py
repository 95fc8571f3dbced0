"""``channels_last`` (mmpoly.engine.memory_format, ``tools/train.py / test.py --channels-last``):
the model stored channels-last before DDP wraps it, the same values and state dict as NCHW, the
main job's config using it, detectors refused."""
import copy
import re
import subprocess
import sys

import pytest
import torch
from helpers import REPO, TOOLS
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.runner import Runner
from mmpretrain.structures import DataSample
from test_tools import free_port, make_fashion_mnist_subset, run_tool, train, write_config

from mmpoly.engine import load_checkpoint_file
from mmpoly.engine.memory_format import (channels_last_before_wrapping, channels_last_option,
                                         check_channels_last, to_channels_last)
from mmpoly.utils.complexity import build_model

MAIN_JOB = REPO / 'configs' / 'pdc_resnet8_1xb128_fashion-mnist.py'
RUNNER_WRAP_MODEL = Runner.wrap_model


def _main_job_classifier() -> torch.nn.Module:
    cfg = Config.fromfile(str(MAIN_JOB))
    cfg.model.data_preprocessor = cfg.data_preprocessor
    torch.manual_seed(0)
    model = build_model(cfg)
    model.init_weights()
    return model


def _batch(size: int = 8) -> dict:
    generator = torch.Generator().manual_seed(1)
    return dict(inputs=torch.randint(0, 256, (size, 1, 28, 28), generator=generator).float(),
                data_samples=[DataSample().set_gt_label(i % 10) for i in range(size)])


def _is_channels_last(tensor: torch.Tensor) -> bool:
    return tensor.is_contiguous(memory_format=torch.channels_last)


def test_channels_last_option():
    assert channels_last_option(True) is True
    assert channels_last_option(False) is False and channels_last_option(None) is False
    for bad in ('yes', 1, 'channels_last'):
        with pytest.raises(ValueError, match=f'channels_last must be True or False, got '
                                             f'{re.escape(repr(bad))}'):
            channels_last_option(bad)


def test_the_main_job_config_ships_channels_last():
    assert Config.fromfile(str(MAIN_JOB)).channels_last is True


def test_the_model_is_stored_channels_last_with_the_same_state_and_outputs():
    nchw = _main_job_classifier()
    model = copy.deepcopy(nchw)
    count = to_channels_last(model)
    four_d = [t for t in (*model.parameters(), *model.buffers()) if t.dim() == 4]
    assert count == len(four_d) == 19  # the PDC-ResNet8's convolutions
    assert all(_is_channels_last(t) for t in four_d)
    # 3x3 convs of several input channels: channels-last and no longer NCHW
    assert sum(not t.is_contiguous() for t in four_d) >= 12
    state, reference = model.state_dict(), nchw.state_dict()
    assert list(state) == list(reference)
    assert all(torch.equal(state[k], reference[k]) for k in state)
    # the feature maps follow the weights; the values are the NCHW model's up to rounding
    maps = []
    model.backbone.layer2.register_forward_hook(lambda m, i, o: maps.append(o))
    x = torch.rand(4, 1, 28, 28) * 255
    model.eval(), nchw.eval()
    with torch.no_grad():
        out, expected = model(x, mode='tensor'), nchw(x, mode='tensor')
    assert _is_channels_last(maps[0])
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    # the checkpoint of a channels-last model loads into an NCHW one, strictly
    fresh = copy.deepcopy(nchw)
    fresh.load_state_dict(state, strict=True)
    assert all(p.is_contiguous() for p in fresh.parameters())


def test_a_training_step_gives_the_nchw_step_and_keeps_the_layout():
    nchw = _main_job_classifier()
    model = copy.deepcopy(nchw)
    to_channels_last(model)
    optim = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=5e-4))
    models = (model, nchw)
    wrappers = [build_optim_wrapper(m, optim) for m in models]
    for _ in range(2):  # the second step uses the momentum buffers
        losses = [m.train_step(_batch(), w)['loss'] for m, w in zip(models, wrappers)]
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), nchw.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4, msg=name)
        if p.dim() == 4:
            assert _is_channels_last(p), name


def test_check_channels_last_refuses_detector_configs_before_building():
    cfg = Config.fromfile(str(REPO / 'configs' / 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py'))
    assert check_channels_last(cfg) is False  # unset
    cfg.channels_last = True
    with pytest.raises(ValueError, match="channels_last=True: MaskRCNN is a detector"):
        check_channels_last(cfg)
    assert check_channels_last(Config.fromfile(str(MAIN_JOB))) is True
    with pytest.raises(ValueError, match="channels_last must be True or False, got 'yes'"):
        check_channels_last(Config(dict(channels_last='yes')))


def test_detectors_are_refused():
    cfg = Config.fromfile(str(REPO / 'configs' / 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py'))
    cfg.model.backbone.init_cfg = None
    detector = build_model(cfg)
    with pytest.raises(ValueError, match="channels_last=True: MaskRCNN is a detector, and mmcv's "
                                         'RoIAlign reads its feature maps as NCHW memory'):
        to_channels_last(detector)
    assert all(p.is_contiguous() for p in detector.parameters())  # left as it was


@pytest.mark.slow
def test_train_and_test_with_channels_last(tmp_path):
    """``tools/train.py --channels-last`` trains the tiny PDC-ResNet (the loss falls), its
    checkpoint tests with and without ``--channels-last`` to the same accuracy, and a bad
    ``channels_last`` value is one start-up message."""
    config = tmp_path / 'cfg.py'
    config.write_text(write_config(tmp_path, make_fashion_mnist_subset(tmp_path / 'fm'))
                      .read_text() + (
        '\ntrain_cfg = dict(by_epoch=True, max_epochs=6, val_interval=6)\n'
        "param_scheduler = dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=6)\n"
        "optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9))\n"))
    work_dir = tmp_path / 'wd'
    log = train(str(config), '--work-dir', str(work_dir), '--channels-last').stdout
    assert re.search(r'channels_last: \d+ 4-d parameters and buffers of the model stored '
                     'channels-last', log), log[-3000:]
    losses = [float(x) for x in re.findall(r'Epoch\(train\).*?\sloss: ([0-9.]+)', log)]
    assert len(losses) == 24, log[-3000:]
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.15, losses
    checkpoint = work_dir / 'epoch_6.pth'
    state = load_checkpoint_file(str(checkpoint))['state_dict']
    assert any(t.dim() == 4 and _is_channels_last(t) for t in state.values())
    accuracies = []
    for flag in ([], ['--channels-last']):
        out = tmp_path / f'metrics{len(flag)}.json'
        subprocess.run([sys.executable, str(TOOLS / 'test.py'), str(config), str(checkpoint),
                        '--work-dir', str(tmp_path / 'test'), '--out', str(out),
                        '--out-item', 'metrics', *flag], check=True, capture_output=True)
        accuracies.append(float(re.search(r'"accuracy/top1": ([0-9.]+)',
                                          out.read_text()).group(1)))
    assert accuracies[0] == pytest.approx(accuracies[1], abs=1e-6)  # the same predictions
    proc = subprocess.run([sys.executable, str(TOOLS / 'train.py'), str(config), '--work-dir',
                           str(tmp_path / 'bad'), '--cfg-options', 'channels_last=yes'],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "channels_last must be True or False, got 'yes'" in proc.stderr
    assert 'Traceback' not in proc.stderr
    detector = subprocess.run([sys.executable, str(TOOLS / 'test.py'),
                               str(REPO / 'configs' / 'mask-rcnn_resnet18_fpn_1x_coco.py'),
                               str(checkpoint), '--channels-last'], capture_output=True,
                              text=True)
    assert detector.returncode == 1, detector.stderr[-2000:]
    assert detector.stderr.strip().endswith(
        "tools/test.py: error: channels_last=True: MaskRCNN is a detector, and mmcv's RoIAlign "
        'reads its feature maps as NCHW memory (wrong RoI features from channels-last maps); '
        'allowed for classifiers only'), detector.stderr[-2000:]


@pytest.mark.slow
def test_ddp_builds_its_buckets_from_the_channels_last_parameters(tmp_path):
    """Two gloo processes: the model is stored channels-last before DDP wraps it, so no gradient
    is copied into a bucket of another layout (torch warns once per process if one is)."""
    config = write_config(tmp_path, make_fashion_mnist_subset(tmp_path / 'fm'))
    proc = run_tool(['bash', str(TOOLS / 'dist_train.sh'), str(config), '2', '--work-dir',
                     str(tmp_path / 'dist'), '--channels-last'], cwd=tmp_path,
                    env={'PYTHON': sys.executable, 'PORT': str(free_port())})
    log = proc.stdout
    assert 'GPU number: 2' in log and 'Epoch(train) [1][2/2]' in log, log[-3000:]
    assert log.count('channels_last: 12 4-d parameters') == 1  # rank 0 logs
    assert 'Grad strides do not match bucket view strides' not in log
    assert Runner.wrap_model is RUNNER_WRAP_MODEL  # nothing left patched in this process


def test_the_runner_is_patched_only_while_it_is_built():
    with channels_last_before_wrapping(Config(dict(channels_last=True))):
        assert Runner.wrap_model is not RUNNER_WRAP_MODEL
    assert Runner.wrap_model is RUNNER_WRAP_MODEL
    with channels_last_before_wrapping(Config(dict())):
        assert Runner.wrap_model is RUNNER_WRAP_MODEL
    with pytest.raises(ValueError, match='channels_last must be True or False'):
        with channels_last_before_wrapping(Config(dict(channels_last='on'))):
            pass
