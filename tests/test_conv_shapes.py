"""tools/analysis_tools/conv_shapes.py: every convolution shape of a model, timed alone."""
import json
import math

import pytest
import torch
from helpers import CONFIGS, load_tool
from mmengine.analysis import FlopAnalyzer
from mmengine.config import Config
from torch import nn

from mmpoly.utils.complexity import build_model

PDC = 'pdc_resnet8_1xb128_fashion-mnist.py'
RESNET = 'resnet8_1xb128-1400i_fashion-mnist.py'


@pytest.fixture(scope='module')
def tool():
    return load_tool('analysis_tools/conv_shapes')


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_recorded_shapes_are_every_conv_call_with_mmengines_macs(tool):
    """One forward records each nn.Conv2d call once; the MACs of the recorded shapes add up to
    mmengine's count of the model's convolutions (FlopAnalyzer, an independent count)."""
    model = build_model(Config.fromfile(str(CONFIGS / PDC)))
    calls = tool.record_shapes(model, (1, 28, 28))
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert sum(calls.values()) == len(convs) == 19
    # only the stem's input, the image, needs no gradient
    assert [s.in_channels for s in calls if not s.input_grad] == [1]
    batch = 3
    with torch.no_grad():  # (the memory-lean term chains, autograd Functions, run with grad)
        flops = FlopAnalyzer(model.eval(), torch.randn(batch, 1, 28, 28)).by_operator()
    assert sum(n * s.macs(batch) for s, n in calls.items()) == flops['conv']
    stem = next(s for s in calls if not s.input_grad)
    assert stem.text() == f'1->{stem.out_channels} 3x3 s1 @28x28'
    # an ImageNet model at 32x32: 1x1 maps in its last stage, BN in training mode
    in1k = build_model(Config.fromfile(str(CONFIGS / 'resnet18_8xb32_in1k.py')))
    assert sum(tool.record_shapes(in1k, (3, 32, 32)).values()) == 20
    with pytest.raises(ValueError, match='calls no nn.Conv2d'):
        tool.record_shapes(nn.Sequential(nn.Flatten()), (1, 4, 4))


def test_a_shape_is_timed_forward_and_with_its_backward(tool):
    shape = tool.ConvShape(8, 6, 6, 4, 3, 3, (3, 3), (2, 2), (1, 1), (1, 1), 2, True, False)
    assert shape.macs(5) == 5 * 4 * 3 * 3 * (8 // 2) * 9
    assert shape.text() == '8->4 3x3 s2 g2 @6x6'
    # the training pass adds the backward convolutions (weight and, where needed, input
    # gradients: about 2-3x the forward's work) to the forward
    wide = tool.ConvShape(16, 16, 16, 16, 16, 16, (3, 3), (1, 1), (1, 1), (1, 1), 1, False,
                          True)
    for conv in (shape, wide):
        for channels_last in (False, True):
            forward, training = tool.time_shape(conv, 4, 'cpu', torch.float32, channels_last,
                                                min_run_time=0.05)
            assert training > 1.5 * forward, (conv.text(), channels_last, forward, training)


@pytest.mark.usefixtures('restore_threads')
def test_main_writes_each_models_shapes_and_totals(tool, tmp_path, capsys):
    out = tmp_path / 'convs.json'
    assert tool.main([str(CONFIGS / PDC), '--baseline', str(CONFIGS / RESNET), '--batch-size',
                      '2', '--min-run-time', '0.01', '--threads', '1', '--json',
                      str(out)]) == 0
    results = json.loads(out.read_text())
    assert results['settings']['dtype'] == 'float32' and results['settings']['batch_size'] == 2
    base, pdc = results['models']
    assert base['config'].endswith(RESNET) and pdc['config'].endswith(PDC)
    assert (base['baseline'], pdc['baseline']) == (True, False)
    for model in results['models']:
        rows = model['shapes']
        assert model['calls'] == sum(r['calls'] for r in rows)
        assert math.isclose(model['train_s'], sum(r['calls'] * r['train_s'] for r in rows))
        assert model['macs'] == sum(r['calls'] * r['macs'] for r in rows)
        # costliest first
        costs = [r['calls'] * r['train_s'] for r in rows]
        assert costs == sorted(costs, reverse=True)
    assert pdc['calls'] == 19
    printed = capsys.readouterr().out
    assert f"time {pdc['train_s'] / base['train_s']:.2f}x, MACs " \
           f"{pdc['macs'] / base['macs']:.2f}x the baseline's" in printed


@pytest.mark.usefixtures('restore_threads')
def test_one_config_without_a_baseline(tool, tmp_path, capsys):
    """Without --baseline, the configs alone are measured and no ratio is printed."""
    out = tmp_path / 'convs.json'
    assert tool.main([str(CONFIGS / PDC), '--batch-size', '2', '--min-run-time', '0.01',
                      '--threads', '1', '--json', str(out)]) == 0
    (pdc,) = json.loads(out.read_text())['models']
    assert pdc['config'].endswith(PDC) and not pdc['baseline'] and pdc['calls'] == 19
    printed = capsys.readouterr().out
    assert 'per step\n' in printed and 'baseline' not in printed


@pytest.mark.parametrize('argv, message', [
    ([], 'give one or more configs (and optionally --baseline), or a --preset'),
    (['--preset', 'nope'], "--preset: 'nope' is not a benchmark.py preset"),
    ([PDC, '--baseline', RESNET, '--dtype', 'float16'], '--dtype float16 needs --device cuda'),
    ([PDC, '--baseline', RESNET, '--batch-size', '0'], '--batch-size must be >= 1, got 0'),
    ([PDC, '--baseline', RESNET, '--min-run-time', '0'],
     '--min-run-time must be a finite number of seconds > 0, got 0.0'),
    # NaN passed "<= 0" and timed forever; inf never ends either
    ([PDC, '--min-run-time', 'nan'], '--min-run-time must be a finite number of seconds > 0, '
     'got nan'),
    ([PDC, '--min-run-time', 'inf'], 'got inf'),
    # written after minutes of timing: checked first
    ([PDC, '--json', '/proc/x/r.json'], "--json '/proc/x/r.json': the folder /proc is not "
     'writable'),
    ([PDC, '--baseline', RESNET, '--cudnn-benchmark'], '--cudnn-benchmark needs --device cuda'),
    (['no_such_config.py', '--baseline', RESNET], 'no_such_config.py'),
])
def test_bad_options(tool, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_presets_give_configs_batch_and_size(tool):
    args = tool.parse_args(['--preset', 'in1k-pdc', '--batch-size', '4'])
    assert args.baseline.endswith('resnet18_8xb32_in1k.py')
    assert [c.split('/')[-1] for c in args.configs] == ['pdc_resnet18_8xb32_in1k.py']
    assert (args.batch_size, args.input_size, args.device) == (4, [224, 224], 'cpu')
