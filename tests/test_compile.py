"""mmpoly.engine.compile and ``tools/train.py --compile / --amp`` on the CPU.

The end-to-end runs train the tiny PDC-ResNet of ``test_tools`` on a 64-image Fashion-MNIST
subset. They compile with ``backend='aot_eager'``: dynamo captures, guards and recompiles
exactly as with the default inductor backend, and AOTAutograd splits forward and backward, but
without inductor's C++ code generation (minutes on a loaded 2-core machine).
"""
import re
import shutil
import sys
from pathlib import Path
from typing import Dict, List

import pytest
import torch
from helpers import REPO, TOOLS
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from test_tools import free_port, make_fashion_mnist_subset, run_tool, train, write_config

from mmpoly.engine import load_checkpoint_file
from mmpoly.engine.compile import (INDUCTOR_DEFAULTS, CompileCountHook, CPUAutocastOptimWrapper,
                                   CUDAGraphStepHook, apply_compile, compile_kwargs,
                                   compile_model_parts, configure_amp, split_parts,
                                   torch_compile_kwargs, uses_cuda_graphs)
from mmpoly.utils.complexity import build_model

AOT_EAGER = "\ncompile_model = dict(backend='aot_eager')\n"
#: A learning rate that changes every iteration (4 per epoch), over 3 epochs.
COSINE = ("\nparam_scheduler = [dict(type='CosineAnnealingLR', by_epoch=False, T_max=12, "
          "begin=0, end=12)]\ntrain_cfg = dict(by_epoch=True, max_epochs=3, val_interval=1)\n")


@pytest.fixture(scope='module')
def data(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp('compile')
    data_root = make_fashion_mnist_subset(root / 'fashion-mnist')
    return dict(root=root, config=write_config(root, data_root))


def _config(data: Dict[str, Path], tmp_path: Path, extra: str) -> Path:
    config = tmp_path / 'cfg.py'
    config.write_text(data['config'].read_text() + extra)
    return config


def _state_keys(path: Path) -> List[str]:
    return sorted(load_checkpoint_file(str(path))['state_dict'])


def _losses(log: str) -> List[float]:
    return [float(x) for x in re.findall(r'Epoch\(train\).*?\sloss: ([0-9.]+)', log)]


# --------------------------------------------------------------------------- unit


def test_compile_kwargs():
    assert compile_kwargs(None) is None and compile_kwargs(False) is None
    assert compile_kwargs(True) == {}
    assert compile_kwargs(dict(mode='max-autotune', dynamic=False)) == dict(
        mode='max-autotune', dynamic=False)
    with pytest.raises(ValueError, match=r"unknown torch.compile option\(s\) \['speed'\]"):
        compile_kwargs(dict(speed=1))
    with pytest.raises(ValueError, match="compile_model must be True, False or a dict"):
        compile_kwargs('yes')


def test_torch_compile_kwargs():
    """With inductor, compile_model's mode becomes its options (torch.compile refuses a mode
    and options together), mmpoly's INDUCTOR_DEFAULTS are added, and compile_model's own
    options win; other backends get their kwargs unchanged."""
    layout = {'force_layout_optimization': True}
    assert INDUCTOR_DEFAULTS == layout
    assert torch_compile_kwargs({}) == dict(options=layout)
    assert torch_compile_kwargs(dict(mode='reduce-overhead', dynamic=False)) == dict(
        dynamic=False, options={'triton.cudagraphs': True, **layout})
    assert torch_compile_kwargs(dict(mode='max-autotune', options={
        'triton.cudagraphs': False, 'force_layout_optimization': False})) == dict(options={
            'max_autotune': True, 'coordinate_descent_tuning': True,
            'triton.cudagraphs': False, 'force_layout_optimization': False})
    assert torch_compile_kwargs(dict(backend='aot_eager', mode='default')) == dict(
        backend='aot_eager', mode='default')
    with pytest.raises(ValueError, match=r"compile_model: mode 'fast' is not a torch.compile "
                                         r"mode; allowed: \['default', "):
        torch_compile_kwargs(dict(mode='fast'))
    # the call that apply_compile logs and compile_model_parts makes: torch accepts it
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model.compile(**torch_compile_kwargs(dict(mode='reduce-overhead')))


@pytest.mark.filterwarnings('ignore:TF32 acceleration on top of oneDNN')
def test_compiled_pdc_graphs_are_laid_out_channels_last_as_resnet_graphs(monkeypatch):
    """Inductor's own rule (the CUDA one; on the CPU oneDNN's rule, channels-last always,
    comes first and is switched off here) leaves a graph NCHW when a convolution with a kernel
    over 1×1 halves its channels, as PDC factors do (here 32 -> 16, 3×3), and lays ResNet's
    graphs out channels-last: on an H200 PDC-comp's compiled steps then spent 1.46 of 8.9 ms in
    cuDNN's NCHW <-> NHWC conversions. With mmpoly's compile (INDUCTOR_DEFAULTS) the PDC graph
    is laid out channels-last. The decision is read where inductor makes it
    (``GraphLowering.decide_layout_opt`` of the forward graph); the compile stops there."""
    from torch._inductor.graph import GraphLowering
    decide = GraphLowering.decide_layout_opt
    decisions: List[bool] = []

    class Decided(Exception):
        pass

    def record(gm, *, is_inference: bool) -> bool:
        decisions.append(decide(gm, is_inference=is_inference))
        raise Decided

    monkeypatch.setattr(GraphLowering, 'decide_layout_opt', staticmethod(record))

    def channels_last(config: str, mmpoly_compile: bool) -> bool:
        model = _tiny_classifier(config).train()
        torch._dynamo.reset()
        if mmpoly_compile:
            compile_model_parts(model, {})
        else:
            model.backbone.compile()  # torch.compile's defaults
        with torch.backends.mkldnn.flags(enabled=False), pytest.raises(Exception) as raised:
            model(torch.randn(2, 1, 28, 28), mode='tensor')
        torch._dynamo.reset()
        assert 'Decided' in repr(raised.value), raised.value
        return decisions.pop()

    pdc, resnet = 'pdc_resnet8_1xb128_fashion-mnist.py', 'resnet8_1xb128-1400i_fashion-mnist.py'
    assert channels_last(resnet, mmpoly_compile=False)
    assert not channels_last(pdc, mmpoly_compile=False)
    assert channels_last(pdc, mmpoly_compile=True)


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:TF32 acceleration on top of oneDNN')
def test_channels_last_inductor_graphs_compute_the_eager_step():
    """The compiled parts as mmpoly compiles them, generated by inductor (C++ on the CPU, with
    oneDNN off as a GPU has it: aten convolutions in the channels-last layout that
    INDUCTOR_DEFAULTS forces), give the eager model's outputs and gradients (up to a minute
    here, most of it code generation)."""
    torch.manual_seed(0)
    eager = _tiny_classifier().train()
    compiled = _tiny_classifier().train()
    compiled.load_state_dict(eager.state_dict())
    torch._dynamo.reset()
    compile_model_parts(compiled, {})
    x = torch.randn(4, 1, 28, 28)
    with torch.backends.mkldnn.flags(enabled=False):
        out = compiled(x, mode='tensor')
        out.square().sum().backward()
    torch._dynamo.reset()
    expected = eager(x, mode='tensor')
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    for (name, param), twin in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(twin.grad, param.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_configure_amp():
    cfg = Config(dict(optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1))))
    configure_amp(cfg, cuda=False)
    assert cfg.optim_wrapper.type == 'CPUAutocastOptimWrapper'
    assert cfg.optim_wrapper.dtype == 'bfloat16' and 'loss_scale' not in cfg.optim_wrapper
    cfg = Config(dict(optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1))))
    configure_amp(cfg, cuda=True)
    assert (cfg.optim_wrapper.type, cfg.optim_wrapper.loss_scale) == ('AmpOptimWrapper',
                                                                      'dynamic')
    cfg = Config(dict(optim_wrapper=dict(type='AmpOptimWrapper', dtype='float16',
                                         optimizer=dict(type='SGD', lr=0.1))))
    with pytest.raises(ValueError, match="optim_wrapper.dtype is 'float16'"):
        configure_amp(cfg, cuda=False)
    cfg = Config(dict(optim_wrapper=dict(type='ApexOptimWrapper')))
    with pytest.raises(ValueError, match="the config has 'ApexOptimWrapper'"):
        configure_amp(cfg, cuda=False)


def _tiny_classifier(config: str = 'pdc_resnet8_1xb128_fashion-mnist.py') -> torch.nn.Module:
    cfg = Config.fromfile(str(REPO / 'configs' / config))
    cfg.model.data_preprocessor = cfg.data_preprocessor
    return build_model(cfg)


def test_cpu_autocast_wrapper_runs_the_forward_in_bfloat16():
    model = _tiny_classifier()
    wrapper = build_optim_wrapper(model, dict(type='CPUAutocastOptimWrapper',
                                              optimizer=dict(type='SGD', lr=0.1)))
    assert isinstance(wrapper, CPUAutocastOptimWrapper)
    dtypes = []
    model.backbone.conv1.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    from mmpretrain.structures import DataSample
    batch = dict(inputs=torch.rand(4, 1, 28, 28) * 255,
                 data_samples=[DataSample().set_gt_label(i) for i in range(4)])
    before = model.head.fc.weight.detach().clone()
    losses = model.train_step(batch, wrapper)
    assert dtypes == [torch.bfloat16]
    assert losses['loss'].dtype == torch.float32 and torch.isfinite(losses['loss'])
    assert model.head.fc.weight.dtype == torch.float32  # master weights stay float32
    assert not torch.equal(model.head.fc.weight, before)  # the step updated them
    with pytest.raises(ValueError, match='dtype must be bfloat16'):
        CPUAutocastOptimWrapper(dtype='float16', optimizer=torch.optim.SGD(
            model.parameters(), lr=0.1))


def test_compiled_parts_keep_state_dict_and_outputs():
    torch.manual_seed(0)
    eager = _tiny_classifier().eval()
    compiled = _tiny_classifier().eval()
    compiled.load_state_dict(eager.state_dict())
    names = compile_model_parts(compiled, dict(backend='aot_eager'))
    assert names == (['backbone', 'neck', 'head'], [])
    assert list(compiled.state_dict()) == list(eager.state_dict())
    x = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, mode='tensor'), eager(x, mode='tensor'))
    # a non-compiled state dict loads into the compiled model, strictly
    compiled.load_state_dict(eager.state_dict(), strict=True)


def test_a_compiled_pdc_backbone_is_one_graph_without_warnings():
    """Training mode, float32, grad on the CPU: where the fused terms run eagerly. Compiled,
    every block falls back to its layers before anything dynamo cannot trace (no graph break,
    no dynamo warning about tracing mmpoly's helpers)."""
    import warnings

    import torch._dynamo as dynamo
    backbone = _tiny_classifier().backbone.train()
    dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        explained = dynamo.explain(backbone)(torch.randn(2, 1, 28, 28))
    dynamo.reset()
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), \
        explained.break_reasons
    assert not [w for w in caught if 'Dynamo' in str(w.message)], \
        [str(w.message)[:200] for w in caught]


def test_detectors_compile_backbone_and_neck_only():
    cfg = Config.fromfile(str(REPO / 'configs' / 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py'))
    cfg.model.backbone.init_cfg = None
    model = build_model(cfg)
    assert split_parts(model) == (['backbone', 'neck'], ['rpn_head', 'roi_head'])
    with pytest.raises(ValueError, match="has none of \\['backbone', 'neck', 'head'\\]"):
        compile_model_parts(torch.nn.Sequential(torch.nn.Linear(2, 2)), {})


def test_cuda_graph_modes_mark_every_iteration(monkeypatch):
    """compile_model with CUDA graphs (modes reduce-overhead and max-autotune) registers
    CUDAGraphStepHook, which marks the start of every training, validation and test iteration
    (torch.compiler.cudagraph_mark_step_begin): without it benchmark.py's CUDA-graph runs
    stopped on an H200 ("accessing tensor output of CUDAGraphs that has been overwritten by a
    subsequent run"). Other modes register no such hook. (The CPU records no CUDA graphs:
    compiling is lazy and nothing runs here.)"""
    assert uses_cuda_graphs(dict(mode='reduce-overhead'))
    assert uses_cuda_graphs(dict(mode='max-autotune', backend='inductor'))
    assert not uses_cuda_graphs(dict(mode='max-autotune',
                                     options={'triton.cudagraphs': False}))
    assert not any(uses_cuda_graphs(k) for k in (None, {}, dict(mode='default'),
                                                 dict(mode='max-autotune-no-cudagraphs'),
                                                 dict(mode='reduce-overhead',
                                                      backend='aot_eager')))
    assert uses_cuda_graphs(dict(options={'triton.cudagraphs': True}))
    assert uses_cuda_graphs(dict(backend='cudagraphs'))

    class FakeRunner:  # what apply_compile uses of mmengine's Runner
        def __init__(self, compile_model):
            self.cfg = Config(dict(compile_model=compile_model))
            self.model = build_model(Config.fromfile(str(REPO / 'configs' /
                                                         'resnet18_1xb128_cifar10.py')))
            self.hooks: List[object] = []
            self.logger = type('Logger', (), {'info': staticmethod(lambda message: None)})

        def register_hook(self, hook):
            self.hooks.append(hook)

    marks = []
    monkeypatch.setattr(torch.compiler, 'cudagraph_mark_step_begin', lambda: marks.append(1))
    runner = apply_compile(FakeRunner(dict(mode='reduce-overhead')))
    assert [type(h) for h in runner.hooks] == [CompileCountHook, CUDAGraphStepHook]
    hook = runner.hooks[1]
    for _ in range(3):
        hook.before_train_iter(runner, 0)
    hook.before_val_iter(runner, 0)
    hook.before_test_iter(runner, 0)
    assert len(marks) == 5
    for mode in (True, dict(mode='default'), dict(mode='max-autotune-no-cudagraphs')):
        assert [type(h) for h in apply_compile(FakeRunner(mode)).hooks] == [CompileCountHook]


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_learning_rate_schedule_causes_no_recompilation(data, tmp_path):
    """3 epochs, the learning rate changing every iteration: after the first epoch (training
    mode) and its validation (eval mode) nothing is compiled again."""
    config = _config(data, tmp_path, COSINE + AOT_EAGER)
    proc = train(str(config), '--work-dir', str(tmp_path / 'wd'), '--compile')
    log = proc.stdout
    assert "compile_model: torch.compile(backend='aot_eager') of backbone, neck, head; eager: " \
        'data preprocessor, losses, optimizer step' in log
    counts = [int(n) for n in re.findall(r'training epoch \d compiled (\d+) graphs', log)]
    assert len(counts) == 3 and counts[0] > 0 and counts[1:] == [0, 0], log[-3000:]
    lrs = re.findall(r'Epoch\(train\).*?\slr: ([0-9.e+-]+)', log)
    assert len(set(lrs)) >= 10, lrs  # the schedule really changed the rate every iteration
    assert 'recompiled after the first epoch' not in log


@pytest.mark.slow
def test_resume_from_an_eager_checkpoint_into_a_compiled_run(data, tmp_path):
    """Eager epoch 1, then ``--compile --resume``: the eager checkpoint loads into the
    compiled model, and the compiled run saves the same state-dict keys."""
    work_dir = tmp_path / 'wd'
    train(str(data['config']), '--work-dir', str(work_dir))
    config = _config(data, tmp_path, AOT_EAGER)
    proc = train(str(config), '--work-dir', str(work_dir), '--compile', '--resume',
                 '--cfg-options', 'train_cfg.max_epochs=2')
    assert 'resumed epoch: 1, iter: 4' in proc.stdout
    assert "compile_model: torch.compile(backend='aot_eager') of backbone" in proc.stdout
    assert 'Epoch(train) [2][4/4]' in proc.stdout
    keys = _state_keys(work_dir / 'epoch_2.pth')
    assert keys == _state_keys(work_dir / 'epoch_1.pth')
    assert not any('_orig_mod' in key for key in keys)


@pytest.mark.slow
def test_compile_with_ddp_two_gloo_processes(data, tmp_path):
    config = _config(data, tmp_path, AOT_EAGER)
    work_dir = tmp_path / 'dist'
    proc = run_tool(['bash', str(TOOLS / 'dist_train.sh'), str(config), '2', '--work-dir',
                     str(work_dir), '--compile'], cwd=tmp_path,
                    env={'PYTHON': sys.executable, 'PORT': str(free_port())})
    log = proc.stdout
    assert 'GPU number: 2' in log and "compile_model: torch.compile(backend='aot_eager')" in log
    assert 'Epoch(train) [1][2/2]' in log, log[-3000:]
    keys = _state_keys(work_dir / 'epoch_1.pth')
    assert keys and not any('_orig_mod' in key or key.startswith('module.') for key in keys)


@pytest.mark.slow
def test_amp_on_cpu_trains_in_bfloat16_and_the_loss_falls(data, tmp_path):
    config = _config(data, tmp_path, (
        '\ntrain_cfg = dict(by_epoch=True, max_epochs=6, val_interval=6)\n'
        "param_scheduler = dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=6)\n"
        "optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9))\n"))
    proc = train(str(config), '--work-dir', str(tmp_path / 'wd'), '--amp')
    log = proc.stdout
    assert "type='CPUAutocastOptimWrapper'" in log and 'AmpOptimWrapper' not in log
    losses = _losses(log)
    assert len(losses) == 24, log[-3000:]
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.15, losses
    shutil.rmtree(tmp_path / 'wd')
