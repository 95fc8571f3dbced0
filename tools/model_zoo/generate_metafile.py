"""Write (or check) the model zoo's configs/metafile.yml from the paper rows (mmpoly/zoo/) and the
Fashion-MNIST zoo's results file (configs/zoo_results.json, written by zoo_results.py).

    python tools/model_zoo/generate_metafile.py            # rewrite configs/metafile.yml
    python tools/model_zoo/generate_metafile.py --check    # exit 1 if it is out of date

model-index.yml at the repository root imports it, as mmpretrain's does (for mim).
"""
import argparse
import difflib
import sys
from pathlib import Path
from typing import Optional, Sequence

from mmpoly.engine.saving import atomic_write
from mmpoly.zoo import paper_rows
from mmpoly.zoo.fashion_mnist import RESULTS_FILE, load_results
from mmpoly.zoo.metafile import dump_yaml, metafile
from mmpoly.zoo.report import measure_rows

REPO = Path(__file__).resolve().parents[2]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default=str(REPO / 'configs' / 'metafile.yml'))
    parser.add_argument('--check', action='store_true', help='compare instead of writing')
    parser.add_argument('--results',
                        help=f'the Fashion-MNIST zoo results file (default: {RESULTS_FILE}, '
                        'where absent means no results yet; a file given here must exist)')
    args = parser.parse_args(argv)
    if args.results is not None and not Path(args.results).is_file():
        # a mistyped path would drop every Fashion-MNIST result (and Weights) from the metafile
        parser.error(f'--results {args.results!r} is not a file; give the results file that '
                     f'tools/model_zoo/zoo_results.py --write-results wrote (default '
                     f'{RESULTS_FILE})')
    try:
        results = load_results(args.results or RESULTS_FILE)
    except ValueError as error:
        parser.error(f'--results: {error}')
    text = dump_yaml(metafile(measure_rows(paper_rows(), with_flops=True), zoo_results=results))
    out = Path(args.out)
    if args.check:
        current = out.read_text() if out.is_file() else ''
        if current != text:
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(True), text.splitlines(True), str(out), 'generated'))
            print(f'{out} is out of date: run {Path(__file__).name} without --check')
            return 1
        print(f'{out} is up to date')
        return 0
    atomic_write(text, out)
    print(f'wrote {out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
