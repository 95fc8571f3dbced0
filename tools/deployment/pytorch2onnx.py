"""Export an mmpoly classifier (or a detector's backbone + neck) to ONNX and check it.

    python tools/deployment/pytorch2onnx.py CONFIG [CHECKPOINT] [--shape C H W] \
        [--batch-size B] [--dynamic-batch] [--dynamic-size] [--opset N] [--out FILE] [--verify]

Exports :func:`mmpoly.deploy.inference_copy` of the model (BN and α folded) with
``torch.onnx.export`` (the ``torch.export``-based exporter), checks the graph with the ONNX
checker and writes ``--out`` atomically (default ``work_dirs/onnx/<config>.onnx``).
The input is the normalised batch (as after the config's data preprocessor), its shape by
default the one the config's test pipeline gives (:func:`mmpoly.deploy.input_shape_from_config`).
A classifier's output is its logits; a detector's the feature maps of its backbone + neck.
The graph holds no preprocessing: the tool prints what it expects (:func:`expected_input`): the
channel order, and the ``mean`` and ``std`` to normalise with, as the config's data
preprocessor does (ImageNet and detection configs flip OpenCV's BGR images to RGB first).

``--verify`` runs onnxruntime and PyTorch (eval mode, float32) on the same random batches and
prints the largest absolute and relative difference (relative: to the largest PyTorch output);
the tool exits with status 1 when the relative one exceeds ``--rtol`` (default
:data:`mmpoly.deploy.PARITY_RTOL`, 1e-4). Without CHECKPOINT the model keeps its initial weights
(said on the output).
"""
import argparse
import math
import os.path as osp
import sys
from typing import Any, List, Optional, Sequence, Tuple

import torch

from mmpoly.deploy import (DEFAULT_OPSET, MIN_OPSET, PARITY_RTOL, check_opset, export_onnx,
                           fixed_size_modules, input_shape_from_config, is_detector, load_model,
                           onnx_parity, onnx_session)
from mmpoly.utils.startup import StartupError, out_file_problem


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f'must be a positive integer, got {value}')
    return number


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Export an mmpoly model to ONNX')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', nargs='?', help='checkpoint (state_dict); default: none, '
                        'the initial weights')
    parser.add_argument('--shape', type=_positive_int, nargs=3, metavar=('C', 'H', 'W'),
                        help='input shape (default: from the config\'s test pipeline)')
    parser.add_argument('--batch-size', type=_positive_int, default=1,
                        help='batch of the example input (the fixed batch without '
                        '--dynamic-batch); default 1')
    parser.add_argument('--dynamic-batch', action='store_true', help='a symbolic batch axis')
    parser.add_argument('--dynamic-size', action='store_true',
                        help='symbolic H and W (refused for PDC-NL, built for one size)')
    parser.add_argument('--opset', type=int, default=DEFAULT_OPSET,
                        help=f'ai.onnx opset (>= {MIN_OPSET}, up to the newest the installed '
                        f'onnx knows; default {DEFAULT_OPSET})')
    parser.add_argument('--out', help='output .onnx (default work_dirs/onnx/<config>.onnx)')
    parser.add_argument('--verify', action='store_true',
                        help='compare onnxruntime with PyTorch on random inputs')
    parser.add_argument('--rtol', type=float, default=PARITY_RTOL,
                        help=f'largest accepted relative difference with --verify '
                        f'({PARITY_RTOL:g})')
    args = parser.parse_args(argv)
    try:
        check_opset(args.opset, '--opset')
    except ValueError as error:
        parser.error(str(error))
    if not math.isfinite(args.rtol) or args.rtol < 0:
        parser.error(f'--rtol must be a finite number >= 0 (the largest accepted relative '
                     f'difference), got {args.rtol}')
    if not osp.isfile(args.config):
        parser.error(f'config {args.config!r} is not a file')
    if args.checkpoint is not None and not osp.isfile(args.checkpoint):
        parser.error(f'checkpoint {args.checkpoint!r} is not a file')
    if args.out is None:
        stem = osp.splitext(osp.basename(args.config))[0]
        args.out = osp.join('work_dirs', 'onnx', f'{stem}.onnx')
    # the export takes a while and writes its result only at the end: check the file first
    problem = out_file_problem(args.out, '--out', [('CONFIG', args.config),
                                                   ('CHECKPOINT', args.checkpoint)])
    if problem:
        parser.error(f'{problem}; give the .onnx file to write, in a writable folder')
    if osp.splitext(args.out)[1].lower() in ('.pth', '.pt'):  # read back as a checkpoint
        parser.error(f'--out {args.out!r}: .pth and .pt name PyTorch checkpoints, and the file '
                     'would hold an ONNX model; give a .onnx file')
    return args


def verification_batches(shape: Sequence[int], batch_size: int, dynamic_batch: bool,
                         dynamic_size: bool) -> List[torch.Tensor]:
    """Seeded N(0, 1) batches: the export's shape, another batch size if the batch is dynamic,
    and a 3/4-size input if H, W are dynamic."""
    gen = torch.Generator().manual_seed(1)
    channels, height, width = shape
    shapes = [(batch_size, channels, height, width)]
    if dynamic_batch:
        shapes.append((batch_size + 2, channels, height, width))
    if dynamic_size:
        shapes.append((batch_size, channels, max(1, 3 * height // 4), max(1, 3 * width // 4)))
    return [torch.randn(s, generator=gen) for s in shapes]


def _loads_with_opencv(cfg: Any) -> bool:
    """Whether the config's test pipeline reads image files with mmcv's ``LoadImageFromFile``
    (OpenCV's BGR channel order), rather than arrays from its dataset (CIFAR's are RGB)."""
    loader = cfg.get('test_dataloader') or cfg.get('val_dataloader') or {}
    dataset = loader.get('dataset', {}) or {}
    while 'dataset' in dataset:  # wrappers (ClassBalancedDataset, RepeatDataset, …)
        dataset = dataset['dataset']
    for transform in dataset.get('pipeline', None) or cfg.get('test_pipeline', None) or []:
        kind = transform.get('type')
        name = kind if isinstance(kind, str) else getattr(kind, '__name__', '')
        if name.split('.')[-1] == 'LoadImageFromFile':
            return True
    return False


def _channel_order(cfg: Any, channels: int, flips: bool) -> str:
    """The channel order of the graph's input in words."""
    if channels != 3:
        return f'{channels}, as the test pipeline gives {"it" if channels == 1 else "them"}'
    if _loads_with_opencv(cfg):
        if flips:
            return ('RGB (the config reads images as BGR, as OpenCV does, and its data '
                    'preprocessor flips them to RGB: convert BGR images, e.g. from cv2.imread, '
                    'to RGB first)')
        return ('BGR, as OpenCV reads images (the data preprocessor does not reorder them: '
                'feed cv2.imread\'s order; convert RGB images to BGR)')
    dataset = str(((cfg.get('test_dataloader') or {}).get('dataset') or {}).get('type', ''))
    if 'CIFAR' in dataset:
        order = 'BGR' if flips else 'RGB'
        return (f'{order} (CIFAR\'s arrays are RGB, and the data preprocessor '
                f'{"flips them" if flips else "keeps that order"})')
    return ('in the order the config\'s dataset gives them, '
            + ('reversed (the data preprocessor flips them)' if flips
               else '(the data preprocessor does not reorder them)'))


def expected_input(cfg: Any, model: torch.nn.Module, shape: Sequence[int]) -> str:
    """What the exported graph takes, in words: the input shape, the channel order, the
    normalisation and (detectors) the padding of the model's data preprocessor, which the graph
    does not hold."""
    pre = model.data_preprocessor
    flips = bool(getattr(pre, '_channel_conversion', False) or getattr(pre, 'to_rgb', False))
    channels = shape[0]
    parts = [f'float32 (N, {", ".join(map(str, shape))})',
             f'channels {_channel_order(cfg, channels, flips)}']
    if getattr(pre, '_enable_normalize', False):
        mean = [round(float(v), 4) for v in pre.mean.flatten()]
        std = [round(float(v), 4) for v in pre.std.flatten()]
        parts.append(f'normalised: (pixel - mean) / std per channel, pixels 0-255, mean {mean}, '
                     f'std {std}')
    else:
        parts.append('not normalised (the data preprocessor has no mean / std: the values as '
                     'the test pipeline gives them)')
    divisor = int(getattr(pre, 'pad_size_divisor', 1) or 1)
    if divisor > 1:
        parts.append(f'H and W padded at the bottom / right to multiples of {divisor} with '
                     f'{getattr(pre, "pad_value", 0)} (after normalising)')
    return 'the graph expects: ' + '; '.join(parts)


def _first_conv(model: torch.nn.Module) -> Optional[Tuple[str, int]]:
    """(name, in_channels) of the model's first 2-d convolution (the stem's), if it has one."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Conv2d):
            return name, module.in_channels
    return None


def option_problem(args: argparse.Namespace, model: torch.nn.Module,
                   config_shape: Optional[Tuple[int, int, int]]) -> Optional[str]:
    """Why ``--shape`` or ``--dynamic-size`` cannot export this model, in the options' words
    (the export's own errors name :func:`mmpoly.deploy.export_onnx`'s arguments)."""
    first = _first_conv(model)
    if args.shape and first is not None and args.shape[0] != first[1]:
        given = ' '.join(map(str, args.shape))
        default = (f'; without --shape the config\'s test pipeline gives '
                   f'{" ".join(map(str, config_shape))}' if config_shape else '')
        return (f'--shape {given}: C={args.shape[0]}, but the model takes {first[1]}-channel '
                f'input (its first convolution, {first[0]}, has in_channels {first[1]}); give '
                f'--shape {first[1]} {args.shape[1]} {args.shape[2]}{default}')
    fixed = fixed_size_modules(model)
    if args.dynamic_size and fixed:
        size = f'{config_shape[1]}x{config_shape[2]}' if config_shape else 'its one input size'
        spatial = tuple(model.get_submodule(fixed[0]).spatial_size)
        return (f'--dynamic-size: {len(fixed)} module(s) of this model are built for one '
                f'feature-map size ({fixed[0]}: spatial_size {spatial}; PDC-NL\'s C4 has one '
                f'output channel per position), so H and W cannot be symbolic; export without '
                f'--dynamic-size, at {size} (--dynamic-batch is allowed)')
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        cfg, model = load_model(args.config, args.checkpoint)
    except (ValueError, StartupError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 2
    if args.checkpoint is None:
        print('no checkpoint given: exporting the initial (random) weights')
    try:
        config_shape: Optional[Tuple[int, int, int]] = input_shape_from_config(cfg)
    except ValueError as error:
        if not args.shape:  # the message says to give --shape
            print(f'error: {error}', file=sys.stderr)
            return 2
        config_shape = None
    problem = option_problem(args, model, config_shape)
    if problem:
        print(f'error: {problem}', file=sys.stderr)
        return 2
    shape = tuple(args.shape) if args.shape else config_shape
    part = 'features' if is_detector(model) else 'classifier'
    fixed = fixed_size_modules(model)
    note = f', fixed-size modules: {len(fixed)} (H, W must stay {shape[1]}x{shape[2]})' \
        if fixed else ''
    print(f'exporting {args.config} ({part}), input {(args.batch_size, *shape)}, opset '
          f'{args.opset}, dynamic batch {args.dynamic_batch}, dynamic size '
          f'{args.dynamic_size}{note}')
    try:
        export_onnx(model, args.out, shape, args.batch_size, args.opset, args.dynamic_batch,
                    args.dynamic_size, part)
    except (ValueError, RuntimeError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 2
    print(f'wrote {args.out} (ONNX checker: passed)')
    print(expected_input(cfg, model, shape))
    if not args.verify:
        return 0
    session = onnx_session(args.out)
    worst = 0.0
    for x in verification_batches(shape, args.batch_size, args.dynamic_batch,
                                  args.dynamic_size):
        try:
            parity = onnx_parity(model, args.out, x, part, session)
        except ValueError as error:  # e.g. PyTorch's own output is not finite
            print(f'error: --verify: {error}; {args.out} was written, but its outputs could not '
                  'be compared', file=sys.stderr)
            return 1
        worst = max(worst, parity.max_rel)
        print(f'input {tuple(x.shape)}: outputs {parity.shapes}, max |onnxruntime - PyTorch| '
              f'{parity.max_abs:.3e}, relative to max |PyTorch| ({parity.scale:.3e}): '
              f'{parity.max_rel:.3e}')
    passed = worst <= args.rtol
    print(f"{'PASS' if passed else 'FAIL'}: largest relative difference {worst:.3e} "
          f"(limit {args.rtol:g})")
    return 0 if passed else 1


if __name__ == '__main__':
    sys.exit(main())
