"""Time each convolution shape of models alone, as their training step runs it.

    python tools/analysis_tools/conv_shapes.py --preset gpu-in1k-pdc --device cuda --channels-last
    python tools/analysis_tools/conv_shapes.py CONFIG ... [--baseline BASE] --batch-size 32

Shows where a model's convolution time goes, shape by shape, next to its multiply-accumulates
(MACs). For each model (a ``benchmark.py`` preset's configs and baseline, or the configs given):

1. One forward pass at batch 2 records every ``nn.Conv2d`` call: input channels and size, output
   channels and size, kernel, stride, padding, dilation, groups, bias, and whether the input
   needs a gradient (the stem's image does not).
2. Each distinct shape is timed alone at ``--batch-size`` with ``torch.utils.benchmark``
   (median of blocked runs; CUDA is synchronised). Two timings: the forward without autograd
   (inference), and the forward with the backward pass (the input gradient where training needs
   one, and the weight and bias gradients).

The printout gives, per model, the convolutions' total time per step (each shape's time × its
calls), their MACs, the shapes by time with their rate (GMAC/s), and, given a baseline, each
model's ratios to it: time and MACs. The convolutions run in ``--dtype`` (what autocast gives
them) and in NCHW or ``--channels-last`` memory; ``--cudnn-benchmark`` lets cuDNN time its
algorithms first.
``--json OUT`` writes it all, complete or not at all.
"""
import argparse
import importlib.util
import json
import math
import os.path as osp
import platform
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.model import BaseModel
from torch import nn
from torch.utils import benchmark as torch_benchmark

from mmpoly.deploy import is_detector
from mmpoly.engine.saving import atomic_write
from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import build_model, default_input_shape
from mmpoly.utils.startup import out_file_problem


def _benchmark_tool():
    """``benchmark.py`` of this folder (its presets and config lookup)."""
    path = osp.join(osp.dirname(osp.abspath(__file__)), 'benchmark.py')
    spec = importlib.util.spec_from_file_location('mmpoly_benchmark_tool', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class ConvShape:
    """One convolution as a model calls it (sizes of one image)."""
    in_channels: int
    height: int
    width: int
    out_channels: int
    out_height: int
    out_width: int
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[int, int]
    dilation: Tuple[int, int]
    groups: int
    bias: bool
    input_grad: bool

    def macs(self, batch: int) -> int:
        """Multiply-accumulates of one call on ``batch`` images (as mmengine counts a conv)."""
        return (batch * self.out_channels * self.out_height * self.out_width
                * (self.in_channels // self.groups) * self.kernel[0] * self.kernel[1])

    def text(self) -> str:
        """E.g. ``120->30 1x1 s1 @56x56``."""
        extra = f' g{self.groups}' if self.groups > 1 else ''
        return (f'{self.in_channels}->{self.out_channels} {self.kernel[0]}x{self.kernel[1]} '
                f's{self.stride[0]}{extra} @{self.height}x{self.width}')


def record_shapes(model: nn.Module, input_shape: Tuple[int, int, int]) -> Dict[ConvShape, int]:
    """{shape: calls} of every ``nn.Conv2d`` call in one training-mode forward of ``model``
    (an mmengine model: ``mode='tensor'``; a detector: its backbone and neck) on a random
    batch of 2 (a training-mode BatchNorm of 1×1 maps needs 2 images)."""
    calls: Dict[ConvShape, int] = {}

    def hook(module: nn.Conv2d, inputs: Tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        if isinstance(module.padding, str):
            raise ValueError(f'conv_shapes: padding={module.padding!r} of {module} is not '
                             f'supported (give it as numbers)')
        x = inputs[0]
        shape = ConvShape(module.in_channels, x.shape[-2], x.shape[-1], module.out_channels,
                          output.shape[-2], output.shape[-1], tuple(module.kernel_size),
                          tuple(module.stride), tuple(module.padding),
                          tuple(module.dilation), module.groups, module.bias is not None,
                          x.requires_grad)
        calls[shape] = calls.get(shape, 0) + 1

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, nn.Conv2d)]
    try:
        model.train()
        image = torch.randn(2, *input_shape)  # (a training-mode BN needs 2 values a channel)
        if is_detector(model):  # the backbone and neck
            model.extract_feat(image)
        elif isinstance(model, BaseModel):
            model(image, mode='tensor')
        else:
            model(image)
    finally:
        for handle in handles:
            handle.remove()
    if not calls:
        raise ValueError(f'conv_shapes: {type(model).__name__} calls no nn.Conv2d')
    return calls


def time_shape(shape: ConvShape, batch: int, device: str, dtype: torch.dtype,
               channels_last: bool, min_run_time: float) -> Tuple[float, float]:
    """(forward, forward + backward) seconds of one call of ``shape`` on ``batch`` images."""
    memory = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(batch, shape.in_channels, shape.height, shape.width, device=device,
                    dtype=dtype).contiguous(memory_format=memory)
    weight = torch.randn(shape.out_channels, shape.in_channels // shape.groups, *shape.kernel,
                         device=device, dtype=dtype).contiguous(memory_format=memory)
    bias = torch.randn(shape.out_channels, device=device, dtype=dtype) if shape.bias else None
    x.requires_grad_(shape.input_grad)
    weight.requires_grad_(True)
    inputs = [t for t in (x, weight, bias) if t is not None and t.requires_grad]
    if bias is not None:
        bias.requires_grad_(True)
        inputs.append(bias)

    def forward() -> torch.Tensor:
        return F.conv2d(x, weight, bias, shape.stride, shape.padding, shape.dilation,
                        shape.groups)

    grad = torch.randn_like(forward())

    def inference() -> None:
        with torch.no_grad():
            forward()

    def training() -> None:
        torch.autograd.grad(forward(), inputs, grad)

    times = []
    for fn in (inference, training):
        fn()  # cuDNN's algorithm choice (and its timing, with --cudnn-benchmark) before timing
        timer = torch_benchmark.Timer(stmt='fn()', globals=dict(fn=fn))
        times.append(timer.blocked_autorange(min_run_time=min_run_time).median)
    return times[0], times[1]


def measure_model(config: str, args: argparse.Namespace) -> Dict[str, Any]:
    """The conv shapes of ``config``'s model with their calls, MACs and times."""
    cfg = Config.fromfile(config)
    part = 'model'
    model = build_model(cfg, part)
    shape = default_input_shape(cfg)
    if args.input_size:
        shape = (shape[0], *args.input_size)
    calls = record_shapes(model, shape)
    rows = []
    for conv, count in calls.items():
        forward_s, train_s = time_shape(conv, args.batch_size, args.device,
                                        getattr(torch, args.dtype), args.channels_last,
                                        args.min_run_time)
        macs = conv.macs(args.batch_size)
        rows.append(dict(shape=asdict(conv), text=conv.text(), calls=count, macs=macs,
                         forward_s=forward_s, train_s=train_s,
                         train_gmacs=3 * macs / train_s / 1e9 if conv.input_grad else
                         2 * macs / train_s / 1e9))
    rows.sort(key=lambda row: -row['calls'] * row['train_s'])
    return dict(config=config, input_shape=list(shape), shapes=rows,
                calls=sum(row['calls'] for row in rows),
                macs=sum(row['calls'] * row['macs'] for row in rows),
                forward_s=sum(row['calls'] * row['forward_s'] for row in rows),
                train_s=sum(row['calls'] * row['train_s'] for row in rows))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('configs', nargs='*', help='config files (or mmpoly config names)')
    parser.add_argument('--baseline', help='the config the ratios are relative to (optional: '
                        'without it, no ratios)')
    parser.add_argument('--preset', help='a benchmark.py preset: its configs, baseline, batch '
                        'size, input size and device')
    parser.add_argument('--batch-size', type=int, help='images per call (the preset\'s, or 32)')
    parser.add_argument('--input-size', type=int, nargs=2, metavar=('H', 'W'),
                        help='image size (default: the config\'s)')
    parser.add_argument('--device', choices=['cpu', 'cuda'],
                        help='cpu or cuda (the preset\'s, or cpu)')
    parser.add_argument('--dtype', choices=['float32', 'bfloat16', 'float16'],
                        default='float32',
                        help='the convolutions\' dtype (bfloat16 / float16: what autocast '
                        'gives them)')
    parser.add_argument('--channels-last', action='store_true',
                        help='inputs and weights in channels_last memory')
    parser.add_argument('--cudnn-benchmark', action='store_true',
                        help='torch.backends.cudnn.benchmark = True (CUDA)')
    parser.add_argument('--threads', type=int, help='torch.set_num_threads (CPU)')
    parser.add_argument('--min-run-time', type=float, default=0.2,
                        help='seconds of timed runs per shape and pass (0.2)')
    parser.add_argument('--top', type=int, default=8, help='shapes printed per model (8)')
    parser.add_argument('--json', metavar='OUT', help='write the results to this JSON file')
    args = parser.parse_args(argv)
    tool = _benchmark_tool()
    if args.preset is not None:
        if args.preset not in tool.PRESETS:
            parser.error(f'--preset: {args.preset!r} is not a benchmark.py preset; allowed: '
                         f'{sorted(tool.PRESETS)}')
        preset = tool.PRESETS[args.preset]
        args.configs = args.configs or list(preset['configs'])
        for name in ('baseline', 'batch_size', 'input_size', 'device'):
            if getattr(args, name) is None:
                setattr(args, name, preset.get(name))
    if args.batch_size is None:
        args.batch_size = 32
    if args.device is None:
        args.device = 'cpu'
    for name in ('batch_size', 'threads', 'top'):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got {value}')
    if args.input_size and min(args.input_size) < 1:
        parser.error(f'--input-size must be positive, got {args.input_size}')
    if not (math.isfinite(args.min_run_time) and args.min_run_time > 0):  # nan: timed forever
        parser.error(f'--min-run-time must be a finite number of seconds > 0, got '
                     f'{args.min_run_time}')
    if args.json:  # written after the timings: checked before them
        problem = out_file_problem(args.json, '--json')
        if problem:
            parser.error(f'{problem}; give a .json file in a writable folder')
    if not args.configs:
        parser.error('give one or more configs (and optionally --baseline), or a --preset')
    if args.device == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: no CUDA device is available (use --device cpu)')
    if args.cudnn_benchmark and args.device != 'cuda':
        parser.error('--cudnn-benchmark needs --device cuda (cuDNN is CUDA\'s)')
    if args.dtype == 'float16' and args.device == 'cpu':
        parser.error('--dtype float16 needs --device cuda; on CPU use bfloat16')
    try:
        if args.baseline is not None:
            args.baseline = tool._config_path(args.baseline)
        args.configs = [tool._config_path(c) for c in args.configs]
    except FileNotFoundError as error:
        parser.error(str(error))
    return args


def format_results(results: Dict[str, Any], top: int = 8) -> str:
    """The printout: settings, then per model its totals, ratios and costliest shapes."""
    s = results['settings']
    lines = [f"{s['device_name']} ({s['device']}), torch {s['torch']}, {s['dtype']}, "
             f"{'channels-last' if s['channels_last'] else 'NCHW'}, batch {s['batch_size']}"
             f"{', cudnn.benchmark' if s['cudnn_benchmark'] else ''}, {s['date']}"]
    base = next((model for model in results['models'] if model['baseline']), None)
    for model in results['models']:
        if base is None:
            ratio = ''
        elif model is base:
            ratio = ' (baseline)'
        else:
            ratio = (f" (time {model['train_s'] / base['train_s']:.2f}x, MACs "
                     f"{model['macs'] / base['macs']:.2f}x the baseline's)")
        lines += ['', f"{osp.basename(model['config'])}: {model['calls']} convolutions, "
                  f"{model['macs'] / 1e9:.2f} GMAC, training {1e3 * model['train_s']:.2f} ms, "
                  f"inference {1e3 * model['forward_s']:.2f} ms per step{ratio}"]
        for row in model['shapes'][:top]:
            share = row['calls'] * row['train_s'] / model['train_s']
            lines.append(f"  {row['text']:<28} x{row['calls']:<3} {1e3 * row['train_s']:8.3f} "
                         f"ms  {100 * share:4.1f} %  {row['train_gmacs']:8.1f} GMAC/s")
    return '\n'.join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    register_all_modules()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    settings = dict(
        torch=torch.__version__, cuda=torch.version.cuda, device=args.device,
        device_name=(torch.cuda.get_device_name() if args.device == 'cuda' else
                     platform.processor() or platform.machine()),
        dtype=args.dtype, channels_last=args.channels_last,
        cudnn_benchmark=args.cudnn_benchmark, batch_size=args.batch_size,
        input_size=args.input_size, threads=torch.get_num_threads(),
        min_run_time=args.min_run_time, preset=args.preset,
        date=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
        command=' '.join(['python', 'tools/analysis_tools/conv_shapes.py',
                          *(sys.argv[1:] if argv is None else argv)]))
    baseline = [] if args.baseline is None else [args.baseline]
    models = [dict(measure_model(config, args), baseline=i < len(baseline))
              for i, config in enumerate([*baseline, *args.configs])]
    results = dict(settings=settings, models=models)
    print(format_results(results, args.top), flush=True)
    if args.json:
        atomic_write(json.dumps(results, indent=2), args.json)
    return 0


if __name__ == '__main__':
    sys.exit(main())
