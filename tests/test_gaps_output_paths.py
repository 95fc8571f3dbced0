"""Gaps of the deployment and analysis tools found by an audit (2026-12-07): an output path that
is an input of the command (pytorch2onnx.py --out CHECKPOINT wrote the ONNX graph over the
weights), or that cannot be written, was found only after minutes of work, in a traceback, or not
at all; a config without a buildable model, a checkpoint that cannot be loaded and a non-finite
PyTorch output ended in tracebacks. Each is now one message.
"""
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from helpers import CONFIGS, REPO, load_tool

FASHION = CONFIGS / 'pdc_resnet8_1xb128-1400i_fashion-mnist.py'
CIFAR = CONFIGS / 'pdc-comp_resnet18_1xb128_cifar10.py'
CIFAR_BASELINE = CONFIGS / 'resnet18_1xb128_cifar10.py'
UNBUILDABLE = {
    'bad_model.py': ("model = dict(type='Nope')", "model.type 'Nope' of config"),
    'bad_backbone.py': ("model = dict(backbone=dict(type='PDCResNetCIFA'))",
                        "model.backbone.type 'PDCResNetCIFA' of config"),
}


def _one_error(call: Callable[[], Any], capsys: pytest.CaptureFixture, status: int = 2) -> str:
    """stderr of ``call()``, which exits (or returns) ``status`` with one error, no traceback."""
    try:
        code = call()
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == status
    err = capsys.readouterr().err
    assert 'Traceback' not in err and err.count('error') == 1, err
    return err


def test_pytorch2onnx_refuses_to_write_over_its_checkpoint_or_config(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('deployment/pytorch2onnx')
    checkpoint = tmp_path / 'weights.pth'
    checkpoint.write_bytes(b'the weights')
    err = _one_error(lambda: tool.main([str(FASHION), str(checkpoint), '--out',
                                        str(tmp_path / '.' / 'weights.pth')]), capsys)
    assert f"is CHECKPOINT '{checkpoint}', which this command reads: writing there would " \
        'replace it' in err, err
    assert checkpoint.read_bytes() == b'the weights'
    config = tmp_path / 'config.py'
    config.write_text(FASHION.read_text())
    err = _one_error(lambda: tool.main([str(config), '--out', str(config)]), capsys)
    assert f"is CONFIG '{config}', which this command reads" in err, err
    # an ONNX model under a checkpoint's name would be read back as one (and refused)
    out = tmp_path / 'exported.pth'
    err = _one_error(lambda: tool.main([str(config), '--out', str(out)]), capsys)
    assert (f"--out '{out}': .pth and .pt name PyTorch checkpoints, and the file would hold an "
            'ONNX model; give a .onnx file') in err, err
    assert not out.exists()


def test_output_paths_are_checked_before_the_work(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    """benchmark.py --json, poly_degree.py --json and plot_curves.py --out are written at the
    end: a folder, a path under a file or an input of the command is refused at the start."""
    a_file = tmp_path / 'a_file'
    a_file.write_text('')
    benchmark = load_tool('analysis_tools/benchmark')
    base = [str(CIFAR), '--baseline', str(CIFAR_BASELINE)]
    err = _one_error(lambda: benchmark.parse_args([*base, '--json', f'{tmp_path}/']), capsys)
    assert f"--json '{tmp_path}/': is a folder" in err, err
    err = _one_error(lambda: benchmark.parse_args([*base, '--json', str(CIFAR_BASELINE)]),
                     capsys)
    assert f"is --baseline '{CIFAR_BASELINE}', which this command reads" in err, err

    poly_degree = load_tool('analysis_tools/poly_degree')
    err = _one_error(lambda: poly_degree.cli([str(FASHION), '--json', str(a_file / 'x.json')]),
                     capsys)
    assert f'{a_file} is a file, not a folder, so the file cannot be created' in err, err

    plot_curves = load_tool('analysis_tools/plot_curves')
    err = _one_error(lambda: plot_curves.parse_args([str(tmp_path), '--out',
                                                     str(a_file / 'c.png')]), capsys)
    assert f"--out '{a_file / 'c.png'}': {a_file} is a file" in err, err


@pytest.mark.parametrize('name', sorted(UNBUILDABLE))
def test_a_config_without_a_buildable_model_is_one_message(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """It was a registry KeyError or an AttributeError traceback (a _base_ file: no model)."""
    text, message = UNBUILDABLE[name]
    config = tmp_path / name
    config.write_text(f"_base_ = ['{FASHION}']\n{text}\n")
    calls = {
        'pytorch2onnx': (lambda: load_tool('deployment/pytorch2onnx').main([str(config)]), 2),
        'get_flops': (lambda: load_tool('analysis_tools/get_flops').main([str(config)]), 1),
        'poly_degree': (lambda: load_tool('analysis_tools/poly_degree').cli([str(config)]), 1),
    }
    for tool, (call, status) in calls.items():
        err = _one_error(call, capsys, status)
        assert message in err and 'is not a registered model' in err, (tool, err)
    if name == 'bad_backbone.py':
        assert '(close matches: PDCResNetCIFAR' in err, err
    base_file = CONFIGS / '_base_' / 'datasets' / 'fashion-mnist_bs128.py'
    err = _one_error(lambda: load_tool('deployment/pytorch2onnx').main([str(base_file)]), capsys)
    assert 'has no model (a dict); give a model config' in err, err


def test_onnx_zoo_parity_names_a_model_it_cannot_load(tmp_path: Path, monkeypatch: Any,
                                                      capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('deployment/onnx_zoo_parity')
    (weights, ) = (REPO / 'checkpoints' / 'fashion-mnist').glob('se_resnet8_*.pth')
    truncated = tmp_path / weights.name
    truncated.write_bytes(weights.read_bytes()[:5000])
    real = tool.load_model
    monkeypatch.setattr(tool, 'load_model', lambda config, _: real(config, str(truncated)))
    err = _one_error(lambda: tool.main(['--models', 'se_resnet8_1xb128-1400i_fashion-mnist',
                                        '--num-images', '4']), capsys)
    assert ': error: se_resnet8_1xb128-1400i_fashion-mnist: Checkpoint ' in err, err
    assert 'corrupt' in err.lower(), err


def test_pytorch2onnx_verify_with_a_non_finite_model_is_one_message(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('deployment/pytorch2onnx')
    from mmpoly.deploy import load_model
    _, model = load_model(str(FASHION))
    state = model.state_dict()
    state['backbone.conv1.weight'][0, 0, 0, 0] = float('nan')
    checkpoint = tmp_path / 'nan.pth'
    torch.save(dict(state_dict=state), checkpoint)
    out = tmp_path / 'nan.onnx'
    err = _one_error(lambda: tool.main([str(FASHION), str(checkpoint), '--out', str(out),
                                        '--verify']), capsys, status=1)
    assert err.startswith('error: --verify: ') and 'not finite' in err, err
    assert f'{out} was written, but its outputs could not be compared' in err
