"""Regenerate, or check, the generated tables of the docs (docs/en/*.md) and configs/README.md.

    python tools/docs/gen_tables.py                      # rewrite every generated block
    python tools/docs/gen_tables.py --check --no-flops   # exit 1 with a diff if one is stale
    python tools/docs/gen_tables.py --only speed zoo-results   # no measuring: the JSON blocks

A generated block is the text between a line ``<!-- BEGIN NAME -->`` and a line
``<!-- END NAME -->``. NAME is one of

* ``paper-table``: every config against the paper's parameter counts and FLOPs, measured from
  the rows of :mod:`mmpoly.zoo` (:func:`mmpoly.zoo.report.readme_table`);
* ``zoo-results``: the Fashion-MNIST zoo's results table and claims, from
  ``configs/zoo_results.json`` (``tools/model_zoo/zoo_results.py``; means, standard deviations
  and claim verdicts are recomputed from the seeds' top-1);
* ``speed PATTERN``: one table per JSON file matching ``benchmarks/PATTERN`` (e.g.
  ``speed cpu/2026-11-26_fp32.json`` or ``speed gpu/*.json``). A file is either a record of
  runs (``machine``, ``torch``, ``date``, ``runs``: each with its ``command``, ``baseline`` and
  ``models``) or the output of ``tools/analysis_tools/benchmark.py --json`` as it is;
* ``gpu-report PATH``: the tables of one GPU report, ``benchmarks/PATH`` (the ``report.json`` of
  ``tools/analysis_tools/gpu_report.sh``), as ``gpu_tables.py tables`` prints them.

Config cells are links in configs/README.md and code in the docs (the site links only to its own
pages). ``--no-flops`` skips measuring FLOPs: with ``--check`` the FLOPs cells are then not
compared; without it the paper table cannot be written.

Images that a page shows but another tool writes are copied with the block they belong to
(:data:`DOC_COPIES`): with the ``zoo-results`` block of docs/en/model_zoo.md, the zoo's
accuracy-against-parameters plot ``checkpoints/fashion-mnist/accuracy_vs_params.png``
(``zoo_results.py --plot``) goes to ``docs/en/img/zoo_accuracy_vs_params.png``, so that the
page shows the published plot; ``--check`` reports a copy that differs as stale.

Exit status: 0 if every block (and copy) is up to date (or was written), 1 if one is stale
(``--check``), a copy's source is missing, or the paper table does not match the rows claimed
to match, 2 for a page without blocks or an unknown block.
"""
import argparse
import difflib
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Optional, Sequence

from mmpoly.fileio import atomic_write
from mmpoly.zoo import paper_rows, report

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / 'benchmarks'
ZOO_RESULTS = REPO / 'configs' / 'zoo_results.json'
#: The pages whose blocks are generated, relative to the repository.
PAGES = ('docs/en/paper_table.md', 'docs/en/model_zoo.md', 'docs/en/speed.md',
         'configs/README.md')
_BEGIN = re.compile(r'^<!-- BEGIN (.+?) -->$')
#: Files a page shows that another tool writes: (page, block, source, copy), relative to the
#: repository. Processing ``block`` of ``page`` copies ``source`` over ``copy``.
DOC_COPIES = (('docs/en/model_zoo.md', 'zoo-results',
               'checkpoints/fashion-mnist/accuracy_vs_params.png',
               'docs/en/img/zoo_accuracy_vs_params.png'), )


def _load_tool(relative: str) -> ModuleType:
    path = REPO / 'tools' / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def block_names(text: str) -> List[str]:
    """The names of the generated blocks of a page, in order."""
    return [m.group(1) for line in text.splitlines() if (m := _BEGIN.match(line.strip()))]


def _where(page: Path) -> str:
    return 'configs' if page.resolve().parent == REPO / 'configs' else 'docs'


# ------------------------------------------------------------------------------ zoo results


def zoo_block(page: Path, results_file: Path = ZOO_RESULTS) -> str:
    """The zoo-results block: table and claims recomputed from the results file."""
    zoo_results = _load_tool('model_zoo/zoo_results.py')
    data = json.loads(results_file.read_text(encoding='utf-8'))
    rows = zoo_results.rows_from_results(data)
    return zoo_results.markdown(rows, zoo_results.verdicts(rows),
                                zoo_results.CONFIG_LINKS[_where(page)])


# ------------------------------------------------------------------------------ speed


def _ratio(value: Optional[float]) -> str:
    return '–' if value is None else f'{value:.2f}×'


def _command_of(settings: Dict[str, Any], configs: Sequence[str], baseline: str) -> str:
    """The benchmark.py command line that gives ``settings`` (a --json output's)."""
    args = [*configs, '--baseline', baseline, '--device', settings['device'],
            '--batch-size', str(settings['batch_size'])]
    if settings.get('input_size'):
        args += ['--input-size', *map(str, settings['input_size'])]
    if settings.get('amp'):
        args += ['--amp', '--amp-dtype', settings['amp']]
    args += [f'--{flag.replace("_", "-")}' for flag in ('channels_last', 'cudnn_benchmark',
                                                        'compile', 'fuse')
             if settings.get(flag)]
    if settings.get('compile') and settings.get('compile_mode') not in (None, 'default'):
        args += ['--compile-mode', settings['compile_mode']]
    args += ['--rounds', str(settings['rounds']), '--iters', str(settings['iters']),
             '--warmup', str(settings['warmup']), '--threads', str(settings['threads'])]
    return 'python tools/analysis_tools/benchmark.py ' + ' '.join(args)


def speed_record(path: Path) -> Dict[str, Any]:
    """A speed record: the file itself, or a record made from a benchmark.py --json output."""
    data = json.loads(path.read_text(encoding='utf-8'))
    if 'runs' in data:
        return data
    if 'settings' not in data or 'models' not in data:
        raise ValueError(f'{path}: neither a record of runs (a "runs" list) nor the output of '
                         'benchmark.py --json ("settings" and "models")')
    s = data['settings']
    base = Path(data['baseline']).name
    models = [dict(label=Path(m['config']).stem, config=Path(m['config']).name,
                   ratios=m['ratios']) for m in data['models'] if not m.get('baseline')]
    date = re.match(r'\d{4}-\d{2}-\d{2}', path.name)
    return dict(machine=f"{s['device']} ({s['device_name']}), {s['threads']} threads",
                torch=s['torch'], date=date.group(0) if date else None,
                precision=s['amp'] or 'float32',
                memory=('rise of torch.cuda.max_memory_allocated' if s['device'] == 'cuda' else
                        'RSS rise') + ' / saved activations, ratios',
                source='the `benchmark.py --json` output',
                runs=[dict(command=_command_of(s, [m['config'] for m in models], base),
                           baseline=base, models=models)])


def speed_table(path: Path) -> str:
    """One speed record as a caption, a table (one row per model of every run) and the list of
    its runs' commands (and notes)."""
    record = speed_record(path)
    caption = (f"**{record['machine']}**, torch {record['torch']}, {record['precision']}"
               f"{', ' + record['date'] if record.get('date') else ''}. Memory: "
               f"{record['memory']}. Source: {record['source']} "
               f"(`benchmarks/{path.relative_to(BENCHMARKS)}`).")
    lines = [caption, '',
             '| run | model | baseline | FLOP ideal | training | inference | memory |',
             '| --- | --- | --- | --- | --- | --- | --- |']
    runs = []
    for number, run in enumerate(record['runs'], 1):
        note = f" ({run['note']})" if run.get('note') else ''
        runs.append(f"{number}. `{run['command']}`{note}")
        for model in run['models']:
            r = model['ratios']
            memory = '–' if r.get('memory') is None and r.get('saved_activations') is None \
                else f"{_ratio(r.get('memory'))} / {_ratio(r.get('saved_activations'))}"
            lines.append(f"| {number} | {model['label']} | `{Path(run['baseline']).stem}` | "
                         f"{_ratio(r.get('flops'))} | {_ratio(r.get('train'))} | "
                         f"{_ratio(r.get('infer'))} | {memory} |")
    return '\n'.join(lines + ['', 'Runs:', ''] + runs)


def gpu_report_block(path: str) -> str:
    """The tables of the GPU report ``benchmarks/<path>`` (gpu_tables.py's ``tables``)."""
    report_file = BENCHMARKS / path
    if not report_file.is_file():
        raise ValueError(f'gpu-report {path}: no file benchmarks/{path}')
    gpu_tables = _load_tool('analysis_tools/gpu_tables.py')
    return gpu_tables.tables(json.loads(report_file.read_text(encoding='utf-8')))


def speed_block(pattern: str) -> str:
    files = sorted(BENCHMARKS.glob(pattern))
    if not files:
        raise ValueError(f'speed {pattern}: no file matches benchmarks/{pattern}')
    return '\n\n'.join(speed_table(path) for path in files)


# ------------------------------------------------------------------------------ copies


def sync_copies(pages: Sequence[Path], only: Optional[Sequence[str]], check: bool,
                repo: Path = REPO) -> int:
    """Copy (or, with ``check``, compare) the :data:`DOC_COPIES` of the blocks processed: those
    of ``pages`` selected by ``only``. Returns 0, or 1 if a copy is stale (``check``) or its
    source is missing."""
    processed = {page.resolve() for page in pages}
    status = 0
    for page, block, source, copy in DOC_COPIES:
        if (repo / page).resolve() not in processed or not _selected(block, only):
            continue
        src, dst = repo / source, repo / copy
        if not src.is_file():
            print(f'error: {source} does not exist, so {copy} (shown by {page}) cannot be '
                  f'copied from it; write it with `python tools/model_zoo/zoo_results.py '
                  f'--plot {source}`', file=sys.stderr)
            status = 1
            continue
        data = src.read_bytes()
        if dst.is_file() and dst.read_bytes() == data:
            continue
        if check:
            print(f'{copy} differs from {source} (shown by {page}); run '
                  '`python tools/docs/gen_tables.py` to copy it')
            status = 1
        else:
            atomic_write(data, dst)
            print(f'{copy}: copied from {source}')
    return status


# ------------------------------------------------------------------------------ pages


def render(name: str, page: Path, paper_results: Optional[list]) -> str:
    """The body of block ``name`` of ``page``."""
    if name == 'paper-table':
        assert paper_results is not None
        return report.readme_table(paper_results, report.CONFIG_LINKS[_where(page)])
    if name == 'zoo-results':
        return zoo_block(page)
    if name.startswith('speed '):
        return speed_block(name[len('speed '):])
    if name.startswith('gpu-report '):
        return gpu_report_block(name[len('gpu-report '):])
    raise ValueError(f'{page}: unknown generated block {name!r}; known: paper-table, '
                     'zoo-results, speed PATTERN, gpu-report PATH')


def _selected(name: str, only: Optional[Sequence[str]]) -> bool:
    return only is None or any(name.startswith(prefix) for prefix in only)


def process(page: Path, text: str, paper_results: Optional[list], check: bool,
            with_flops: bool, only: Optional[Sequence[str]] = None) -> tuple:
    """(new text, list of stale block names with their diffs) of one page; ``only``: the
    prefixes of the block names to generate (None: all)."""
    stale = []
    for name in block_names(text):
        if not _selected(name, only):
            continue
        if check and name == 'paper-table':
            ok, diff = report.check_readme(text, paper_results, str(page))
            if not ok:
                stale.append((name, diff))
            continue
        if name == 'paper-table' and not with_flops:
            raise ValueError('the paper table includes the FLOPs: drop --no-flops to write it')
        body = render(name, page, paper_results)
        current = report.extract_between_markers(text, str(page), name)
        if current.strip('\n') != body.strip('\n'):
            diff = '\n'.join(difflib.unified_diff(
                current.strip('\n').splitlines(), body.strip('\n').splitlines(),
                fromfile=f'{page} ({name})', tofile='generated', lineterm=''))
            stale.append((name, diff))
            text = report.replace_between_markers(text, body, str(page), name)
    return text, stale


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('pages', nargs='*', default=list(PAGES),
                        help='markdown pages (default: every page with generated blocks)')
    parser.add_argument('--check', action='store_true',
                        help='write nothing; exit 1 with a diff if a block is out of date')
    parser.add_argument('--no-flops', action='store_true',
                        help='count parameters only (with --check: FLOPs cells not compared)')
    parser.add_argument('--only', nargs='+', metavar='NAME', default=None,
                        help='only the blocks whose name starts with one of these (e.g. speed '
                        'zoo-results); the others are left as they are')
    args = parser.parse_args(argv)
    texts = {}
    for name in args.pages:
        page = Path(name) if Path(name).is_absolute() else REPO / name
        texts[page] = page.read_text(encoding='utf-8')
        if not block_names(texts[page]):
            print(f'error: {page} has no generated block (<!-- BEGIN NAME --> lines)',
                  file=sys.stderr)
            return 2
    paper_results = None
    if any(_selected('paper-table', args.only) and 'paper-table' in block_names(text)
           for text in texts.values()):
        from mmpoly.utils import register_all_modules
        register_all_modules()
        paper_results = report.measure_rows(paper_rows(), with_flops=not args.no_flops)
    status = 0
    for page, text in texts.items():
        try:
            new_text, stale = process(page, text, paper_results, args.check, not args.no_flops,
                                      args.only)
        except ValueError as exc:
            print(f'error: {exc}', file=sys.stderr)
            return 2
        for name, diff in stale:
            if args.check:
                print(f'{page}: block {name!r} is out of date; run '
                      f'`python tools/docs/gen_tables.py`:\n{diff}')
                status = 1
        if not args.check and new_text != text:
            atomic_write(new_text, page)
            print(f'{page}: {", ".join(name for name, _ in stale)} updated')
    status = max(status, sync_copies(list(texts), args.only, args.check))
    if paper_results is not None and report.failures(paper_results):
        print(report.summary(paper_results), file=sys.stderr)
        status = 1
    return status


if __name__ == '__main__':
    sys.exit(main())
