"""Training / inference throughput and training memory of configs, as ratios to a baseline.

    python tools/analysis_tools/benchmark.py --preset cifar-pdc-comp
    python tools/analysis_tools/benchmark.py configs/pdc_resnet18_1xb128_cifar10.py \
        --baseline configs/resnet18_1xb128_cifar10.py --batch-size 64 --threads 2 --json out.json

All models are measured in one run, interleaved: each of ``--rounds`` rounds times every model's
training step (``model.train_step``: data preprocessor, ``loss``, backward, the config's
optimizer step via ``build_optim_wrapper``), then every model's inference (``model.test_step``
in ``torch.inference_mode``), each after ``--warmup`` untimed iterations; the figure is the median
over rounds, in images/s. The order of the models alternates between rounds.

Memory is that of a steady-state training step (after one untimed step has created the optimizer
state). On CPU it is measured for each model in a fresh subprocess with the same options: the
rise of the process's peak resident set size (Linux ``VmHWM``, reset through
``/proc/self/clear_refs``) during the step over its RSS just before it, with the allocator's free
pages returned to the OS first (glibc ``malloc_trim``) — activations, gradients and workspace;
the median over a few steps, as the allocator's state varies. On CUDA it is the rise of
``torch.cuda.max_memory_allocated`` during the step, measured in the benchmark's own process
(the caching allocator counts allocated bytes exactly, whatever else the process holds). The
JSON also has the absolute peak. Next to it, the bytes autograd saves for backward in a step
(distinct storages, through ``torch.autograd.graph.saved_tensors_hooks``): the activation
memory, exact and independent of the allocator.

Every figure is printed with its ratio to the baseline (speed: model / baseline, > 1 is faster;
memory: model / baseline, < 1 is smaller) next to the FLOP ratio baseline FLOPs / model FLOPs
(mmengine's count, see ``get_flops.py``), the speed ratio that FLOPs alone would predict. For
detectors the FLOPs are the backbone's (the rest of the detector needs proposals to count).

Inputs are random: classifiers get ``(B, C, H, W)`` images and random labels, detectors a few
random boxes with box-shaped masks per image. Weights are randomly initialised (a detector's
``Pretrained`` backbone init is dropped: no checkpoint is needed). ``--targets``-style options
(``--min-train-ratio`` …, or a ``--preset``) make the tool exit with status 1 on a miss.
"""
import argparse
import ast
import contextlib
import copy
import ctypes
import gc
import json
import os.path as osp
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.optim import build_optim_wrapper
from torch import nn

from mmpoly.deploy import inference_copy, is_detector
from mmpoly.engine.compile import (compile_model_parts, torch_compile_kwargs,
                                   uses_cuda_graphs)
from mmpoly.engine.memory_format import to_channels_last
from mmpoly.engine.saving import atomic_write
from mmpoly.utils import register_all_modules
from mmpoly.utils.classifier_backbone import mmpoly_config_path
from mmpoly.utils.complexity import build_model, default_input_shape, measure
from mmpoly.utils.startup import out_file_problem

_MEMORY_TAG = 'MMPOLY_BENCHMARK_MEMORY '
_CIFAR100_FAMILIES = [
    'se_resnet18_1xb128_cifar100.py', 'pinet_resnet18_1xb128_cifar100.py',
    'pdc3_resnet18_1xb128_cifar100.py', 'pdc4_resnet18_1xb128_cifar100.py',
    'nl_resnet18_1xb128_cifar100.py', 'pdc-nl3_resnet18_1xb128_cifar100.py',
    'pdc-nl4_resnet18_1xb128_cifar100.py'
]
_PDC_COMP = dict(configs=['pdc-comp_resnet18_1xb128_cifar10.py'],
                 baseline='resnet18_1xb128_cifar10.py')
_IN1K_PDC = dict(configs=['pdc_resnet18_8xb32_in1k.py'], baseline='resnet18_8xb32_in1k.py',
                 input_size=[224, 224])
_IN1K_PDC_CMP = dict(configs=['pdc-cmp_resnet18_8xb32_in1k.py'],
                     baseline='resnet18_8xb32_in1k.py', input_size=[224, 224])
_FAMILIES = dict(configs=_CIFAR100_FAMILIES, baseline='resnet18_1xb128_cifar100.py')
_GPU = dict(device='cuda', compile=True, rounds=3, iters=10, warmup=3)
#: Named target sets: configs, baseline, settings and targets; options override them.
#: CPU (2 threads, float32, eager): floors, the ratios measured on 2026-11-26 (README, "Speed
#: and memory") less the run-to-run noise seen that day (speed about 0.05, RSS memory 15 %), so
#: that they fail on a regression, not on noise; ``floors`` holds per-model (train, infer) floors.
#: ``cifar-pdc-comp-compiled``: the CPU target with both models compiled. ``gpu-*``: the GPU
#: targets (both models compiled, the configs' per-GPU batch), ratios to ResNet18; with
#: ``--eager`` the same models are measured eager and the targets are dropped.
PRESETS: Dict[str, Dict[str, Any]] = {
    'cifar-pdc-comp': dict(
        **_PDC_COMP, batch_size=64, threads=2, min_train_ratio=0.68, min_infer_ratio=0.72,
        max_memory_ratio=1.85),
    'cifar-pdc-comp-compiled': dict(
        **_PDC_COMP, batch_size=64, threads=2, compile=True, warmup=3, min_train_ratio=0.85),
    'in1k-pdc': dict(
        **_IN1K_PDC, batch_size=16, threads=2, min_train_ratio=0.84, min_infer_ratio=0.83),
    'in1k-pdc-cmp': dict(
        **_IN1K_PDC_CMP, batch_size=16, threads=2, min_train_ratio=0.94, min_infer_ratio=0.98),
    'cifar100-families': dict(
        **_FAMILIES, batch_size=64, threads=2,
        floors={'se_resnet18_1xb128_cifar100.py': (0.90, 0.89),
                'pinet_resnet18_1xb128_cifar100.py': (0.91, 0.96),
                'pdc3_resnet18_1xb128_cifar100.py': (0.16, 0.21),
                'pdc4_resnet18_1xb128_cifar100.py': (0.08, 0.12),
                'nl_resnet18_1xb128_cifar100.py': (0.66, 0.68),
                'pdc-nl3_resnet18_1xb128_cifar100.py': (0.43, 0.38),
                'pdc-nl4_resnet18_1xb128_cifar100.py': (0.41, 0.38)}),
    'gpu-cifar-pdc-comp': dict(**_PDC_COMP, **_GPU, batch_size=128, min_train_ratio=0.76,
                               max_memory_ratio=1.3),
    'gpu-in1k-pdc': dict(**_IN1K_PDC, **_GPU, batch_size=32, min_train_ratio=0.92),
    'gpu-in1k-pdc-cmp': dict(**_IN1K_PDC_CMP, **_GPU, batch_size=32, min_train_ratio=1.20),
    'gpu-cifar100-families': dict(**_FAMILIES, **_GPU, batch_size=128, min_flop_fraction=0.70),
}
#: Option defaults when neither the command line nor the preset sets them.
DEFAULTS: Dict[str, Any] = dict(batch_size=32, threads=None, rounds=5, iters=10, warmup=2,
                                device='cpu', amp_dtype='bfloat16')
TARGETS = ('min_train_ratio', 'min_infer_ratio', 'max_memory_ratio', 'min_flop_fraction')


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f'must be a positive integer, got {value}')
    return number


def _compile_option(text: str) -> Tuple[str, Any]:
    """``KEY=VALUE`` of ``--compile-option``: VALUE a Python literal (True, 3, 'max'), else the
    text itself."""
    key, sep, value = text.partition('=')
    if not sep or not key:
        raise argparse.ArgumentTypeError(f'expected KEY=VALUE, got {text!r}')
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f'must be an integer >= 0, got {value}')
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f'must be a positive number, got {value}')
    return number


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse the options and fill them from ``--preset`` and :data:`DEFAULTS`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        description='Throughput and memory of configs as ratios to a baseline config')
    parser.add_argument('configs', nargs='*', help='config files (or mmpoly config names)')
    parser.add_argument('--baseline', help='the config every ratio is relative to')
    parser.add_argument('--preset', choices=sorted(PRESETS),
                        help='a named target set: configs, baseline, settings and targets')
    parser.add_argument('--batch-size', type=_positive_int, help='images per step (32)')
    parser.add_argument('--input-size', type=_positive_int, nargs=2, metavar=('H', 'W'),
                        help='image size (default: the config\'s, 800 1333 for detectors)')
    parser.add_argument('--threads', type=_positive_int, help='torch.set_num_threads')
    parser.add_argument('--device', choices=['cpu', 'cuda'], help='cpu (default) or cuda')
    parser.add_argument('--amp', action='store_true', help='mixed precision (torch.autocast)')
    parser.add_argument('--amp-dtype', choices=['bfloat16', 'float16'],
                        help='autocast dtype (bfloat16; float16 needs --device cuda)')
    parser.add_argument('--channels-last', action='store_true',
                        help='models and inputs in channels_last memory format')
    parser.add_argument('--cudnn-benchmark', action='store_true',
                        help='torch.backends.cudnn.benchmark = True (cuDNN times its algorithms '
                        'per shape and keeps the fastest; the configs\' env_cfg.cudnn_benchmark '
                        'is False); needs --device cuda')
    parser.add_argument('--compile', action='store_true',
                        help='torch.compile every model\'s backbone, neck and head, as '
                        'tools/train.py --compile does (mmpoly.engine.compile)')
    parser.add_argument('--compile-mode', choices=['default', 'reduce-overhead', 'max-autotune'],
                        help='torch.compile mode with --compile (default)')
    parser.add_argument('--compile-backend', choices=['inductor', 'aot_eager', 'eager'],
                        help='torch.compile backend with --compile (inductor; aot_eager and '
                        'eager capture the same graphs without code generation)')
    parser.add_argument('--compile-option', action='append', default=[], metavar='KEY=VALUE',
                        type=_compile_option,
                        help='an inductor option with --compile, over mmpoly\'s defaults '
                        '(mmpoly.engine.compile.INDUCTOR_DEFAULTS), e.g. '
                        'force_layout_optimization=False; repeatable')
    parser.add_argument('--eager', action='store_true',
                        help='measure a compiling preset\'s models eager, without its targets '
                        '(the eager figures beside the compiled ones)')
    parser.add_argument('--fuse', action='store_true',
                        help='time inference of mmpoly.deploy.inference_copy (BN and α folded) '
                        'of every model, the baseline included')
    parser.add_argument('--no-flush-denormal', action='store_true',
                        help='keep CPU denormals (flushed by default: they can slow float32 '
                        'training many times)')
    parser.add_argument('--rounds', type=_positive_int, help='rounds over all models (5)')
    parser.add_argument('--iters', type=_positive_int, help='timed iterations per round (10)')
    parser.add_argument('--warmup', type=_non_negative_int,
                        help='untimed iterations before each timing (2)')
    parser.add_argument('--no-memory', action='store_true', help='skip the memory measurement')
    parser.add_argument('--profile', action='store_true',
                        help='profile a few training steps of each model (torch.profiler): '
                        'operators and, on CUDA, kernels per step and how busy the GPU is')
    parser.add_argument('--json', metavar='OUT', help='write the results to this JSON file')
    parser.add_argument('--onnx', action='store_true',
                        help='instead: CPU inference latency of PyTorch eager, its inference '
                        'copy and onnxruntime (the exported copy) for every model '
                        '(mmpoly.deploy.run_onnx_benchmark)')
    parser.add_argument('--onnx-batch-sizes', type=_positive_int, nargs='+',
                        help='batch sizes of --onnx (default: --batch-size)')
    parser.add_argument('--min-onnx-speedup', type=_positive_float,
                        help='with --onnx: fail unless every model but the baseline has eager '
                        '/ onnxruntime latency >= this at the first --onnx-batch-sizes')
    parser.add_argument('--min-train-ratio', type=_positive_float,
                        help='fail unless every model trains at least this × the baseline')
    parser.add_argument('--min-infer-ratio', type=_positive_float,
                        help='fail unless every model infers at least this × the baseline')
    parser.add_argument('--max-memory-ratio', type=_positive_float,
                        help='fail unless every model\'s training memory is at most this × '
                        'the baseline\'s')
    parser.add_argument('--min-flop-fraction', type=_positive_float,
                        help='fail unless every model\'s train and inference ratios are at '
                        'least this × its FLOP ratio')
    parser.add_argument('--_memory-of', type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = argv
    if args.no_memory and args.max_memory_ratio is not None:
        parser.error('--max-memory-ratio needs the memory measurement (drop --no-memory)')
    preset = PRESETS.get(args.preset, {})
    if args.eager:  # the preset's models, eager, its targets dropped
        if args.compile:
            parser.error('--eager and --compile exclude each other')
        preset = {key: value for key, value in preset.items()
                  if key not in (*TARGETS, 'floors', 'compile')}
    args.compile = args.compile or bool(preset.get('compile'))
    args.floors = dict(preset.get('floors', {}))
    for option in ('compile_mode', 'compile_backend', 'compile_option'):
        if getattr(args, option) not in (None, []) and not args.compile:
            parser.error(f'--{option.replace("_", "-")} needs --compile')
    if args.compile_option and args.compile_backend not in (None, 'inductor'):
        parser.error(f'--compile-option: options are inductor\'s; --compile-backend is '
                     f'{args.compile_backend}')
    args.compile_kwargs = None
    if args.compile:  # the compile_model value of tools/train.py
        args.compile_kwargs = {} if args.compile_mode in (None, 'default') else dict(
            mode=args.compile_mode)
        if args.compile_backend not in (None, 'inductor'):
            args.compile_kwargs['backend'] = args.compile_backend
        if args.compile_option:
            args.compile_kwargs['options'] = dict(args.compile_option)
    if uses_cuda_graphs(args.compile_kwargs) and not args.no_memory:
        # CUDA graphs allocate from a private pool when they are recorded: a step's rise of
        # max_memory_allocated does not show their memory (it read 0.22x on 2026-12-04)
        graphs = f'--compile-mode {args.compile_mode}' if args.compile_mode not in (
            None, 'default') else \
            '--compile-option triton.cudagraphs=True'
        if args.max_memory_ratio is not None:
            parser.error(f'--max-memory-ratio: training memory is not measurable with '
                         f'{graphs} (CUDA graphs allocate from a private pool); measure it '
                         f'with --compile-mode default')
        print(f'benchmark.py: {graphs}: training memory not measured (CUDA graphs allocate '
              f'from a private pool); the memory target is dropped', flush=True)
        args.no_memory = True
    if args.no_memory:  # a preset's memory target is dropped with the measurement
        preset = {key: value for key, value in preset.items() if key != 'max_memory_ratio'}
    for key in ('batch_size', 'input_size', 'threads', 'rounds', 'iters', 'warmup', 'device',
                'amp_dtype', *TARGETS):
        if getattr(args, key) is None:
            setattr(args, key, preset.get(key, DEFAULTS.get(key)))
    if not args.configs:
        args.configs = list(preset.get('configs', []))
    if args.baseline is None:
        args.baseline = preset.get('baseline')
    if args.baseline is None or not args.configs:
        parser.error('give one or more configs and --baseline, or a --preset '
                     f'({", ".join(sorted(PRESETS))})')
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: no CUDA device is available (use --device cpu)')
    if args.amp and args.amp_dtype == 'float16' and args.device == 'cpu':
        parser.error('--amp-dtype float16 needs --device cuda; on CPU use bfloat16')
    if args.cudnn_benchmark and args.device != 'cuda':
        parser.error('--cudnn-benchmark needs --device cuda (cuDNN is CUDA\'s)')
    try:
        args.baseline = _config_path(args.baseline)
        args.configs = [_config_path(c) for c in args.configs]
    except FileNotFoundError as error:
        parser.error(str(error))
    if args.onnx:  # before any model is built or exported
        for config in (args.baseline, *args.configs):
            detector = _detector_type(config)
            if detector:
                parser.error(f'--onnx: {config} is a detector ({detector}); --onnx times '
                             'classifiers only (a whole classifier, logits out, through '
                             'onnxruntime). Benchmark the detector without --onnx, or export '
                             'its backbone + neck with tools/deployment/pytorch2onnx.py')
    if args.json:  # written after the measurement, which takes minutes: checked first
        problem = out_file_problem(args.json, '--json', [('--baseline', args.baseline)] + [
            ('a CONFIG', config) for config in args.configs])
        if problem:
            parser.error(f'{problem}; give the JSON file to write, in a writable folder')
    return args


def _detector_type(config: str) -> Optional[str]:
    """The model type of ``config`` if it is an mmdet detector (None if not, or if the config
    does not load: building it reports that)."""
    try:
        model = Config.fromfile(config).get('model') or {}
    except Exception:  # reported, with the file and line, when the model is built
        return None
    model_type = model.get('type')
    try:
        from mmdet.models.detectors import BaseDetector
        from mmdet.registry import MODELS
        cls = MODELS.get(model_type) if isinstance(model_type, str) else model_type
    except Exception:  # mmdet missing or an unknown type: judged by the detector's parts
        cls = None
    is_det = isinstance(cls, type) and issubclass(cls, BaseDetector)
    if is_det or any(key in model for key in ('rpn_head', 'roi_head', 'bbox_head')):
        return str(getattr(model_type, '__name__', model_type))
    return None


def _config_path(name: str) -> str:
    if osp.isfile(name):
        return name
    return mmpoly_config_path(osp.basename(name))


def apply_settings(args: argparse.Namespace) -> Dict[str, Any]:
    """Set threads and denormal flushing; return the settings printed in the header."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    flush = False
    if args.device == 'cpu':
        flush = torch.set_flush_denormal(not args.no_flush_denormal) and \
            not args.no_flush_denormal
    return dict(
        torch=torch.__version__,
        device=args.device,
        device_name=(torch.cuda.get_device_name() if args.device == 'cuda' else
                     platform.processor() or platform.machine()),
        threads=torch.get_num_threads(),
        flush_denormal=flush,
        batch_size=args.batch_size,
        input_size=args.input_size,
        amp=args.amp_dtype if args.amp else None,
        channels_last=args.channels_last,
        cudnn_benchmark=args.cudnn_benchmark,
        compile=args.compile,
        compile_mode=args.compile_mode if args.compile else None,
        compile_backend=(args.compile_backend or 'inductor') if args.compile else None,
        compile_options=(torch_compile_kwargs(args.compile_kwargs).get('options')
                         if args.compile else None),
        cuda=torch.version.cuda,
        date=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
        fuse=args.fuse,
        rounds=args.rounds,
        iters=args.iters,
        warmup=args.warmup)


def load_config(path: str) -> Config:
    """The config, with its data preprocessor in the model (as the Runner does) and without a
    ``Pretrained`` backbone init (benchmarks need no checkpoint)."""
    from mmpoly.utils.complexity import standalone_model_config
    return standalone_model_config(path)


def _classifier_batch(cfg: Config, shape: Tuple[int, int, int], batch_size: int,
                      device: str) -> dict:
    from mmpretrain.structures import DataSample
    num_classes = cfg.model.head.num_classes
    labels = torch.randint(num_classes, (batch_size, ))
    return dict(
        inputs=torch.rand(batch_size, *shape, device=device) * 255,
        data_samples=[DataSample().set_gt_label(int(label)) for label in labels])


def _detector_batch(cfg: Config, shape: Tuple[int, int, int], batch_size: int, device: str,
                    num_boxes: int = 3) -> dict:
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData
    _, height, width = shape
    num_classes = cfg.model.roi_head.bbox_head.num_classes
    samples = []
    for index in range(batch_size):
        x1 = torch.randint(0, width // 2, (num_boxes, ))
        y1 = torch.randint(0, height // 2, (num_boxes, ))
        x2 = x1 + torch.randint(max(width // 8, 1), width // 2, (num_boxes, ))
        y2 = y1 + torch.randint(max(height // 8, 1), height // 2, (num_boxes, ))
        masks = np.zeros((num_boxes, height, width), dtype=np.uint8)
        for i in range(num_boxes):
            masks[i, y1[i]:y2[i], x1[i]:x2[i]] = 1
        sample = DetDataSample(metainfo=dict(
            img_id=index, img_shape=(height, width), ori_shape=(height, width),
            scale_factor=(1.0, 1.0)))
        sample.gt_instances = InstanceData(
            bboxes=torch.stack([x1, y1, x2, y2], dim=1).float(),
            labels=torch.randint(num_classes, (num_boxes, )),
            masks=BitmapMasks(masks, height, width))
        samples.append(sample.to(device))
    return dict(inputs=torch.rand(batch_size, *shape, device=device) * 255,
                data_samples=samples)


@dataclass
class Bench:
    """One model set up for timing: its steps, FLOPs and parameters."""
    config: str
    train_step: Callable[[], None]
    infer_step: Callable[[], None]
    flops: Optional[int]
    flops_part: str
    params: int
    input_shape: Tuple[int, int, int]
    model: Optional[nn.Module] = None


def _autocast(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    if not args.amp:
        return contextlib.nullcontext()
    return torch.autocast(args.device, dtype=getattr(torch, args.amp_dtype))


def setup(config: str, args: argparse.Namespace, with_flops: bool = True) -> Bench:
    """Build the model, optimizer wrapper and a random batch of ``config``."""
    cfg = load_config(config)
    model = build_model(cfg)
    detector = is_detector(model)
    shape = default_input_shape(cfg)
    if detector:
        shape = (shape[0], 800, 1333)
    if args.input_size:
        shape = (shape[0], *args.input_size)
    if detector and min(shape[1:]) < 64:
        raise ValueError(f'--input-size: a detector needs H and W >= 64 (its FPN reaches '
                         f'stride 64), got {shape[1]} {shape[2]}')
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel('WARNING')  # init_weights logs every initialised tensor
    try:
        model.init_weights()
    finally:
        logger.setLevel(level)
    model.to(args.device)
    make_batch = _detector_batch if detector else _classifier_batch
    batch = make_batch(cfg, shape, args.batch_size, args.device)
    if args.channels_last:  # as tools/train.py --channels-last; a detector is refused
        try:
            to_channels_last(model)
        except ValueError as error:
            raise ValueError(f'--channels-last: {config}: {error}') from None
        batch['inputs'] = batch['inputs'].contiguous(memory_format=torch.channels_last)
    optim_cfg = copy.deepcopy(cfg.optim_wrapper)
    if args.amp and args.device == 'cuda':
        optim_cfg.update(type='AmpOptimWrapper', dtype=args.amp_dtype)
    optim_wrapper = build_optim_wrapper(model, optim_cfg)
    infer_model = inference_copy(model) if args.fuse else model
    if args.compile:
        compile_model_parts(model, args.compile_kwargs)
        if infer_model is not model:
            compile_model_parts(infer_model, args.compile_kwargs)
    cpu_autocast = args.amp and args.device == 'cpu'
    # CUDA graphs (modes reduce-overhead, max-autotune) reuse their output buffers: each step
    # tells torch a new iteration begins (as CUDAGraphStepHook does in tools/train.py), else
    # reading the last step's outputs is an error
    graphs = uses_cuda_graphs(args.compile_kwargs)

    def train_step() -> None:
        model.train()
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with _autocast(args) if cpu_autocast else contextlib.nullcontext():
            model.train_step(batch, optim_wrapper)

    def infer_step() -> None:
        infer_model.eval()
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.inference_mode(), _autocast(args):
            infer_model.test_step(batch)

    part = 'backbone' if detector else 'model'
    flops = measure(cfg, part, shape).flops if with_flops else None
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return Bench(config, train_step, infer_step, flops, part, params, shape, model)


def _sync(device: str) -> None:
    if device == 'cuda':
        torch.cuda.synchronize()


def time_images_per_s(step: Callable[[], None], args: argparse.Namespace) -> float:
    """Images/s of ``args.iters`` calls of ``step`` after ``args.warmup`` untimed ones."""
    for _ in range(args.warmup):
        step()
    _sync(args.device)
    start = time.perf_counter()
    for _ in range(args.iters):
        step()
    _sync(args.device)
    return args.batch_size * args.iters / (time.perf_counter() - start)


def _proc_status_kib(field: str) -> int:
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    raise RuntimeError(f'/proc/self/status has no {field}')


def _release_free_memory() -> bool:
    """Return the allocator's free pages to the OS (glibc ``malloc_trim``); False if unknown."""
    gc.collect()
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


#: Training steps whose CPU memory rise is measured (their median is reported).
MEMORY_REPEATS = 3


def training_memory(bench: Bench, args: argparse.Namespace) -> Dict[str, Any]:
    """Peak memory rise of one steady-state training step (see the module docstring).

    One untimed step first creates the optimizer state (and compiles, with ``--compile``).
    """
    bench.train_step()
    if args.device == 'cuda':
        _sync(args.device)
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        bench.train_step()
        _sync(args.device)
        peak = torch.cuda.max_memory_allocated()
        return dict(memory_bytes=peak - before, peak_memory_bytes=peak,
                    memory_method='rise of torch.cuda.max_memory_allocated in a training step',
                    saved_activation_bytes=saved_activation_bytes(bench))
    rises, peaks = [], []
    for _ in range(MEMORY_REPEATS):  # the allocator's state varies: the median of a few steps
        trimmed = _release_free_memory()
        before = _proc_status_kib('VmRSS')
        try:
            with open('/proc/self/clear_refs', 'w') as clear_refs:
                clear_refs.write('5')  # reset VmHWM (the peak RSS) to the current RSS
            method = 'rise of the peak RSS (VmHWM) in a training step'
        except OSError:
            method = 'process peak RSS (VmHWM, not resettable here) minus RSS before a step'
        bench.train_step()
        peaks.append(_proc_status_kib('VmHWM'))
        rises.append(peaks[-1] - before)
    method += f', median of {MEMORY_REPEATS} steps'
    if not trimmed:
        method += ' (no malloc_trim: freed memory kept by the allocator is not counted)'
    return dict(memory_bytes=int(statistics.median(rises)) * 1024,
                peak_memory_bytes=max(peaks) * 1024, memory_method=method,
                saved_activation_bytes=saved_activation_bytes(bench))


def saved_activation_bytes(bench: Bench) -> int:
    """Bytes of the distinct storages autograd saves for backward in one training step, the
    model's parameters excluded: the activation memory, measured exactly (independent of the
    allocator)."""
    parameters = set() if bench.model is None else \
        {p.untyped_storage().data_ptr() for p in bench.model.parameters()}
    storages: Dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        bench.train_step()
    return sum(storages.values())


def _memory_in_subprocess(index: int, args: argparse.Namespace) -> Dict[str, Any]:
    command = [sys.executable, osp.abspath(__file__), *args.argv, '--_memory-of', str(index)]
    result = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith(_MEMORY_TAG)]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f'the memory measurement of {_models(args)[index]} failed '
                           f'(exit {result.returncode}):\n{result.stderr[-3000:]}')
    return json.loads(lines[-1][len(_MEMORY_TAG):])


def _models(args: argparse.Namespace) -> List[str]:
    """The baseline first, then the configs."""
    return [args.baseline, *args.configs]


def _ratio(value: Optional[float], reference: Optional[float]) -> Optional[float]:
    if value is None or reference is None or reference == 0:
        return None
    return value / reference


#: Training steps recorded by ``--profile`` (after one unrecorded step).
PROFILE_STEPS = 3


def device_kernels(events: Sequence[Any]) -> List[Any]:
    """The CUDA kernels (and memory copies) among profiler events: not the user annotations
    (``record_function`` ranges such as ``Optimizer.step#SGD.step``) that the profiler also
    puts on the GPU timeline, which span kernels and would count their time twice."""
    from torch.autograd import DeviceType
    return [e for e in events if e.device_type == DeviceType.CUDA
            and not getattr(e, 'is_user_annotation', False)]


def profile_training(bench: Bench, args: argparse.Namespace,
                     step_seconds: float) -> Dict[str, Any]:
    """Operators and kernels of ``PROFILE_STEPS`` training steps (``--profile``).

    Per step: ``ops`` (aten operators dispatched from outside another aten operator: the host's
    work), and on CUDA ``kernels`` (launched), ``gpu_ms`` (their summed device time) and
    ``gpu_busy`` (``gpu_ms`` over the timed, unprofiled step, ``step_seconds``): well under 1
    means the step waits on the host, not on the GPU. ``costliest``: the five kernels (CPU:
    operators) with the most device (CPU: self) time per step.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU]
    if args.device == 'cuda':
        activities.append(ProfilerActivity.CUDA)
    bench.train_step()
    _sync(args.device)
    with profile(activities=activities) as prof:
        for _ in range(PROFILE_STEPS):
            bench.train_step()
        _sync(args.device)
    events = prof.events()

    def top_level(event) -> bool:
        parent = event.cpu_parent
        return parent is None or not parent.name.startswith('aten::')

    ops = [e for e in events if e.device_type == DeviceType.CPU
           and e.name.startswith('aten::') and top_level(e)]
    result: Dict[str, Any] = dict(steps=PROFILE_STEPS, ops=len(ops) / PROFILE_STEPS,
                                  kernels=None, gpu_ms=None, gpu_busy=None)
    totals: Dict[str, List[float]] = {}
    if args.device == 'cuda':
        kernels = device_kernels(events)
        for e in kernels:
            totals.setdefault(e.name, []).append(e.time_range.elapsed_us())
        gpu_ms = sum(sum(v) for v in totals.values()) / 1e3 / PROFILE_STEPS
        result.update(kernels=len(kernels) / PROFILE_STEPS, gpu_ms=gpu_ms,
                      gpu_busy=gpu_ms / 1e3 / step_seconds)
    else:
        for e in ops:
            totals.setdefault(e.name, []).append(e.self_cpu_time_total)
    top = sorted(totals.items(), key=lambda item: -sum(item[1]))[:5]
    result['costliest'] = [dict(name=name[:120], ms=sum(times) / 1e3 / PROFILE_STEPS,
                                count=len(times) / PROFILE_STEPS) for name, times in top]
    return result


def run_benchmark(args: argparse.Namespace) -> Dict[str, Any]:
    """Measure every model of ``args`` interleaved; return the results (see ``--json``)."""
    register_all_modules()
    settings = apply_settings(args)
    names = _models(args)
    benches = [setup(name, args) for name in names]
    train_rounds: List[List[float]] = [[] for _ in names]
    infer_rounds: List[List[float]] = [[] for _ in names]
    for round_index in range(args.rounds):
        order = list(range(len(names)))
        if round_index % 2:
            order.reverse()
        for i in order:
            train_rounds[i].append(time_images_per_s(benches[i].train_step, args))
        for i in order:
            infer_rounds[i].append(time_images_per_s(benches[i].infer_step, args))
    memory = [dict(memory_bytes=None, peak_memory_bytes=None, memory_method=None,
                   saved_activation_bytes=None) for _ in names]
    if not args.no_memory:
        memory = [training_memory(bench, args) if args.device == 'cuda' else
                  _memory_in_subprocess(i, args) for i, bench in enumerate(benches)]
    profiles = [None] * len(names)
    if args.profile:
        profiles = [profile_training(bench, args, args.batch_size /
                                     statistics.median(train_rounds[i]))
                    for i, bench in enumerate(benches)]
    models = []
    for i, bench in enumerate(benches):
        models.append(dict(
            config=bench.config, baseline=i == 0, params=bench.params, flops=bench.flops,
            flops_part=bench.flops_part, input_shape=list(bench.input_shape),
            train_images_per_s=statistics.median(train_rounds[i]),
            infer_images_per_s=statistics.median(infer_rounds[i]),
            train_rounds=train_rounds[i], infer_rounds=infer_rounds[i], **memory[i],
            profile=profiles[i]))
    base = models[0]
    for entry in models:
        entry['ratios'] = dict(
            train=_ratio(entry['train_images_per_s'], base['train_images_per_s']),
            infer=_ratio(entry['infer_images_per_s'], base['infer_images_per_s']),
            memory=_ratio(entry['memory_bytes'], base['memory_bytes']),
            saved_activations=_ratio(entry['saved_activation_bytes'],
                                     base['saved_activation_bytes']),
            flops=_ratio(base['flops'], entry['flops']))
    results = dict(settings=settings, baseline=args.baseline, preset=args.preset,
                   models=models)
    results['checks'] = check_targets(results, args)
    results['passed'] = all(check['passed'] for check in results['checks'])
    return results


def check_targets(results: Dict[str, Any], args: argparse.Namespace) -> List[Dict[str, Any]]:
    """One entry per (model, target) of the ``--min-*`` / ``--max-*`` options."""
    checks = []
    for entry in results['models'][1:]:
        ratios = entry['ratios']
        wanted: List[Tuple[str, str, float, float]] = []  # (target, ratio, limit, sign)
        if args.min_train_ratio is not None:
            wanted.append(('min_train_ratio', 'train', args.min_train_ratio, 1))
        if args.min_infer_ratio is not None:
            wanted.append(('min_infer_ratio', 'infer', args.min_infer_ratio, 1))
        if args.max_memory_ratio is not None:
            wanted.append(('max_memory_ratio', 'memory', args.max_memory_ratio, -1))
        if args.min_flop_fraction is not None and ratios['flops'] is not None:
            limit = args.min_flop_fraction * ratios['flops']
            wanted += [('min_flop_fraction', 'train', limit, 1),
                       ('min_flop_fraction', 'infer', limit, 1)]
        floor = getattr(args, 'floors', {}).get(osp.basename(entry['config']))
        if floor is not None:
            wanted += [('floor', 'train', floor[0], 1), ('floor', 'infer', floor[1], 1)]
        for target, ratio, limit, sign in wanted:
            value = ratios[ratio]
            checks.append(dict(config=entry['config'], target=target, ratio=ratio,
                               value=value, limit=limit,
                               passed=value is not None and sign * (value - limit) >= 0))
    return checks


def write_json(results: Dict[str, Any], path: str) -> None:
    """Write ``results`` atomically (:func:`mmpoly.engine.saving.atomic_write`)."""
    atomic_write(json.dumps(results, indent=2), path)


def _fmt_ratio(value: Optional[float]) -> str:
    return '   n/a' if value is None else f'{value:5.2f}×'


def format_profile(profile: Dict[str, Any]) -> str:
    """One line of a ``--profile`` record."""
    text = f"{profile['ops']:.0f} operators/step"
    if profile['kernels'] is not None:
        text += (f", {profile['kernels']:.0f} kernels/step, GPU busy {profile['gpu_ms']:.2f} ms "
                 f"per step ({100 * profile['gpu_busy']:.0f} % of the timed step)")
    return text + '; top: ' + ', '.join(f"{k['name'][:40]} {k['ms']:.2f} ms"
                                        for k in profile['costliest'][:3])


def format_results(results: Dict[str, Any]) -> str:
    """The header (settings) and one line per model, each figure with its baseline ratio."""
    s = results['settings']
    lines = [f"torch {s['torch']} | device {s['device']} ({s['device_name']}) | threads "
             f"{s['threads']} | flush denormal {s['flush_denormal']} | batch {s['batch_size']}"
             f" | amp {s['amp']} | channels_last {s['channels_last']}"
             f"{' | cudnn.benchmark' if s.get('cudnn_benchmark') else ''} | compile {s['compile']}"
             f" | fuse {s['fuse']} | {s['rounds']} rounds × ({s['warmup']} warm-up + "
             f"{s['iters']} iters), median",
             f"baseline: {results['baseline']}"]
    for entry in results['models']:
        r = entry['ratios']
        memory = 'memory n/a' if entry['memory_bytes'] is None else \
            f"memory {entry['memory_bytes'] / 2**20:8.1f} MiB ({_fmt_ratio(r['memory'])}), " \
            f"saved activations {entry['saved_activation_bytes'] / 2**20:7.1f} MiB " \
            f"({_fmt_ratio(r['saved_activations'])})"
        flops = 'FLOPs n/a' if entry['flops'] is None else \
            f"{entry['flops_part']} FLOPs {entry['flops'] / 1e9:7.3f}G (ideal " \
            f"{_fmt_ratio(r['flops'])})"
        lines.append(
            f"{osp.basename(entry['config']):45s} "
            f"input {'x'.join(map(str, entry['input_shape']))} | "
            f"train {entry['train_images_per_s']:8.1f} img/s ({_fmt_ratio(r['train'])}) | "
            f"infer {entry['infer_images_per_s']:8.1f} img/s ({_fmt_ratio(r['infer'])}) | "
            f"{memory} | {flops} | params {entry['params'] / 1e6:.2f}M")
        if entry.get('profile'):
            lines.append('    profile: ' + format_profile(entry['profile']))
    for check in results['checks']:
        relation = '<=' if check['target'].startswith('max') else '>='
        value = 'n/a' if check['value'] is None else f"{check['value']:.3f}"
        lines.append(f"{'PASS' if check['passed'] else 'FAIL'} {osp.basename(check['config'])}"
                     f": {check['ratio']} ratio {value}, target {relation} {check['limit']:.3f} "
                     f"({check['target']})")
    return '\n'.join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args._memory_of is not None:  # child process of the memory measurement
        register_all_modules()
        apply_settings(args)
        bench = setup(_models(args)[args._memory_of], args, with_flops=False)
        print(_MEMORY_TAG + json.dumps(training_memory(bench, args)), flush=True)
        return 0
    if not args.onnx and (args.onnx_batch_sizes or args.min_onnx_speedup is not None):
        print('error: --onnx-batch-sizes and --min-onnx-speedup need --onnx', file=sys.stderr)
        return 2
    if args.onnx:
        from mmpoly.deploy import format_onnx_benchmark, run_onnx_benchmark
        results = run_onnx_benchmark(args)
        print(format_onnx_benchmark(results))
        if args.json:
            write_json(results, args.json)
        return 0 if results['passed'] else 1
    results = run_benchmark(args)
    print(format_results(results))
    if args.json:
        write_json(results, args.json)
    return 0 if results['passed'] else 1


if __name__ == '__main__':
    sys.exit(main())
