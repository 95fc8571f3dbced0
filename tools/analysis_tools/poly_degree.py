"""Measure the polynomial degree of every block, stage and of the whole backbone of a config
(the taxonomy of arXiv:2104.07916: ResNet 1, SE 2, NL 3, Π-net / PDC N, PDC-NL[3] / [4] 3 / 4).

    python tools/analysis_tools/poly_degree.py configs/pdc3_resnet18_1xb128_cifar100.py
    python tools/analysis_tools/poly_degree.py configs/nl_resnet18_1xb128_cifar100.py \
        --input-size 16 16 --max-degree 6 --json degrees.json

The backbone is built with its activations off (``use_activation=False`` and
``use_softmax=False`` wherever the backbone, its ``block_cfg`` and its plugins accept them; the
report names what it switched), random float64 weights, BN in eval mode (affine) and the
statistics of InstanceNorm / GroupNorm / LayerNorm frozen at the reference input
(``--keep-norms`` leaves them data-dependent, i.e. not polynomial). Each block is measured on its
own input by finite differences along a random line; stages and the backbone likewise (the
backbone from the stem output when the stem is not a polynomial, e.g. with a max-pool). Degrees
above ``--max-degree + 1`` are reported as a lower bound, next to the product of block degrees.
Any block registered in ``MODELS`` works; a block that declares ``degree`` is checked against it.

Exit status: 1 when a part with an expected degree measures another degree or no polynomial
(a block that misstates its ``degree``, an activation no option switches off), else 0; a part
without an expected degree (the stem, a block declaring none) only reports what it measured.
Bad input (a missing config, ``--max-degree`` outside 1..20, a non-positive ``--input-size``, an
input size a module cannot take, e.g. a PDC-NL block built for another size) is one line
``tools/analysis_tools/poly_degree.py: error: ...`` naming the option and the value, exit status
2 (``MMPOLY_TRACEBACK=1`` adds the traceback); an unknown ``--cfg-options`` key exits 1.
"""
import argparse
import json
import os
import sys
import traceback
from typing import Optional, Sequence


from mmpoly.analysis import MAX_MEASURABLE_DEGREE, PARTS, analyse_config
from mmpoly.fileio import atomic_write
from mmpoly.utils import register_all_modules
from mmpoly.utils.startup import (TRACEBACK_ENV, CfgOptionsAction, out_file_problem,
                                  startup_errors)

PROG = 'tools/analysis_tools/poly_degree.py'

#: Statuses that count as agreement with an expected degree.
OK_STATUSES = ('match', 'beyond max')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Measure the polynomial degree of the blocks and backbone of a config')
    parser.add_argument('config', help='config file path')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction,
                        help='override config settings, key=value (applied before the '
                        'activations are switched off)')
    parser.add_argument('--input-size', type=int, nargs=2, metavar=('H', 'W'),
                        help='input size (default: the config\'s test images: 28 28 for '
                        'Fashion-MNIST, 32 32 for CIFAR, 224 224 for ImageNet; PDC-NL blocks '
                        'need the size they were built for)')
    parser.add_argument('--max-degree', type=int, default=10,
                        help=f'highest degree to resolve, 1..{MAX_MEASURABLE_DEGREE} '
                        '(default 10); costs max-degree + 3 forwards per part')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the random weights, input and directions')
    parser.add_argument('--parts', nargs='+', choices=PARTS, default=list(PARTS),
                        help='what to measure (default: all; stages and backbone cost a forward '
                        'of the stages per sample, the stem comes with the backbone)')
    parser.add_argument('--keep-norms', action='store_true',
                        help='do not freeze InstanceNorm / GroupNorm / LayerNorm statistics')
    parser.add_argument('--json', metavar='OUT', help='also write the report as JSON to OUT')
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """Raise a ValueError naming the option and its value for a ``--max-degree`` outside
    1..:data:`MAX_MEASURABLE_DEGREE` or a ``--input-size`` that is not two positive sizes."""
    if not 1 <= args.max_degree <= MAX_MEASURABLE_DEGREE:
        raise ValueError(f'--max-degree {args.max_degree}: max_degree must be an int in [1, '
                         f'{MAX_MEASURABLE_DEGREE}] (finite differences of higher order lose '
                         f'float64 precision), got {args.max_degree}')
    if args.input_size is not None and min(args.input_size) < 1:
        raise ValueError(f'--input-size {" ".join(map(str, args.input_size))}: must be two '
                         'positive integers H W (the input height and width in pixels)')
    problem = args.json and out_file_problem(args.json, '--json', [('CONFIG', args.config)])
    if problem:  # written after the analysis: checked first
        raise ValueError(f'{problem}; give the JSON file to write, in a writable folder')


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The tool; bad input raises (FileNotFoundError, ValueError) for :func:`cli` to print."""
    args = parse_args(argv)
    check_args(args)
    register_all_modules()
    # analyse_config checks the --cfg-options keys (a StartupError) before it merges them
    with startup_errors(PROG):
        try:
            report = analyse_config(args.config, input_size=args.input_size,
                                    max_degree=args.max_degree, seed=args.seed,
                                    freeze=not args.keep_norms, cfg_options=args.cfg_options,
                                    parts=args.parts)
        except ValueError as exc:
            where = (f'measured at --input-size {" ".join(map(str, args.input_size))}; leave '
                     '--input-size out to measure at the config\'s test image size') \
                if args.input_size else 'measured at the config\'s test image size'
            raise ValueError(f'{exc} ({where})') from exc
    print(report.format_table())
    if args.json:
        atomic_write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False), args.json)
        print(f'report written to {args.json}')
    failed = [r for r in report.rows if r.expected is not None and r.status not in OK_STATUSES]
    return 1 if failed else 0


def cli(argv: Optional[Sequence[str]] = None) -> int:
    """:func:`main` with bad input (a missing config, a refused value) as one line
    ``PROG: error: ...`` on stderr and exit status 2."""
    try:
        return main(argv)
    except (FileNotFoundError, ValueError) as exc:
        print(f'{PROG}: error: {exc}', file=sys.stderr, flush=True)
        if os.environ.get(TRACEBACK_ENV, '') not in ('', '0'):
            traceback.print_exception(exc)
        return 2


if __name__ == '__main__':
    sys.exit(cli())
