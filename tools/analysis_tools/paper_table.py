"""Compare every config of mmpoly's model zoo with the paper's parameter counts and FLOPs.

    python tools/analysis_tools/paper_table.py                      # all rows, text report
    python tools/analysis_tools/paper_table.py --table T-C100 --no-flops
    python tools/analysis_tools/paper_table.py --format markdown
    python tools/analysis_tools/paper_table.py --update docs/en/paper_table.md
    python tools/analysis_tools/paper_table.py --no-flops --check docs/en/paper_table.md

The rows come from :func:`mmpoly.zoo.paper_rows`; the logic is in :mod:`mmpoly.zoo.report`.
A row matches when the measured count, in M (FLOPs: in G, mmengine's multiply-accumulate count
at the row's input size), rounded to the decimals the paper prints, equals the paper's figure.
``--update`` / ``--check`` rewrite / compare the generated model table between the
``<!-- BEGIN paper-table -->`` and ``<!-- END paper-table -->`` lines of a markdown page
(``tools/docs/gen_tables.py`` does it for every generated table of the docs).

Exit status: 0 if every row claimed to match does (known misfits are reported, not failed) and
the pages' tables (with --check) are up to date; 1 otherwise; 2 for usage errors (unknown
table, missing markers).
"""
import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from mmpoly.fileio import atomic_write
from mmpoly.utils import register_all_modules
from mmpoly.zoo import paper_rows
from mmpoly.zoo import report


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Measure the zoo's configs against the paper's tables")
    parser.add_argument('--table', action='append', metavar='T',
                        help='only the rows of this paper table, e.g. T-C100 (repeatable)')
    parser.add_argument('--format', choices=['text', 'markdown'], default='text',
                        help='report format (default: text)')
    parser.add_argument('--no-flops', action='store_true',
                        help='count parameters only (fast); FLOPs are left unchecked')
    parser.add_argument('--update', '--update-readme', action='append', default=[],
                        metavar='PAGE', help='rewrite the model table between the paper-table '
                        'markers of this markdown page (repeatable)')
    parser.add_argument('--check', '--check-readme', action='append', default=[],
                        metavar='PAGE', help='exit 1 with a diff if the model table of this '
                        'page is out of date (repeatable)')
    parser.add_argument('--configs-root', default=str(report.CONFIGS_ROOT),
                        help='directory the rows\' config paths are relative to')
    args = parser.parse_args(argv)
    if not Path(args.configs_root).is_dir():
        parser.error(f'--configs-root {args.configs_root}: not a folder (the folder the rows\' '
                     f'config paths, e.g. {paper_rows()[0].config}, are relative to)')
    return args


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding='utf-8')
    except OSError as exc:
        raise SystemExit(f'error: cannot read {path}: {exc}')


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if (args.update or args.check) and args.table:
        print('error: --update / --check cover the whole table; drop --table', file=sys.stderr)
        return 2
    if args.update and args.no_flops:
        print('error: the model table includes the FLOPs; drop --no-flops to update it',
              file=sys.stderr)
        return 2
    page_text = {path: _read(path) for path in (*args.update, *args.check)}
    for path, text in page_text.items():  # missing markers: fail before measuring anything
        try:
            report.extract_between_markers(text, path)
        except ValueError as exc:
            print(f'error: {exc}', file=sys.stderr)
            return 2

    try:
        rows = report.filter_rows(paper_rows(), args.table)
    except ValueError as exc:
        print(f'error: {exc}', file=sys.stderr)
        return 2
    register_all_modules()
    results = report.measure_rows(rows, with_flops=not args.no_flops,
                                  configs_root=args.configs_root)
    if not results:
        print('no rows: mmpoly.zoo.paper_rows() is empty')
    elif args.format == 'markdown':
        print(report.format_markdown(results))
        print()
        print(report.summary(results))
    else:
        print(report.format_text(results))

    status = 1 if report.failures(results) else 0
    for path in args.update:
        try:
            new_text = report.update_readme(page_text[path], results, path)
        except ValueError as exc:
            print(f'error: {exc}', file=sys.stderr)
            return 1
        if new_text != page_text[path]:
            atomic_write(new_text, path)
            print(f'{path}: model table updated')
        else:
            print(f'{path}: model table already up to date')
    for path in args.check:
        ok, diff = report.check_readme(page_text[path], results, path)
        if ok:
            print(f'{path}: model table up to date')
        else:
            print(f'{path}: model table out of date; run `python '
                  f'tools/analysis_tools/paper_table.py --update {path}`:\n{diff}')
            status = 1
    return status


if __name__ == '__main__':
    sys.exit(main())
