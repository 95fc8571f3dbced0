"""Print the parameter count and FLOPs of a config's model (or of its backbone).

    python tools/analysis_tools/get_flops.py configs/pdc_resnet18_8xb32_in1k.py
    python tools/analysis_tools/get_flops.py configs/pdc-comp_resnet18_1xb128_cifar10.py \
        --shape 32 32 --part backbone

FLOPs are mmengine's count of multiply-accumulates (conv, linear, norm, pooling; element-wise
products are not counted), as in mmpretrain's get_flops tool.
"""
import argparse
from typing import Optional, Sequence


from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import default_input_shape, measure
from mmpoly.utils.startup import (CfgOptionsAction, StartupError, check_cfg_options,
                                  check_model_config, load_config, startup_errors)

PROG = 'tools/analysis_tools/get_flops.py'


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f'must be a positive integer, got {value}')
    return number


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Count parameters and FLOPs of a config')
    parser.add_argument('config', help='config file path')
    parser.add_argument('--shape', type=_positive_int, nargs=2, metavar=('H', 'W'),
                        help='input size (default: the config\'s test images: 28 28 for '
                        'Fashion-MNIST, 32 32 for CIFAR, 224 224 for ImageNet)')
    parser.add_argument('--part', choices=['model', 'backbone'], default='model',
                        help='count the whole model or only its backbone')
    parser.add_argument('--no-flops', action='store_true', help='count parameters only')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction,
                        help='override config settings, key=value')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    register_all_modules()
    with startup_errors(PROG):
        cfg = load_config(args.config)
        if args.cfg_options:
            check_cfg_options(cfg, args.cfg_options)
            cfg.merge_from_dict(args.cfg_options)
        check_model_config(cfg, args.config)
        shape = default_input_shape(cfg)
        if args.shape:
            shape = (shape[0], *args.shape)
        try:
            result = measure(cfg, args.part, shape, with_flops=not args.no_flops)
        except (ValueError, RuntimeError) as error:  # e.g. a norm left with one value
            given = f' (--shape {args.shape[0]} {args.shape[1]})' if args.shape else ''
            raise StartupError(f'the model does not take a {(1, *shape)} input{given}: '
                               f'{str(error).splitlines()[0]}') from error
    print(f'config: {args.config} ({args.part})')
    print(f'input shape: {result.input_shape}')
    print(f'params: {result.params:,} ({result.params / 1e6:.2f}M)')
    if result.flops is not None:
        print(f'flops: {result.flops:,} ({result.flops / 1e9:.4f}G)')


if __name__ == '__main__':
    main()
