"""Compare every config of mmpoly's model zoo with the paper's parameter counts and FLOPs.

    python tools/analysis_tools/paper_table.py                      # all rows, text report
    python tools/analysis_tools/paper_table.py --table T-C100 --no-flops
    python tools/analysis_tools/paper_table.py --format markdown
    python tools/analysis_tools/paper_table.py --update-readme README.md
    python tools/analysis_tools/paper_table.py --no-flops --check-readme README.md

The rows come from :func:`mmpoly.zoo.paper_rows`; the logic is in :mod:`mmpoly.zoo.report`.
A row matches when the measured count, in M (FLOPs: in G, mmengine's multiply-accumulate count
at the row's input size), rounded to the decimals the paper prints, equals the paper's figure.

Exit status: 0 if every row claimed to match does (known misfits are reported, not failed) and
the README table (with --check-readme) is up to date; 1 otherwise; 2 for usage errors (unknown
table, missing README markers).
"""
import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

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
    parser.add_argument('--update-readme', metavar='README',
                        help='rewrite the model table between the model-table markers')
    parser.add_argument('--check-readme', metavar='README',
                        help='exit 1 with a diff if the model table is out of date')
    parser.add_argument('--configs-root', default=str(report.CONFIGS_ROOT),
                        help='directory the rows\' config paths are relative to')
    return parser.parse_args(argv)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding='utf-8')
    except OSError as exc:
        raise SystemExit(f'error: cannot read {path}: {exc}')


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    readme_mode = args.update_readme or args.check_readme
    if readme_mode and args.table:
        print('error: --update-readme / --check-readme cover the whole table; drop --table',
              file=sys.stderr)
        return 2
    if args.update_readme and args.no_flops:
        print('error: the README table includes the FLOPs; drop --no-flops to update it',
              file=sys.stderr)
        return 2
    readme_text = {path: _read(path) for path in (args.update_readme, args.check_readme) if path}
    for path, text in readme_text.items():  # missing markers: fail before measuring anything
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
    if args.update_readme:
        try:
            new_text = report.update_readme(readme_text[args.update_readme], results,
                                            args.update_readme)
        except ValueError as exc:
            print(f'error: {exc}', file=sys.stderr)
            return 1
        if new_text != readme_text[args.update_readme]:
            Path(args.update_readme).write_text(new_text, encoding='utf-8')
            print(f'{args.update_readme}: model table updated')
        else:
            print(f'{args.update_readme}: model table already up to date')
    if args.check_readme:
        ok, diff = report.check_readme(readme_text[args.check_readme], results,
                                       args.check_readme)
        if ok:
            print(f'{args.check_readme}: model table up to date')
        else:
            print(f'{args.check_readme}: model table out of date; run '
                  f'`python tools/analysis_tools/paper_table.py --update-readme '
                  f'{args.check_readme}`:\n{diff}')
            status = 1
    return status


if __name__ == '__main__':
    sys.exit(main())
