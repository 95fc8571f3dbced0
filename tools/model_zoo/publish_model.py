"""Publish a trained checkpoint the OpenMMLab way: only ``state_dict`` and ``meta`` kept (no
optimizer, message hub or scheduler state), half precision where that is exact enough, and the
first 8 hex digits of the file's sha256 in its name.

    python tools/model_zoo/publish_model.py work_dirs/zoo/X/seed0/iter_1400.pth \\
        checkpoints/fashion-mnist/X --config configs/X.py
    # -> checkpoints/fashion-mnist/X-<sha256[:8]>.pth

The floating-point tensors are stored as float16 when the model's top-1 on the test set
(the config's test_dataloader: the full 10,000 Fashion-MNIST test images) with the float16-rounded
weights differs from the float32 one by less than ``--max-change`` points (default 0.05);
otherwise they stay float32 and the tool says so. The file is written atomically.
"""
import argparse
import copy
import hashlib
import io
import math
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import torch
from mmengine.config import Config
from torch import nn

from mmpoly.engine.checkpoint import load_checkpoint_file
from mmpoly.engine.saving import atomic_write
from mmpoly.utils.startup import StartupError, load_config, out_file_problem

#: What a published checkpoint keeps of a training checkpoint.
KEPT_KEYS = ('state_dict', 'meta')
#: Largest top-1 change (points) for which float16 weights are published.
MAX_CHANGE = 0.05


def to_half(state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Floating-point tensors as float16; integer ones (e.g. BN's ``num_batches_tracked``) kept."""
    return {k: v.half() if torch.is_floating_point(v) else v for k, v in state_dict.items()}


@torch.no_grad()
def evaluate(model: nn.Module, cfg: Config, num_images: Optional[int] = None) -> float:
    """Top-1 accuracy (%) of ``model`` on the config's test set (its first ``num_images``)."""
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner

    loader_cfg = cfg.test_dataloader.copy()
    loader_cfg.update(num_workers=0, persistent_workers=False)
    loader_cfg.dataset = loader_cfg.dataset.copy()
    if num_images is not None:
        loader_cfg.dataset.indices = num_images
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmpretrain')):
        loader = Runner.build_dataloader(loader_cfg)
    model.eval()
    correct = total = 0
    for batch in loader:
        for sample in model.test_step(batch):
            correct += int(sample.pred_label.item() == sample.gt_label.item())
            total += 1
    if total == 0:
        raise ValueError('the test set is empty')
    return 100.0 * correct / total


def _model(cfg: Config, state_dict: Dict[str, torch.Tensor]) -> nn.Module:
    """The config's model as the Runner builds it (with the config's top-level
    ``data_preprocessor``: normalisation), holding ``state_dict``."""
    from mmpoly.utils.complexity import build_model

    cfg = copy.deepcopy(cfg)
    if cfg.get('data_preprocessor') is not None:
        cfg.model.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = build_model(cfg)
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        raise ValueError(f'the checkpoint does not fit the config\'s model: missing '
                         f'{missing[:5]}, unexpected {unexpected[:5]}')
    return model


def publish(checkpoint: str, out_prefix: str, config: str, half: Optional[bool] = None,
            max_change: float = MAX_CHANGE, num_images: Optional[int] = None) -> Dict[str, Any]:
    """Write the published checkpoint; returns its path, sha256, dtype and test top-1s.

    Args:
        checkpoint: a training checkpoint (``tools/train.py``'s ``iter_N.pth``).
        out_prefix: the published file is ``<out_prefix>-<sha256[:8]>.pth``.
        config: the config that trained it (builds the model and the test set).
        half: True / False forces float16 / float32; None decides by ``max_change``.
        max_change: largest top-1 change (points) with float16 weights.
        num_images: evaluate on the first ``num_images`` test images only (smoke tests).
    """
    from mmpoly.utils import register_all_modules

    register_all_modules(init_default_scope=False)
    source = load_checkpoint_file(checkpoint)
    if not isinstance(source, dict) or not isinstance(source.get('state_dict'), dict):
        raise ValueError(f'{checkpoint} has no state_dict (keys: {sorted(source)[:10]})')
    cfg = load_config(config)  # a StartupError naming the file if it is no config
    state = source['state_dict']
    top1_fp32 = evaluate(_model(cfg, state), cfg, num_images)
    top1_fp16 = evaluate(_model(cfg, to_half(state)), cfg, num_images)
    change = abs(top1_fp16 - top1_fp32)
    if half is None:
        half = change < max_change
        if not half:
            print(f'float16 weights change the top-1 by {change:.3f} points (>= {max_change}): '
                  'publishing float32')
    published = to_half(state) if half else state
    meta = dict(source.get('meta') or {})
    meta['publish'] = dict(source=os.path.basename(checkpoint), config=Path(config).name,
                           dtype='float16' if half else 'float32',
                           top1=top1_fp16 if half else top1_fp32, top1_float32=top1_fp32,
                           test_images=num_images)
    buffer = io.BytesIO()
    torch.save(dict(state_dict=published, meta=meta), buffer)
    data = buffer.getvalue()
    sha256 = hashlib.sha256(data).hexdigest()
    out = f'{out_prefix}-{sha256[:8]}.pth'
    atomic_write(data, out)
    return dict(path=out, sha256=sha256, dtype=meta['publish']['dtype'],
                top1=meta['publish']['top1'], top1_float32=top1_fp32, test_images=num_images)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('checkpoint', help='the training checkpoint')
    parser.add_argument('out_prefix', help='writes <out_prefix>-<sha256[:8]>.pth')
    parser.add_argument('--config', required=True, help='the config that trained it')
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument('--fp16', dest='half', action='store_const', const=True,
                           help='always float16')
    precision.add_argument('--fp32', dest='half', action='store_const', const=False,
                           help='always float32')
    parser.add_argument('--max-change', type=float, default=None,
                        help=f'float16 only if the top-1 changes by less (default: {MAX_CHANGE}; '
                        'not with --fp16 / --fp32, which choose without it)')
    parser.add_argument('--test-images', type=int, default=None,
                        help='evaluate on the first N test images (default: the whole test set)')
    args = parser.parse_args(argv)
    if args.test_images is not None and args.test_images < 1:
        parser.error(f'--test-images must be >= 1, got {args.test_images}')
    if args.max_change is not None and args.half is not None:
        parser.error(f'--max-change {args.max_change:g} has no effect with '
                     f'{"--fp16" if args.half else "--fp32"}, which sets the precision; give one '
                     'of them')
    if args.max_change is not None and not (math.isfinite(args.max_change)
                                            and args.max_change > 0):
        parser.error(f'--max-change must be a finite number of top-1 points > 0, got '
                     f'{args.max_change:g}')
    for name, path in (('CHECKPOINT', args.checkpoint), ('--config', args.config)):
        if not os.path.isfile(path):
            parser.error(f'{name} {path!r} is not a file')
    problem = out_file_problem(f'{args.out_prefix}-00000000.pth', 'OUT_PREFIX')
    if problem:  # written after the test set has been evaluated twice: checked first
        parser.error(f'{problem.replace("-00000000.pth", "")}; give a prefix in a writable '
                     'folder')
    try:
        info = publish(args.checkpoint, args.out_prefix, args.config, args.half,
                       MAX_CHANGE if args.max_change is None else args.max_change,
                       args.test_images)
    except (ValueError, StartupError) as error:  # no checkpoint, no config, or no fit
        print(f'{parser.prog}: error: {error}', file=sys.stderr)
        return 1
    print(f'published {info["path"]} ({info["dtype"]}, sha256 {info["sha256"]}): top-1 '
          f'{info["top1"]:.2f} (float32 weights: {info["top1_float32"]:.2f})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
