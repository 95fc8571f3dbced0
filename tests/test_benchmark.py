"""tools/analysis_tools/benchmark.py: structure and consistency of the results (no timings)."""
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pytest
import torch
from mmengine.analysis import get_model_complexity_info
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mmpoly.registry import MODELS

ROOT = Path(__file__).resolve().parents[1]
BASELINE = 'configs/resnet18_1xb128_cifar10.py'
MODEL = 'configs/pdc-comp_resnet18_1xb128_cifar10.py'
TINY = ['--batch-size', '2', '--input-size', '32', '32', '--rounds', '1', '--iters', '1',
        '--warmup', '1']


def _load_tool() -> ModuleType:
    path = ROOT / 'tools' / 'analysis_tools' / 'benchmark.py'
    spec = importlib.util.spec_from_file_location('mmpoly_tools_benchmark', path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def tool() -> ModuleType:
    return _load_tool()


@pytest.fixture
def restore_torch_settings():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
    torch.set_flush_denormal(False)


def _flops(config: str, shape=(3, 32, 32)) -> int:
    """mmengine's FLOP count of the config's classifier, computed here independently."""
    cfg = Config.fromfile(str(ROOT / config))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model).eval()
    forward = model.forward
    model.forward = lambda x: forward(x, mode='tensor')
    with torch.no_grad():
        info = get_model_complexity_info(model, input_shape=shape, show_table=False,
                                         show_arch=False)
    return int(info['flops'])


def _check_consistent(results: dict) -> None:
    base, *others = results['models']
    assert base['baseline'] and not any(entry['baseline'] for entry in others)
    for entry in results['models']:
        ratios = entry['ratios']
        assert entry['train_images_per_s'] > 0 and entry['infer_images_per_s'] > 0
        assert ratios['train'] == pytest.approx(
            entry['train_images_per_s'] / base['train_images_per_s'])
        assert ratios['infer'] == pytest.approx(
            entry['infer_images_per_s'] / base['infer_images_per_s'])
        assert ratios['flops'] == pytest.approx(base['flops'] / entry['flops'])
        assert entry['train_images_per_s'] == sorted(entry['train_rounds'])[
            len(entry['train_rounds']) // 2]
        if entry['memory_bytes'] is not None:
            assert entry['memory_bytes'] > 0
            assert ratios['memory'] == pytest.approx(entry['memory_bytes'] /
                                                     base['memory_bytes'])
    assert base['ratios']['train'] == base['ratios']['infer'] == base['ratios']['flops'] == 1


@pytest.mark.usefixtures('restore_torch_settings')
def test_benchmark_classifiers(tool, tmp_path, capsys):
    out = tmp_path / 'results.json'
    argv = [MODEL, '--baseline', BASELINE, *TINY, '--fuse', '--json', str(out),
            '--min-train-ratio', '1e-6', '--max-memory-ratio', '1e6']
    assert tool.main(argv) == 0  # every target trivially met

    results = json.loads(out.read_text())
    assert [e['config'] for e in results['models']] == [BASELINE, MODEL]
    _check_consistent(results)
    assert results['models'][1]['ratios']['flops'] == pytest.approx(
        _flops(BASELINE) / _flops(MODEL))
    assert all(e['flops_part'] == 'model' for e in results['models'])
    assert all(e['input_shape'] == [3, 32, 32] for e in results['models'])
    assert {c['target'] for c in results['checks']} == {'min_train_ratio', 'max_memory_ratio'}
    assert results['passed'] and all(c['passed'] for c in results['checks'])
    settings = results['settings']
    assert settings['fuse'] and settings['flush_denormal'] and settings['batch_size'] == 2
    assert settings['torch'] == torch.__version__ and settings['threads'] >= 1
    assert [p.name for p in tmp_path.iterdir()] == ['results.json']  # no temporary left

    printed = capsys.readouterr().out
    assert f"threads {settings['threads']}" in printed and torch.__version__ in printed
    assert 'pdc-comp_resnet18_1xb128_cifar10.py' in printed and 'ideal' in printed
    assert 'PASS' in printed and 'FAIL' not in printed


def _fake_results(train: float, infer: float, memory: float, flops: float) -> dict:
    base = dict(config='base.py', ratios=dict(train=1.0, infer=1.0, memory=1.0, flops=1.0))
    model = dict(config='model.py',
                 ratios=dict(train=train, infer=infer, memory=memory, flops=flops))
    return dict(models=[base, model])


def test_check_targets(tool):
    args = tool.parse_args(['--preset', 'cifar-pdc-comp'])  # eager CPU floors
    checks = tool.check_targets(_fake_results(0.7, 0.71, 1.9, 0.89), args)
    assert {(c['target'], c['passed']) for c in checks} == {
        ('min_train_ratio', True), ('min_infer_ratio', False), ('max_memory_ratio', False)}
    args = tool.parse_args(['--preset', 'gpu-cifar100-families', '--device', 'cpu'])
    checks = tool.check_targets(_fake_results(0.5, 0.6, 3.0, 0.8), args)
    # limit 0.70 × 0.8 = 0.56: training misses it, inference meets it
    assert [(c['ratio'], c['passed']) for c in checks] == [('train', False), ('infer', True)]
    assert checks[0]['limit'] == pytest.approx(0.70 * 0.8)


def test_per_model_floors(tool):
    args = tool.parse_args(['--preset', 'cifar100-families'])
    results = _fake_results(0.45, 0.37, 1.0, 0.78)
    results['models'][1]['config'] = 'configs/pdc-nl3_resnet18_1xb128_cifar100.py'
    checks = tool.check_targets(results, args)  # floors (0.43, 0.38) of PDC-NL[3]
    assert [(c['target'], c['ratio'], c['limit'], c['passed']) for c in checks] == [
        ('floor', 'train', 0.43, True), ('floor', 'infer', 0.38, False)]
    # every family has a floor, and none above the measured eager ratio of the README
    assert sorted(args.floors) == sorted(tool._CIFAR100_FAMILIES)
    assert tool.check_targets(results, tool.parse_args(['--preset', 'cifar100-families',
                                                        '--eager'])) == []


def test_main_exits_non_zero_on_a_miss(tool, tmp_path, monkeypatch):
    results = dict(settings=dict(torch='x', device='cpu', device_name='cpu', threads=1,
                                 flush_denormal=True, batch_size=1, amp=None,
                                 channels_last=False, compile=False, fuse=False, rounds=1,
                                 iters=1, warmup=0),
                   baseline=BASELINE, models=[], checks=[], passed=False)
    monkeypatch.setattr(tool, 'run_benchmark', lambda args: results)
    out = tmp_path / 'sub' / 'r.json'
    assert tool.main([MODEL, '--baseline', BASELINE, '--json', str(out)]) == 1
    assert json.loads(out.read_text())['passed'] is False


@pytest.mark.usefixtures('restore_torch_settings')
def test_presets_fill_options_and_the_command_line_wins(tool, capsys):
    args = tool.parse_args(['--preset', 'cifar-pdc-comp'])
    assert args.batch_size == 64 and args.threads == 2 and not args.compile
    assert (args.min_train_ratio, args.min_infer_ratio, args.max_memory_ratio) == (0.68, 0.72,
                                                                                   1.85)
    args = tool.parse_args(['--preset', 'cifar-pdc-comp-compiled'])
    assert args.compile and args.min_train_ratio == 0.85 and args.warmup == 3
    assert os.path.basename(args.baseline) == 'resnet18_1xb128_cifar10.py'
    assert [os.path.basename(c) for c in args.configs] == ['pdc-comp_resnet18_1xb128_cifar10.py']
    args = tool.parse_args(['--preset', 'in1k-pdc-cmp', '--batch-size', '8'])
    assert args.batch_size == 8 and args.input_size == [224, 224]
    assert args.min_train_ratio == 0.94
    # the GPU targets: both models compiled, the configs' per-GPU batch
    gpu = {name: tool.parse_args(['--preset', name, '--device', 'cpu'])
           for name in tool.PRESETS if name.startswith('gpu-')}
    assert {name: (a.min_train_ratio, a.max_memory_ratio, a.min_flop_fraction, a.batch_size)
            for name, a in gpu.items()} == {
        'gpu-cifar-pdc-comp': (0.76, 1.3, None, 128), 'gpu-in1k-pdc': (0.92, None, None, 32),
        'gpu-in1k-pdc-cmp': (1.20, None, None, 32),
        'gpu-cifar100-families': (None, None, 0.70, 128)}
    assert all(a.compile for a in gpu.values())
    eager = tool.parse_args(['--preset', 'gpu-in1k-pdc', '--device', 'cpu', '--eager'])
    assert not eager.compile and eager.min_train_ratio is None and eager.batch_size == 32
    args = tool.parse_args(['--preset', 'cifar-pdc-comp', '--no-memory'])
    assert args.max_memory_ratio is None and args.min_train_ratio == 0.68
    # CUDA graphs: a step's memory rise does not show their private pool (the H200 read 0.22x
    # for PDC-comp, 1.54x compiled without them): not measured, the target dropped, said
    graphs = tool.parse_args(['--preset', 'gpu-cifar-pdc-comp', '--device', 'cpu',
                              '--compile-mode', 'reduce-overhead'])
    assert graphs.no_memory and graphs.max_memory_ratio is None
    assert graphs.min_train_ratio == 0.76
    assert 'training memory not measured (CUDA graphs' in capsys.readouterr().out
    # what the compiled parts get: mmpoly's inductor defaults, the mode's options, and
    # --compile-option over them (recorded in the settings of the JSON)
    graphs = tool.parse_args([MODEL, '--baseline', BASELINE, '--compile', '--compile-mode',
                              'reduce-overhead', '--compile-option',
                              'force_layout_optimization=False', '--no-memory'])
    assert graphs.compile_kwargs == dict(mode='reduce-overhead', options={
        'force_layout_optimization': False})
    assert tool.apply_settings(graphs)['compile_options'] == {
        'triton.cudagraphs': True, 'force_layout_optimization': False}
    compiled = tool.parse_args(['--preset', 'gpu-in1k-pdc', '--device', 'cpu'])
    assert compiled.compile_kwargs == {}
    assert tool.apply_settings(compiled)['compile_options'] == {
        'force_layout_optimization': True}
    assert tool.apply_settings(eager)['compile_options'] is None
    for preset in tool.PRESETS:  # every preset names existing configs
        args = tool.parse_args(['--preset', preset, '--device', 'cpu'])
        assert all(os.path.isfile(c) for c in [args.baseline, *args.configs])


@pytest.mark.parametrize('argv, message', [
    ([MODEL], 'give one or more configs and --baseline, or a --preset'),
    ([MODEL, '--baseline', BASELINE, '--batch-size', '0'], '--batch-size'),
    ([MODEL, '--baseline', BASELINE, '--rounds', '-1'], '--rounds'),
    ([MODEL, '--baseline', BASELINE, '--amp', '--amp-dtype', 'float16'],
     '--amp-dtype float16 needs --device cuda'),
    ([MODEL, '--baseline', BASELINE, '--device', 'tpu'], "invalid choice: 'tpu'"),
    (['--preset', 'nope'], "invalid choice: 'nope'"),
    (['configs/no_such_config.py', '--baseline', BASELINE], 'no_such_config.py'),
    ([MODEL, '--baseline', BASELINE, '--no-memory', '--max-memory-ratio', '1.2'],
     '--max-memory-ratio needs the memory measurement'),
    ([MODEL, '--baseline', BASELINE, '--min-train-ratio', '0'], '--min-train-ratio'),
    ([MODEL, '--baseline', BASELINE, '--compile-mode', 'max-autotune'],
     '--compile-mode needs --compile'),
    (['--preset', 'gpu-in1k-pdc', '--device', 'cpu', '--eager', '--compile'],
     '--eager and --compile exclude each other'),
    ([MODEL, '--baseline', BASELINE, '--compile', '--compile-mode', 'reduce-overhead',
      '--max-memory-ratio', '1.3'], 'training memory is not measurable with --compile-mode '
     'reduce-overhead'),
    ([MODEL, '--baseline', BASELINE, '--cudnn-benchmark'],
     "--cudnn-benchmark needs --device cuda (cuDNN is CUDA's)"),
    ([MODEL, '--baseline', BASELINE, '--compile-option', 'max_autotune=True'],
     '--compile-option needs --compile'),
    ([MODEL, '--baseline', BASELINE, '--compile', '--compile-option', 'max_autotune'],
     "--compile-option: expected KEY=VALUE, got 'max_autotune'"),
    ([MODEL, '--baseline', BASELINE, '--compile', '--compile-backend', 'aot_eager',
      '--compile-option', 'max_autotune=True'],
     "--compile-option: options are inductor's; --compile-backend is aot_eager"),
    ([MODEL, '--baseline', BASELINE, '--compile', '--compile-option', 'triton.cudagraphs=True',
      '--max-memory-ratio', '1.3'], 'training memory is not measurable with --compile-option '
     'triton.cudagraphs=True'),
])
def test_bad_options(tool, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the error without a GPU')
def test_cuda_without_gpu_is_an_error(tool, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args([MODEL, '--baseline', BASELINE, '--device', 'cuda'])
    assert '--device cuda: no CUDA device is available' in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.usefixtures('restore_torch_settings')
def test_benchmark_detectors(tool):
    """Training and (--fuse) inference of both Mask R-CNNs timed, FLOPs of their backbones.
    Without the memory measurement: it is the classifiers' code (test_benchmark_classifiers)
    run in one subprocess per model, which took 44 of this test's 67 s."""
    argv = ['configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py', '--baseline',
            'configs/mask-rcnn_resnet18_fpn_1x_coco.py', '--batch-size', '1', '--input-size',
            '128', '128', '--rounds', '1', '--iters', '1', '--warmup', '0', '--fuse',
            '--no-memory']
    results = tool.run_benchmark(tool.parse_args(argv))
    _check_consistent(results)
    assert all(e['flops_part'] == 'backbone' and e['flops'] > 0 for e in results['models'])
    assert all(e['train_images_per_s'] > 0 and e['memory_bytes'] is None
               for e in results['models'])
    assert results['checks'] == [] and results['passed']


def test_detector_input_too_small(tool):
    args = tool.parse_args(['configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py', '--baseline',
                            'configs/mask-rcnn_resnet18_fpn_1x_coco.py', '--input-size', '32',
                            '32'])
    with pytest.raises(ValueError, match='--input-size: a detector needs H and W >= 64'):
        tool.setup(args.configs[0], args, with_flops=False)


def test_channels_last_is_refused_for_detectors(tool):
    """mmcv's RoIAlign reads its input as NCHW memory: on a channels-last map it returns other
    values, with no error. A channels-last detector step would time a different computation, so
    the tool refuses it (if mmcv ever handles the layout, the first assertion fails and the
    refusal can go)."""
    from mmcv.ops import roi_align
    torch.manual_seed(0)
    feats = torch.randn(2, 8, 16, 20)
    rois = torch.tensor([[0, 1., 1., 10., 12.], [1, 3., 2., 15., 9.]])
    nchw = roi_align(feats, rois, (7, 7), 0.5, 2, 'avg', True)
    nhwc = roi_align(feats.contiguous(memory_format=torch.channels_last), rois, (7, 7), 0.5, 2,
                     'avg', True)
    assert not torch.allclose(nchw, nhwc)
    args = tool.parse_args(['configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py', '--baseline',
                            'configs/mask-rcnn_resnet18_fpn_1x_coco.py', '--input-size', '128',
                            '128', '--channels-last'])
    with pytest.raises(ValueError, match="--channels-last: .*mask-rcnn_pdc-resnet18_fpn_1x_coco"
                       r"\.py: channels_last=True: MaskRCNN is a detector, and mmcv's RoIAlign"):
        tool.setup(args.configs[0], args, with_flops=False)


@pytest.mark.usefixtures('restore_torch_settings')
def test_saved_activations_scale_with_the_batch(tool):
    """The activation memory is exact: twice the batch saves twice the bytes (up to the
    per-channel BN statistics), and no parameter is counted."""
    sizes = []
    for batch_size in (2, 4):
        args = tool.parse_args([MODEL, '--baseline', BASELINE, '--batch-size', str(batch_size),
                                '--input-size', '16', '16'])
        tool.apply_settings(args)
        bench = tool.setup(MODEL, args, with_flops=False)
        sizes.append(tool.saved_activation_bytes(bench))
    params = sum(p.numel() * p.element_size() for p in bench.model.parameters())
    assert sizes[0] > 0
    # linear in the batch; the parameters (a constant, larger than the activations here) would
    # break that if they were counted
    assert params > sizes[0]
    assert sizes[1] == pytest.approx(2 * sizes[0], rel=0.02)


@pytest.mark.usefixtures('restore_torch_settings')
def test_profile_counts_each_models_operators(tool):
    """--profile: the host's work per training step. A PDC step dispatches more operators than
    ResNet18's (a norm per factor, the products), whatever the timing; on the CPU there are no
    kernels, and the five costliest operators are named."""
    args = tool.parse_args([MODEL, '--baseline', BASELINE, '--batch-size', '2', '--input-size',
                            '16', '16', '--rounds', '1', '--iters', '1', '--warmup', '0',
                            '--no-memory', '--profile'])
    results = tool.run_benchmark(args)
    base, pdc = (entry['profile'] for entry in results['models'])
    assert base['steps'] == pdc['steps'] == tool.PROFILE_STEPS
    assert base['ops'] == int(base['ops']) > 100  # the same operators every step
    assert pdc['ops'] > 1.5 * base['ops']
    assert (pdc['kernels'], pdc['gpu_ms'], pdc['gpu_busy']) == (None, None, None)
    names = [k['name'] for k in pdc['costliest']]
    assert len(names) == 5 and all(name.startswith('aten::') for name in names)
    assert 'aten::convolution_backward' in names
    assert 'profile: ' in tool.format_results(results)


@pytest.mark.usefixtures('restore_torch_settings')
@pytest.mark.parametrize('mode, marks', [('reduce-overhead', 2), ('max-autotune', 2),
                                         ('default', 0)])
def test_cuda_graph_steps_are_marked(tool, monkeypatch, mode, marks):
    """With CUDA graphs each training and inference step first calls
    torch.compiler.cudagraph_mark_step_begin: CUDA graphs reuse their output buffers, and
    without it the H200 run of 2026-12-04 stopped ("accessing tensor output of CUDAGraphs that
    has been overwritten by a subsequent run"). Compiling is replaced by nothing here: the CPU
    has no CUDA graphs; what is checked is that the timed steps mark their start."""
    calls = []
    monkeypatch.setattr(torch.compiler, 'cudagraph_mark_step_begin', lambda: calls.append(1))
    monkeypatch.setattr(tool, 'compile_model_parts', lambda model, kwargs: None)
    args = tool.parse_args([MODEL, '--baseline', BASELINE, '--batch-size', '2', '--input-size',
                            '16', '16', '--compile', '--compile-mode', mode])
    tool.apply_settings(args)
    bench = tool.setup(MODEL, args, with_flops=False)
    bench.train_step()
    bench.infer_step()
    assert len(calls) == marks


def test_device_kernels_leave_out_user_annotations(tool):
    """--profile's GPU time sums kernels only: the profiler also puts user annotations (such
    as Optimizer.step#SGD.step) on the GPU timeline, spanning kernels, which counted their time
    twice (the H200 profile of 2026-12-04 read 101 % busy)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    def event(name, device_type, annotation=False):
        return FunctionEvent(id=0, name=name, thread=0, start_us=0, end_us=10,
                             device_type=device_type, is_user_annotation=annotation)

    events = [event('sm90_xmma_fprop', DeviceType.CUDA), event('aten::conv2d', DeviceType.CPU),
              event('Optimizer.step#SGD.step', DeviceType.CUDA, annotation=True),
              event('Memcpy HtoD', DeviceType.CUDA)]
    assert [e.name for e in tool.device_kernels(events)] == ['sm90_xmma_fprop', 'Memcpy HtoD']
