"""ONNX export (mmpoly.deploy.export_onnx, tools/deployment/): onnxruntime computes what PyTorch
computes, for every family, and refuses what cannot be exported.

Tolerance: max |onnxruntime - PyTorch| <= PARITY_RTOL (1e-4) × max |PyTorch| over the logits,
both in float32. The two runtimes differ only in the order of the sums inside convolutions and
matrix products (MLAS against oneDNN), each adding a rounding error of a few float32 ulps
(u = 6e-8) relative to the magnitudes summed, per layer; measured differences are 1e-7 to 1.3e-6 of
the largest logit. BN affine parameters and α are randomised (tests/test_deploy.py), so that
zero-initialised residual norms do not hide a block; BN statistics are those of the random
batch the test feeds.
"""
import copy
import json
import os.path as osp
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from torch.nn.modules.batchnorm import _BatchNorm

from helpers import REPO, load_tool
from mmpoly.deploy import (PARITY_RTOL, compare_outputs, export_onnx, fixed_size_modules,
                           input_shape_from_config, load_model, onnx_parity, onnx_session)
from mmpoly.utils.classifier_backbone import mmpoly_config_path
from test_deploy import _randomise

onnx = pytest.importorskip('onnx', reason='pip install mmpoly[deploy]')
ort = pytest.importorskip('onnxruntime', reason='pip install mmpoly[deploy]')

#: One config per family on small inputs (Fashion-MNIST ResNet8, 28×28; the families with no
#: Fashion-MNIST config on CIFAR, 32×32): (config, whether the test is fast).
FAMILIES = [
    ('resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('se_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('pinet_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('pinet3_resnet8_1xb128-1400i_fashion-mnist.py', True),
    ('pdc_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('pdc3_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('pdc-comp_resnet8_1xb128-1400i_fashion-mnist.py', True),
    ('nl_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('pdc-nl3_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('pdc-nl4_resnet8_1xb128-1400i_fashion-mnist.py', True),
    ('noact_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('pinet-noact_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('pdc-noact_resnet8_1xb128-1400i_fashion-mnist.py', False),
    ('dnl_resnet18_1xb128_cifar100.py', False),
    ('pdc4_resnet18_1xb128_cifar100.py', False),
    ('pdc3-noact_resnet18_1xb128_cifar100.py', False),
    ('pdc4-noact_resnet18_1xb128_cifar10.py', False),
    ('pinet4-noact_resnet18_1xb128_cifar10.py', False),
    ('pdc-param_resnet18_1xb128_cifar100.py', False),
    ('pdc-channels_resnet18_1xb128_cifar100.py', False),
]


def _images(cfg: Config, seed: int = 0) -> torch.Tensor:
    """8 random N(0, 1) inputs of the config's input shape (the BN calibration batch)."""
    return torch.randn(8, *input_shape_from_config(cfg),
                       generator=torch.Generator().manual_seed(seed))


def _random_model(config: str, seed: int = 0, calibrate: bool = True):
    """The config's model (seeded initial weights) with random BN affine parameters and α
    (tests/test_deploy.py; α scaled to ±[0.05, 0.15]) and, with ``calibrate``, the BN
    statistics of :func:`_images`, which the tests feed. An untrained activation-free degree-4
    net (degree 4^8 overall) with |α| ~ 1 and other statistics overflows float32 or is so
    ill-conditioned that any reordering of its float32 sums changes the logits by 1e-2."""
    torch.manual_seed(seed)
    cfg, model = load_model(mmpoly_config_path(config))
    _randomise(model, seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 0:  # α ∈ ±[0.05, 0.15]: still folded, and the nets stay
                param.mul_(0.1)   # well-conditioned in float32 (see below)
    if calibrate:
        norms = [m for m in model.modules() if isinstance(m, _BatchNorm)]
        momenta = [norm.momentum for norm in norms]
        for norm in norms:
            norm.momentum = 1.0  # running statistics := those of the calibration batch
        model.train()
        with torch.no_grad():
            model(_images(cfg, seed), mode='tensor')
        for norm, momentum in zip(norms, momenta):
            norm.momentum = momentum
    return cfg, model.eval()


def _assert_parity(parity) -> None:
    assert parity.scale > 0
    assert parity.max_abs <= PARITY_RTOL * parity.scale, parity


def _family_params():
    return [pytest.param(name, id=name.split('_1xb')[0],
                         marks=() if fast else pytest.mark.slow) for name, fast in FAMILIES]


@pytest.mark.parametrize('name', _family_params())
def test_family_logits_match_pytorch(name, tmp_path):
    cfg, model = _random_model(name)
    shape = input_shape_from_config(cfg)
    path = str(tmp_path / 'model.onnx')
    export_onnx(model, path, shape, batch_size=2, dynamic_batch=True)
    session = onnx_session(path)
    reference = copy.deepcopy(model).double()
    for batch in (2, 5):  # the export's batch and another (dynamic batch axis)
        x = _images(cfg)[:batch]
        parity = onnx_parity(model, path, x, session=session)
        assert parity.shapes == [(batch, cfg.model.head.num_classes)]
        # PyTorch's own float32 error (against float64): tiny for every family but the random
        # activation-free Π-net^[4] (degree 4^8), whose float32 logits are ill-conditioned
        with torch.no_grad():
            float32_error = (model(x, mode='tensor').double() -
                             reference(x.double(), mode='tensor')).abs().max().item()
        assert parity.scale > 0
        assert parity.max_abs <= max(PARITY_RTOL * parity.scale, 4 * float32_error), parity
    graph = onnx.load(path).graph
    assert [d.dim_param for d in graph.input[0].type.tensor_type.shape.dim][0] == 'batch'


def _shipped_families():
    """The first config (by name) of every model family of configs/ (the model field of the
    name), plus one ImageNet and one Speech Commands config: exported as shipped. Those that
    test_family_logits_match_pytorch exports already (as shipped, at two batch sizes) are left
    out."""
    first = {}
    for path in sorted((REPO / 'configs').glob('*.py')):
        if 'rcnn' in path.name:
            continue
        prefix = path.stem.split('_', 1)[0]
        prefix = 'resnet' if re.fullmatch(r'resnet\d+', prefix) else prefix
        first.setdefault(prefix, path.name)
    return sorted((set(first.values()) | {'resnet18_8xb32_in1k.py',
                                          'pdc_resnet7_1xb128_speech-commands.py'})
                  - {name for name, _ in FAMILIES})


@pytest.mark.slow
@pytest.mark.parametrize('name', _shipped_families())
def test_shipped_config_exports_as_is(name, tmp_path):
    cfg, model = _random_model(name, seed=1)
    shape = input_shape_from_config(cfg)
    path = str(tmp_path / 'model.onnx')
    export_onnx(model, path, shape, batch_size=1)
    _assert_parity(onnx_parity(model, path, _images(cfg, seed=1)[:1]))


@pytest.mark.parametrize('name, shape', [
    ('resnet18_1xb128_cifar10.py', (3, 32, 32)),
    ('pdc_resnet8_1xb128-1400i_fashion-mnist.py', (1, 28, 28)),
    ('pdc_resnet7_1xb128_speech-commands.py', (1, 32, 32)),
    ('pdc-cmp_resnet18_8xb32_in1k.py', (3, 224, 224)),
    ('mask-rcnn_pdc-resnet18_fpn_1x_coco.py', (3, 800, 1344)),
])
def test_input_shape_from_config(name, shape):
    assert input_shape_from_config(Config.fromfile(mmpoly_config_path(name))) == shape


def test_input_shape_unknown_is_an_error():
    cfg = Config(dict(model=dict(type='ImageClassifier', backbone=dict(type='X')),
                      test_dataloader=dict(dataset=dict(type='MyData', pipeline=[]))))
    with pytest.raises(ValueError, match='--shape'):
        input_shape_from_config(cfg)


def test_pdc_nl_refuses_dynamic_size_and_other_sizes(tmp_path):
    _, model = _random_model('pdc-nl3_resnet8_1xb128-1400i_fashion-mnist.py')
    assert len(fixed_size_modules(model)) == 1
    path = tmp_path / 'model.onnx'
    with pytest.raises(ValueError, match=r'dynamic_size.*spatial_size \(4, 4\)'):
        export_onnx(model, str(path), (1, 28, 28), dynamic_size=True)
    with pytest.raises(ValueError, match=r'does not take a \(1, 1, 40, 40\) input.*spatial_size'):
        export_onnx(model, str(path), (1, 40, 40))
    assert not path.exists()


def test_dynamic_batch_that_the_exporter_fixes_is_an_error(tmp_path, monkeypatch):
    # PDC-NL's second-degree product runs CHUNK_ELEMENTS // HW² images at a time: one at a time
    # at CIFAR and ImageNet sizes (HW² >= 2**20), which ties the graph to the example's batch
    import mmpoly.models.nonlocal_family.attention as attention
    monkeypatch.setattr(attention, 'CHUNK_ELEMENTS', 1)
    _, model = _random_model('pdc-nl3_resnet8_1xb128-1400i_fashion-mnist.py')
    path = tmp_path / 'model.onnx'
    with pytest.raises(ValueError, match=r'fixed the input axes .*batch \(axis 0\) = 2'):
        export_onnx(model, str(path), (1, 28, 28), batch_size=2, dynamic_batch=True)
    assert not path.exists()


def test_rejected_graph_leaves_no_file(tmp_path, monkeypatch):
    _, model = _random_model('pdc-comp_resnet8_1xb128-1400i_fashion-mnist.py')
    path = tmp_path / 'model.onnx'
    path.write_bytes(b'old')

    def reject(*args, **kwargs):
        raise onnx.checker.ValidationError('rejected for the test')

    monkeypatch.setattr(onnx.checker, 'check_model', reject)
    with pytest.raises(RuntimeError, match='checker rejected.*rejected for the test'):
        export_onnx(model, str(path), (1, 28, 28))
    assert path.read_bytes() == b'old'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['model.onnx']  # no temporary left


@pytest.mark.parametrize('kwargs, match', [
    (dict(input_shape=(28, 28)), 'input_shape must be'),
    (dict(input_shape=(1, 28, 28), opset=13), 'opset must be'),
    (dict(input_shape=(1, 28, 28), batch_size=0), 'batch_size must be'),
    # 'no' is truthy: it exported a dynamic batch axis
    (dict(input_shape=(1, 28, 28), dynamic_batch='no'),
     "dynamic_batch must be True or False, got 'no'"),
    (dict(input_shape=(1, 28, 28), dynamic_size=1), 'dynamic_size must be True or False, got 1'),
])
def test_bad_options_are_errors(kwargs, match, tmp_path):
    _, model = _random_model('resnet8_1xb128-1400i_fashion-mnist.py')
    with pytest.raises(ValueError, match=match):
        export_onnx(model, str(tmp_path / 'm.onnx'), **kwargs)


def test_compare_outputs():
    expected = [np.array([[1.0, -4.0]]), np.array([2.0])]
    parity = compare_outputs(expected, [np.array([[1.0, -4.5]]), np.array([2.25])])
    assert parity.max_abs == 0.5 and parity.scale == 4.0 and parity.max_rel == 0.125
    assert compare_outputs(expected, [np.array([[1.0, np.nan]]), np.array([2.0])]).max_abs \
        == float('inf')
    with pytest.raises(ValueError, match='shape'):
        compare_outputs(expected, [np.zeros((2, 2)), np.array([2.0])])
    with pytest.raises(ValueError, match='not finite'):
        compare_outputs([np.array([np.inf])], [np.array([1.0])])


@pytest.mark.slow
def test_dynamic_size_export_runs_at_other_sizes(tmp_path):
    cfg, model = _random_model('pdc_resnet7_1xb128_speech-commands.py')
    path = str(tmp_path / 'model.onnx')
    export_onnx(model, path, (1, 32, 32), batch_size=2, dynamic_batch=True, dynamic_size=True)
    session = onnx_session(path)
    for shape in ((2, 1, 32, 32), (3, 1, 40, 24)):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
        _assert_parity(onnx_parity(model, path, x, session=session))


@pytest.mark.slow
def test_detector_backbone_and_neck_match(tmp_path):
    cfg, model = _random_model('mask-rcnn_pdc-resnet18_fpn_1x_coco.py', calibrate=False)
    path = str(tmp_path / 'det.onnx')
    export_onnx(model, path, (3, 128, 160), batch_size=1, dynamic_size=True, part='features')
    session = onnx_session(path)
    for shape in ((1, 3, 128, 160), (1, 3, 96, 128)):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(4))
        parity = onnx_parity(model, path, x, part='features', session=session)
        assert parity.num_outputs == 5  # FPN levels P2-P6
        assert parity.shapes[0] == (1, 256, shape[2] // 4, shape[3] // 4)
        _assert_parity(parity)


def test_export_tool_verifies(tmp_path, capsys):
    tool = load_tool('deployment/pytorch2onnx')
    out = tmp_path / 'pdc-comp.onnx'
    code = tool.main([str(REPO / 'configs' / 'pdc-comp_resnet8_1xb128-1400i_fashion-mnist.py'),
                      '--dynamic-batch', '--verify', '--out', str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert 'input (1, 1, 28, 28)' in printed and 'input (3, 1, 28, 28)' in printed
    worst = float(re.search(r'PASS: largest relative difference (\S+)', printed).group(1))
    assert worst <= PARITY_RTOL
    session = onnx_session(str(out))
    assert session.get_inputs()[0].shape == ['batch', 1, 28, 28]


def test_export_tool_refuses_dynamic_size_for_pdc_nl(tmp_path, capsys):
    tool = load_tool('deployment/pytorch2onnx')
    out = tmp_path / 'pdc-nl4.onnx'
    code = tool.main([str(REPO / 'configs' / 'pdc-nl4_resnet8_1xb128-1400i_fashion-mnist.py'),
                      '--dynamic-size', '--out', str(out)])
    assert code == 2
    assert ("error: --dynamic-size: 1 module(s) of this model are built for one feature-map size "
            "(backbone.layer3.1: spatial_size (4, 4); PDC-NL's C4 has one output channel per "
            "position), so H and W cannot be symbolic; export without --dynamic-size, at 28x28 "
            "(--dynamic-batch is allowed)") in capsys.readouterr().err
    assert not out.exists()


def test_export_tool_names_its_own_options_and_inputs(tmp_path, capsys):
    """--shape whose C the model does not take is blamed on --shape (not on the config's
    in_channels), and an .onnx given as the checkpoint is named as one (not "corrupt")."""
    tool = load_tool('deployment/pytorch2onnx')
    config = str(REPO / 'configs' / 'pdc_resnet8_1xb128_fashion-mnist.py')
    out = tmp_path / 'pdc.onnx'
    assert tool.main([config, '--shape', '3', '28', '28', '--out', str(out)]) == 2
    assert ("error: --shape 3 28 28: C=3, but the model takes 1-channel input (its first "
            "convolution, backbone.conv1, has in_channels 1); give --shape 1 28 28; without "
            "--shape the config's test pipeline gives 1 28 28") in capsys.readouterr().err
    assert not out.exists()
    assert tool.main([config, '--shape', '1', '20', '24', '--out', str(out)]) == 0
    assert 'input (1, 1, 20, 24)' in capsys.readouterr().out
    assert tool.main([config, str(out), '--out', str(tmp_path / 'again.onnx')]) == 2
    assert (f'error: Checkpoint {out} is not a torch checkpoint: it is an ONNX model, which torch '
            'cannot load back (export from the .pth instead)') in capsys.readouterr().err


# ---- the published Fashion-MNIST zoo through onnxruntime ----------------------------------

def _zoo_tool():
    return load_tool('deployment/onnx_zoo_parity')


def test_zoo_results_file_matches_metafile():
    tool = _zoo_tool()
    results = json.loads(tool.RESULTS_FILE.read_text())
    published = {m['name']: m for m in tool.published_models()}
    assert len(published) == 17
    assert {r['name'] for r in results['models']} == set(published)
    for r in results['models']:
        entry = published[r['name']]
        assert (r['config'], r['weights']) == (entry['config'], entry['weights'])
        assert r['num_images'] == 10000
        assert r['onnx_top1'] == entry['metafile_top1'] == r['pytorch_top1'], r['name']
        assert r['agreeing_predictions'] == 10000, r['name']
        assert r['max_rel_logit_diff'] <= PARITY_RTOL
    assert results['passed'] is True


def test_docs_table_is_the_results_file():
    tool = _zoo_tool()
    results = json.loads(tool.RESULTS_FILE.read_text())
    page = tool.DOCS_PAGE.read_text(encoding='utf-8')
    assert tool.table_in_docs(page) == tool.markdown_table(results)


@pytest.mark.skipif(not Path('/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz')
                    .is_file(), reason='Debian package dataset-fashion-mnist')
def test_zoo_checkpoints_predict_as_pytorch():
    tool = _zoo_tool()
    names = ['pdc-nl4_resnet8_1xb128-1400i_fashion-mnist',
             'pinet_resnet8_1xb128-1400i_fashion-mnist']
    results = tool.run(names, num_images=1000, opset=tool.DEFAULT_OPSET)
    assert sorted(r['name'] for r in results['models']) == names
    for r in results['models']:
        assert r['num_images'] == 1000
        assert r['agreeing_predictions'] == 1000, r
        assert r['onnx_top1'] == r['pytorch_top1']
        assert r['onnx_top1'] > 80  # trained weights, not chance (10 %)
    assert results['passed'] is True


# ---- benchmark.py --onnx -------------------------------------------------------------------

def test_onnx_speed_checks_use_the_first_batch_and_skip_the_baseline():
    from mmpoly.deploy import onnx_speed_checks

    def entry(config, batch, eager, onnx_latency):
        return dict(config=config, batch_size=batch,
                    speedup=dict(onnx_vs_eager=eager / onnx_latency))

    measured = [entry('base.py', 1, 1.0, 2.0), entry('base.py', 64, 1.0, 2.0),
                entry('pdc.py', 1, 3.0, 2.0), entry('pdc.py', 64, 1.0, 2.0)]
    checks = onnx_speed_checks(measured, 1.0, baseline='base.py')
    assert [(c['config'], c['batch_size'], c['value'], c['passed']) for c in checks] == \
        [('pdc.py', 1, 1.5, True)]
    assert not onnx_speed_checks(measured, 1.6, baseline='base.py')[0]['passed']
    assert onnx_speed_checks(measured, None) == []


def test_benchmark_onnx_options_need_onnx(capsys):
    tool = load_tool('analysis_tools/benchmark')
    code = tool.main(['configs/pdc-comp_resnet18_1xb128_cifar10.py', '--baseline',
                      'configs/resnet18_1xb128_cifar10.py', '--min-onnx-speedup', '1.0'])
    assert code == 2 and '--onnx' in capsys.readouterr().err


@pytest.mark.slow
def test_benchmark_onnx_run(tmp_path, capsys):
    tool = load_tool('analysis_tools/benchmark')
    out = tmp_path / 'onnx.json'
    code = tool.main([str(REPO / 'configs' / 'pdc-comp_resnet8_1xb128-1400i_fashion-mnist.py'),
                      '--baseline', str(REPO / 'configs' / 'resnet8_1xb128-1400i_fashion-mnist.py'),
                      '--onnx', '--onnx-batch-sizes', '1', '4', '--threads', '1', '--rounds', '2',
                      '--iters', '2', '--warmup', '0', '--min-onnx-speedup', '1e-6',
                      '--json', str(out)])
    assert code == 0, capsys.readouterr().out
    results = json.loads(out.read_text())
    assert [(osp.basename(r['config']), r['batch_size']) for r in results['onnx']] == [
        ('resnet8_1xb128-1400i_fashion-mnist.py', 1), ('resnet8_1xb128-1400i_fashion-mnist.py', 4),
        ('pdc-comp_resnet8_1xb128-1400i_fashion-mnist.py', 1),
        ('pdc-comp_resnet8_1xb128-1400i_fashion-mnist.py', 4)]
    for r in results['onnx']:
        assert r['input_shape'] == [1, 28, 28] and r['threads'] == 1
        lat = r['latency_s']
        assert all(len(r['rounds_s'][name]) == 2 for name in lat)
        assert lat['onnxruntime'] == pytest.approx(np.median(r['rounds_s']['onnxruntime']))
        assert r['speedup']['onnx_vs_eager'] == pytest.approx(lat['eager'] / lat['onnxruntime'])
        assert r['images_per_s']['eager'] == pytest.approx(r['batch_size'] / lat['eager'])
    assert [c['batch_size'] for c in results['checks']] == [1] and results['passed']


def test_onnx_speed_restores_the_process_thread_count():
    from mmpoly.deploy import onnx_speed
    before = torch.get_num_threads()
    torch.set_num_threads(2 if before != 2 else 3)
    try:
        expected = torch.get_num_threads()
        results = onnx_speed([str(REPO / 'configs' / 'resnet8_1xb128-1400i_fashion-mnist.py')],
                             [1], threads=1, rounds=1, iters=1, warmup=0)
        assert results[0]['threads'] == 1
        assert torch.get_num_threads() == expected
    finally:
        torch.set_num_threads(before)
