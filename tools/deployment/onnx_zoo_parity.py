"""The published Fashion-MNIST zoo checkpoints through onnxruntime: the metafile's top-1.

    python tools/deployment/onnx_zoo_parity.py                  # all, 10,000 test images
    python tools/deployment/onnx_zoo_parity.py --num-images 1000 --models NAME ...
    python tools/deployment/onnx_zoo_parity.py --update-docs    # also the table in
                                                                # docs/en/deployment.md

For every model of ``configs/metafile.yml`` with published ``Weights`` (the Fashion-MNIST zoo),
the checkpoint is loaded into its config's model, exported to ONNX with
:func:`mmpoly.deploy.export_onnx` (dynamic batch, opset ``--opset``) and run by onnxruntime on
the config's test images (the first ``--num-images`` of the 10,000), normalised by the config's
data preprocessor in PyTorch. PyTorch (the checkpoint's model, eval mode) runs on the same
batches. Recorded per model: the top-1 of both, the metafile's ``Top 1 Accuracy``, how many
predictions agree and the largest logit differences. A run of every model on all test images
that passes writes its results to :data:`RESULTS_FILE` (atomically; with ``--update-docs`` also
the docs table). The tool exits with status 1 if a top-1 differs from the metafile's or a
prediction from PyTorch's: such a run leaves the published results and the docs as they were
and writes its results to ``--failed-out`` (default :data:`FAILED_FILE`) instead.
"""
import argparse
import json
import os.path as osp
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
import yaml

from mmpoly.deploy import (DEFAULT_OPSET, MIN_OPSET, check_opset, compare_outputs, export_onnx,
                           input_shape_from_config, load_model, onnx_session, run_onnx)
from mmpoly.fileio import atomic_write
from mmpoly.utils.startup import out_file_problem

REPO = Path(__file__).resolve().parents[2]
METAFILE = REPO / 'configs' / 'metafile.yml'
RESULTS_FILE = REPO / 'checkpoints' / 'fashion-mnist' / 'onnx_parity.json'
#: Where a complete run that did not pass writes its results (``--failed-out``), relative to
#: the current folder: never over the published :data:`RESULTS_FILE`.
FAILED_FILE = osp.join('work_dirs', 'onnx_zoo_parity', 'failed_onnx_parity.json')
DOCS_PAGE = REPO / 'docs' / 'en' / 'deployment.md'
TABLE_START = '<!-- onnx-zoo-parity:start (tools/deployment/onnx_zoo_parity.py --update-docs) -->'
TABLE_END = '<!-- onnx-zoo-parity:end -->'
METRIC = 'Top 1 Accuracy'
BATCH = 500
#: The test images of Fashion-MNIST, the set of every published model.
TEST_IMAGES = 10000


def published_models(metafile: Path = METAFILE) -> List[Dict[str, Any]]:
    """Name, config, weights and top-1 of every metafile model with published ``Weights``."""
    data = yaml.safe_load(metafile.read_text(encoding='utf-8'))
    models = []
    for entry in data['Models']:
        if not entry.get('Weights'):
            continue
        metrics = entry['Results'][0]['Metrics']
        models.append(dict(name=entry['Name'], config=entry['Config'], weights=entry['Weights'],
                           metafile_top1=metrics[METRIC]))
    return models


@torch.no_grad()
def test_batches(cfg: Any, model: torch.nn.Module,
                 num_images: Optional[int]) -> List[Dict[str, torch.Tensor]]:
    """The first ``num_images`` (None: all) of the config's test set as normalised (inputs,
    labels) batches of :data:`BATCH`; a ValueError if the set has fewer."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import DATASETS

    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmpretrain')):
        dataset = DATASETS.build(cfg.test_dataloader.dataset.copy())
    if num_images is not None and num_images > len(dataset):
        raise ValueError(f'--num-images {num_images} exceeds the {len(dataset)} test images of '
                         f'the config; allowed: 1 to {len(dataset)} (or leave it out for all)')
    count = len(dataset) if num_images is None else num_images
    batches = []
    for start in range(0, count, BATCH):
        items = [dataset[i] for i in range(start, min(start + BATCH, count))]
        data = model.data_preprocessor(
            dict(inputs=[item['inputs'] for item in items],
                 data_samples=[item['data_samples'] for item in items]), False)
        labels = torch.tensor([int(s.gt_label.item()) for s in data['data_samples']])
        batches.append(dict(inputs=data['inputs'], labels=labels))
    return batches


class ModelLoadError(Exception):
    """A published model's config or checkpoint cannot be loaded: the run cannot check it."""


def evaluate(entry: Dict[str, Any], num_images: Optional[int], opset: int,
             work_dir: str) -> Dict[str, Any]:
    """Export one published model and compare onnxruntime with PyTorch and the metafile.

    Raises:
        ModelLoadError: its config or checkpoint could not be loaded (named, with why).
    """
    try:
        cfg, model = load_model(str(REPO / entry['config']), str(REPO / entry['weights']))
    except Exception as error:  # missing, corrupt, unsafe or mismatched; a broken config
        raise ModelLoadError(f"{entry['name']}: {error}") from error
    shape = input_shape_from_config(cfg)
    path = osp.join(work_dir, f"{entry['name']}.onnx")
    export_onnx(model, path, shape, batch_size=2, opset=opset, dynamic_batch=True)
    session = onnx_session(path)
    total = correct_onnx = correct_torch = agree = 0
    max_abs = max_rel = 0.0
    for batch in test_batches(cfg, model, num_images):
        with torch.no_grad():
            expected = model(batch['inputs'], mode='tensor')
        actual, = run_onnx(session, batch['inputs'])
        parity = compare_outputs([expected], [actual])
        max_abs, max_rel = max(max_abs, parity.max_abs), max(max_rel, parity.max_rel)
        pred_torch = expected.argmax(1).numpy()
        pred_onnx = np.asarray(actual).argmax(1)
        labels = batch['labels'].numpy()
        total += len(labels)
        correct_torch += int((pred_torch == labels).sum())
        correct_onnx += int((pred_onnx == labels).sum())
        agree += int((pred_torch == pred_onnx).sum())
    return dict(name=entry['name'], config=entry['config'], weights=entry['weights'],
                input_shape=list(shape), num_images=total,
                metafile_top1=entry['metafile_top1'],
                onnx_top1=round(100.0 * correct_onnx / total, 2),
                pytorch_top1=round(100.0 * correct_torch / total, 2),
                agreeing_predictions=agree, max_abs_logit_diff=max_abs,
                max_rel_logit_diff=max_rel)


def passed(result: Dict[str, Any]) -> bool:
    """onnxruntime agrees with PyTorch on every image, and (on the full test set) its top-1 is
    the metafile's."""
    full = result['num_images'] == TEST_IMAGES
    return result['agreeing_predictions'] == result['num_images'] and (
        not full or result['onnx_top1'] == result['metafile_top1'])


def markdown_table(results: Dict[str, Any]) -> str:
    """The docs table of a results file."""
    lines = ['| model | metafile top-1 | onnxruntime top-1 | PyTorch top-1 | predictions '
             'agreeing | max abs logit diff | max rel logit diff |',
             '|---|---:|---:|---:|---:|---:|---:|']
    for r in results['models']:
        lines.append(f"| {r['name']} | {r['metafile_top1']:.2f} | {r['onnx_top1']:.2f} | "
                     f"{r['pytorch_top1']:.2f} | {r['agreeing_predictions']:,} / "
                     f"{r['num_images']:,} | {r['max_abs_logit_diff']:.1e} | "
                     f"{r['max_rel_logit_diff']:.1e} |")
    return '\n'.join(lines)


def replace_table(text: str, table: str) -> str:
    """``text`` with the part between :data:`TABLE_START` and :data:`TABLE_END` replaced."""
    if text.count(TABLE_START) != 1 or text.count(TABLE_END) != 1:
        raise ValueError(f'{DOCS_PAGE} must hold the markers {TABLE_START!r} and {TABLE_END!r} '
                         'once each')
    head, rest = text.split(TABLE_START)
    _, tail = rest.split(TABLE_END)
    return f'{head}{TABLE_START}\n{table}\n{TABLE_END}{tail}'


def table_in_docs(text: str) -> str:
    """The table between the markers of the docs page."""
    return text.split(TABLE_START)[1].split(TABLE_END)[0].strip()


def check_options(num_images: Optional[int], opset: int) -> None:
    """``--num-images`` must be None or 1 to :data:`TEST_IMAGES` and ``--opset`` in
    :func:`mmpoly.deploy.opset_range`; a ValueError names the option, value and range."""
    allowed = f'allowed: 1 to {TEST_IMAGES} (or leave it out for all)'
    if num_images is not None and (isinstance(num_images, bool)
                                   or not isinstance(num_images, int) or num_images < 1):
        raise ValueError(f'--num-images must be a positive number of images, got '
                         f'{num_images!r}; {allowed}')
    if num_images is not None and num_images > TEST_IMAGES:
        raise ValueError(f'--num-images {num_images} exceeds the {TEST_IMAGES} test images of '
                         f'Fashion-MNIST; {allowed}')
    check_opset(opset, '--opset')


def select_models(names: Optional[Sequence[str]]) -> List[Dict[str, Any]]:
    """The published models named ``names`` (None: all); a ValueError names unknown ones."""
    models = published_models()
    if names:
        known = {m['name'] for m in models}
        unknown = sorted(set(names) - known)
        if unknown:
            raise ValueError(f'--models {unknown} are not published models; choose from '
                             f'{sorted(known)}')
        models = [m for m in models if m['name'] in names]
    return models


def run(names: Optional[Sequence[str]], num_images: Optional[int],
        opset: int) -> Dict[str, Any]:
    """Evaluate the published models ``names`` (None: all) on the first ``num_images`` test
    images (None: all); a ValueError for a bad option before anything is loaded."""
    import onnx
    import onnxruntime

    check_options(num_images, opset)
    models = select_models(names)
    with tempfile.TemporaryDirectory() as work_dir:
        results = [evaluate(m, num_images, opset, work_dir) for m in models]
    return dict(
        note='written by tools/deployment/onnx_zoo_parity.py; do not edit by hand',
        command='python tools/deployment/onnx_zoo_parity.py' +
        (f' --opset {opset}' if opset != DEFAULT_OPSET else ''),
        versions=dict(torch=torch.__version__, onnx=onnx.__version__,
                      onnxruntime=onnxruntime.__version__, python=platform.python_version()),
        opset=opset, models=results, passed=all(passed(r) for r in results))


def _shown(path: Any) -> str:
    """``path`` relative to the repository when it is inside it, else as it is."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', help='metafile names (default: all published)')
    parser.add_argument('--num-images', type=int, help='the first N test images (default all)')
    parser.add_argument('--opset', type=int, default=DEFAULT_OPSET,
                        help=f'ai.onnx opset (>= {MIN_OPSET}, up to the newest the installed '
                        f'onnx knows; default {DEFAULT_OPSET})')
    parser.add_argument('--update-docs', action='store_true',
                        help=f'write the table into {_shown(DOCS_PAGE)} (only '
                        'when the run passes)')
    parser.add_argument('--failed-out', metavar='FILE',
                        help=f'where a complete run that does not pass writes its results '
                        f'(default {FAILED_FILE}); {_shown(RESULTS_FILE)} and the docs are '
                        'written only by a run that passes')
    args = parser.parse_args(argv)
    try:
        check_options(args.num_images, args.opset)
        select_models(args.models)
    except ValueError as error:
        parser.error(str(error))
    complete = args.models is None and args.num_images is None
    if args.update_docs and not complete:
        parser.error('--update-docs needs the full run (no --models / --num-images)')
    if args.failed_out is not None and not complete:
        parser.error(f'--failed-out {args.failed_out!r} has no effect with --models or '
                     '--num-images: only the full run writes its results (a partial run prints '
                     'them); drop --failed-out, or run on every model and image')
    args.failed_out = args.failed_out or FAILED_FILE
    if complete:  # a failing run's results must have a place to go: checked before the run
        problem = out_file_problem(args.failed_out, '--failed-out')
        if problem:
            parser.error(f'{problem}; give the JSON file a failing run writes its results to')
    try:
        results = run(args.models, args.num_images, args.opset)
    except ModelLoadError as error:  # nothing is written: the run is not complete
        print(f'{parser.prog}: error: {error}', file=sys.stderr)
        return 2
    for r in results['models']:
        print(f"{'ok  ' if passed(r) else 'FAIL'} {r['name']}: top-1 onnxruntime "
              f"{r['onnx_top1']:.2f}, PyTorch {r['pytorch_top1']:.2f}, metafile "
              f"{r['metafile_top1']:.2f}; {r['agreeing_predictions']}/{r['num_images']} "
              f"predictions agree; max logit diff {r['max_abs_logit_diff']:.2e} "
              f"(relative {r['max_rel_logit_diff']:.2e})")
    if complete and results['passed']:
        atomic_write(json.dumps(results, indent=2) + '\n', RESULTS_FILE)
        print(f'wrote {_shown(RESULTS_FILE)}')
        if args.update_docs:
            atomic_write(replace_table(DOCS_PAGE.read_text(encoding='utf-8'),
                                       markdown_table(results)), DOCS_PAGE)
            print(f'updated {_shown(DOCS_PAGE)}')
    elif complete:  # the published results stay those of the last run that passed
        atomic_write(json.dumps(results, indent=2) + '\n', args.failed_out)
        failed = sorted(r['name'] for r in results['models'] if not passed(r))
        kept = _shown(RESULTS_FILE) + (f' and {_shown(DOCS_PAGE)}' if args.update_docs else '')
        print(f'FAIL: {len(failed)} of {len(results["models"])} models did not pass '
              f'({", ".join(failed)}); their results are in {args.failed_out}; {kept} '
              f'{"were" if args.update_docs else "was"} left as they were')
    return 0 if results['passed'] else 1


if __name__ == '__main__':
    sys.exit(main())
