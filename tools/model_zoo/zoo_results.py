"""The Fashion-MNIST model zoo's results, from the suite's run folders (work_dirs/zoo).

    python tools/model_zoo/zoo_results.py                          # table + claims (markdown)
    python tools/model_zoo/zoo_results.py --json zoo.json --plot zoo.png
    python tools/model_zoo/zoo_results.py --publish --write-results --update-metafile
    python tools/docs/gen_tables.py     # the results blocks of the docs and configs/README.md

One row per config: parameters and FLOPs (mmengine's multiply-accumulates at 1×28×28,
:mod:`mmpoly.utils.complexity`), top-1 mean ± sample std over the seeds that finished, the number
of such seeds, the seeds that diverged (training stopped at a NaN/Inf: they count, and are never
dropped silently), and the mean training time. Then one line per claim of arXiv:2104.07916: agree,
disagree or inconclusive, computed by the fixed rule printed next to it (:data:`CLAIMS`,
:func:`verdict`; the rules were fixed before any result existed).

``--publish`` publishes the checkpoint of seed :data:`PUBLISHED_SEED` of every config
(tools/model_zoo/publish_model.py) into ``checkpoints/fashion-mnist/`` (``--checkpoints``);
``--write-results`` writes ``configs/zoo_results.json``, from which
tools/model_zoo/generate_metafile.py fills the Fashion-MNIST entries' ``Results`` and ``Weights``
(``--update-metafile`` runs it). Runs shortened or changed for a test (``--max-iters``,
``--test-images`` or ``--cfg-options`` of run_suite.py), and ``--publish-test-images``, are
refused by ``--publish`` and ``--write-results`` unless ``--allow-smoke`` is given, before
anything is written. An earlier publication of a config (``<config>-<sha256[:8]>.pth`` in
``--checkpoints``) is removed only once everything else has been written, and only if neither
results file (``configs/zoo_results.json``, ``--write-results``) nor ``configs/metafile.yml``
names it still; a kept one is listed. ``--configs`` names that are no config of ``configs/`` are
refused, as by run_suite.py; configs without finished runs are listed and left out.
"""
import argparse
import json
import math
import re
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from mmengine.config import Config

from mmpoly.engine.saving import atomic_write
from mmpoly.fileio import atomic_savefig
from mmpoly.utils.startup import out_file_problem
from mmpoly.zoo.fashion_mnist import (CHECKPOINTS_DIR, COMPLETE, DIVERGED, PUBLISHED_SEED, REPO,
                                      RESULTS_FILE, SUITE, WORK_ROOT, collect_records,
                                      config_path, zoo_config)
from mmpoly.zoo.report import block_markers, replace_between_markers

BLOCK = 'zoo-results'
#: The metafile generated from the results file (tools/model_zoo/generate_metafile.py).
METAFILE = REPO / 'configs' / 'metafile.yml'
START_MARKER, END_MARKER = block_markers(BLOCK)
#: Config cell of the results table, by where the table lives (``{config}``: the config name).
CONFIG_LINKS = {'docs': '`{config}`', 'configs': '[{config}]({config}.py)'}
#: Display names of the configs' model fields, and of their training data.
MODEL_NAMES = {
    'resnet8': 'ResNet', 'se': 'SE', 'pinet': 'Π-net', 'pinet3': 'Π-net^[3]', 'pdc': 'PDC',
    'pdc3': 'PDC^[3]', 'pdc-comp': 'PDC-comp', 'nl': 'NL', 'pdc-nl3': 'PDC-NL[3]',
    'pdc-nl4': 'PDC-NL[4]', 'noact': 'ResNet, no act.', 'pinet-noact': 'Π-net, no act.',
    'pdc-noact': 'PDC, no act.'
}
DATA_NAMES = {
    'fashion-mnist': 'full', 'fashion-mnist-50perclass': '50 per class',
    'fashion-mnist-lt-if100': 'LT, IF 100'
}
#: The accuracy a diverged seed counts with in the claims: chance on 10 balanced classes.
CHANCE_TOP1 = 10.0
#: A claim needs this many seeds (finished or diverged) on each side, else it is inconclusive.
MIN_SEEDS = 2
#: Width of the band around a difference, in standard errors of that difference.
BAND = 2.0
#: "Not worse" tolerates a deficit up to this many points.
MARGIN = 0.5


@dataclass
class Row:
    """One config's results over its seeds."""
    config: str
    model: str
    data: str
    params: int
    flops: int
    seeds: List[int]
    top1: List[float]
    diverged_seeds: List[int]
    train_minutes: Optional[float]
    mean: Optional[float] = None
    std: Optional[float] = None
    smoke: bool = False
    weights: Optional[str] = None
    weights_top1: Optional[float] = None
    weights_dtype: Optional[str] = None

    @property
    def n(self) -> int:
        return len(self.top1)

    def effective_top1(self) -> List[float]:
        """The finished seeds' top-1, and :data:`CHANCE_TOP1` for each diverged seed."""
        return list(self.top1) + [CHANCE_TOP1] * len(self.diverged_seeds)


def mean_std(values: Sequence[float]) -> tuple:
    """(mean, sample standard deviation); std is None for one value, both None for none."""
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _names(config: str) -> tuple:
    """(model, data) display names of a config name."""
    model_field, data = config.split('_')[0], config.rsplit('_', 1)[-1]
    return MODEL_NAMES.get(model_field, model_field), DATA_NAMES.get(data, data)


def summarise(work_root: Path, configs: Sequence[str] = SUITE) -> List[Row]:
    """A row per config with at least one finished run."""
    from mmpoly.utils import register_all_modules
    from mmpoly.utils.complexity import measure

    register_all_modules(init_default_scope=False)
    rows = []
    for config, records in collect_records(work_root, configs).items():
        hashes = {r['config_hash'] for r in records}
        if len(hashes) > 1:
            raise ValueError(f'{work_root}/{config}: its seeds were run with {len(hashes)} '
                             'different configs (config_hash); rerun them with one')
        complete = [r for r in records if r['status'] == COMPLETE]
        cost = measure(Config.fromfile(str(config_path(config))))
        minutes = [r['train_seconds'] / 60 for r in complete if r.get('train_seconds')]
        model, data = _names(config)
        row = Row(config=config, model=model, data=data, params=cost.params, flops=cost.flops,
                  seeds=[r['seed'] for r in complete], top1=[r['top1'] for r in complete],
                  diverged_seeds=[r['seed'] for r in records if r['status'] == DIVERGED],
                  train_minutes=statistics.fmean(minutes) if minutes else None,
                  smoke=any(r.get(k) for r in records
                            for k in ('max_iters', 'test_images', 'cfg_options')))
        row.mean, row.std = mean_std(row.top1)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class Claim:
    """A claim of arXiv:2104.07916 as a comparison of two configs of the suite.

    ``kind`` 'better': a's accuracy above b's; 'not_worse': a's at most :data:`MARGIN` points
    below b's. ``max_param_ratio``: a premise, params(a) < ratio · params(b).
    """
    text: str
    source: str
    kind: str
    a: str
    b: str
    max_param_ratio: Optional[float] = None


def _claim(text: str, source: str, kind: str, a: str, b: str, regime: Optional[str] = None,
           **kwargs) -> Claim:
    """A claim comparing models ``a`` and ``b`` (config names up to the batch field)."""
    return Claim(text, source, kind, zoo_config(a, regime), zoo_config(b, regime), **kwargs)


#: The claims, fixed before any result of the suite existed (tables of arXiv:2104.07916).
CLAIMS = (
    # Table 3 (CIFAR-10): PDC 0.946, ResNet18 0.945, SE 0.946, Π-net 0.945
    _claim('PDC is more accurate than ResNet', 'T-C10, Table 3', 'better', 'pdc_resnet8',
           'resnet8'),
    *(_claim(f'PDC is not worse than {name}', 'T-C10, Table 3 (equal accuracy)', 'not_worse',
             'pdc_resnet8', baseline) for baseline, name in (('se_resnet8', 'SE'),
                                                             ('pinet_resnet8', 'Π-net'))),
    _claim('a compressed PDC with under half of ResNet\'s parameters is not worse than ResNet',
           'T-C10, Table 3 (PDC-comp)', 'not_worse', 'pdc-comp_resnet8', 'resnet8',
           max_param_ratio=0.5),
    # Table 2: PDC^[3] 0.766 vs PDC 0.765; Table 11 (no activations): PDC^[3] 0.918 vs 0.909,
    # while Π-net^[3] 0.891 is below Π-net 0.907 ("this does not happen to Π-net")
    _claim('higher degree helps PDC: PDC^[3] is more accurate than PDC',
           'T-C100, Table 2; T-NA10, Table 11', 'better', 'pdc3_resnet8', 'pdc_resnet8'),
    _claim('higher degree does not help Π-net: Π-net is not worse than Π-net^[3]',
           'T-NA10, Table 11 (there without activations)', 'not_worse', 'pinet_resnet8',
           'pinet3_resnet8'),
    *(_claim(f'PDC-NL[{degree}] is more accurate than NL', 'T-NLC, Table 5', 'better',
             f'pdc-nl{degree}_resnet8', 'nl_resnet8') for degree in (3, 4)),
    *(_claim(f'without activations, {name} keeps accuracy where ResNet collapses',
             'T-NA10, Table 11', 'better', f'{field}-noact_resnet8', 'noact_resnet8')
      for field, name in (('pdc', 'PDC'), ('pinet', 'Π-net'))),
    _claim('with 50 images per class, PDC is more accurate than ResNet',
           'limited data, Figure 4 (PDC-comp > Π-net > ResNet18)', 'better', 'pdc_resnet8',
           'resnet8', '50perclass'),
    _claim('on long-tailed data (IF 100), PDC is more accurate than ResNet',
           'T-LT, Table 8 (PDC-comp 0.727, ResNet18 0.696)', 'better', 'pdc_resnet8',
           'resnet8', 'lt-if100'),
)


def rule_text(claim: Claim) -> str:
    """The rule that decides the claim, in words."""
    base = (f'd = mean(a) − mean(b), se = √(s_a²/n_a + s_b²/n_b) over ≥ {MIN_SEEDS} seeds '
            f'each (a diverged seed counts as {CHANCE_TOP1:g}%)')
    if claim.kind == 'better':
        rule = f'agree if d − {BAND:g}·se > 0, disagree if d + {BAND:g}·se < 0'
    else:
        rule = (f'agree if d − {BAND:g}·se > −{MARGIN:g}, disagree if d + {BAND:g}·se < '
                f'−{MARGIN:g}')
    premise = f'; needs params(a) < {claim.max_param_ratio:g}·params(b)' \
        if claim.max_param_ratio is not None else ''
    return f'{base}; {rule}; else inconclusive{premise}'


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    reason: str
    d: Optional[float] = None
    se: Optional[float] = None
    rule: str = field(default='')


def verdict(claim: Claim, rows: Dict[str, Row]) -> Verdict:
    """Decide ``claim`` from the rows (by config) with :func:`rule_text`'s rule."""
    rule = rule_text(claim)
    a, b = rows.get(claim.a), rows.get(claim.b)
    if a is None or b is None:
        missing = [c for c, r in ((claim.a, a), (claim.b, b)) if r is None]
        return Verdict(claim, 'inconclusive', f'no runs of {", ".join(missing)}', rule=rule)
    if claim.max_param_ratio is not None and a.params >= claim.max_param_ratio * b.params:
        return Verdict(claim, 'inconclusive', f'premise fails: {a.params:,} parameters is not '
                       f'under {claim.max_param_ratio:g} × {b.params:,}', rule=rule)
    va, vb = a.effective_top1(), b.effective_top1()
    if min(len(va), len(vb)) < MIN_SEEDS:
        return Verdict(claim, 'inconclusive', f'{len(va)} and {len(vb)} seeds (fewer than '
                       f'{MIN_SEEDS})', rule=rule)
    d = statistics.fmean(va) - statistics.fmean(vb)
    se = math.sqrt(statistics.variance(va) / len(va) + statistics.variance(vb) / len(vb))
    low, high = d - BAND * se, d + BAND * se
    threshold = 0.0 if claim.kind == 'better' else -MARGIN
    result = 'agree' if low > threshold else 'disagree' if high < threshold else 'inconclusive'
    return Verdict(claim, result, f'd = {d:+.2f}, se = {se:.2f}', d, se, rule)


def verdicts(rows: Sequence[Row]) -> List[Verdict]:
    by_config = {row.config: row for row in rows}
    return [verdict(claim, by_config) for claim in CLAIMS]


# --------------------------------------------------------------------------- output


def _fmt_top1(row: Row) -> str:
    if row.mean is None:
        return '—'
    return f'{row.mean:.2f} ± {row.std:.2f}' if row.std is not None else f'{row.mean:.2f}'


def markdown(rows: Sequence[Row], found: Sequence[Verdict],
             config_link: str = CONFIG_LINKS['docs']) -> str:
    """The results table and the claims, as markdown (``config_link`` formats the config
    cell, see :data:`CONFIG_LINKS`)."""
    lines = ['| Model | Data | Config | Params | FLOPs (M) | Top-1 (%) | Seeds | Diverged | '
             'Training (min) |', '| --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for row in rows:
        minutes = f'{row.train_minutes:.1f}' if row.train_minutes is not None else '—'
        diverged = ', '.join(str(s) for s in row.diverged_seeds) or '—'
        smoke = ' (smoke run)' if row.smoke else ''
        lines.append(f'| {row.model} | {row.data} | {config_link.format(config=row.config)} | '
                     f'{row.params:,} | {row.flops / 1e6:.1f} | {_fmt_top1(row)}{smoke} | '
                     f'{row.n} | {diverged} | {minutes} |')
    lines += ['', 'Top-1: mean ± sample standard deviation over the seeds that finished, on the '
              '10,000 test images; Diverged: seeds whose training stopped at a non-finite loss '
              'or gradient; FLOPs: multiply-accumulates of one 28×28 image.', '',
              'Claims of arXiv:2104.07916 at this small scale (a: the first model, b: the '
              'second):', '']
    for v in found:
        lines.append(f'- **{v.verdict}**: {v.claim.text} ({v.claim.source}); {v.reason}. '
                     f'Rule: {v.rule}.')
    return '\n'.join(lines) + '\n'


def replace_between(text: str, body: str, source: str) -> str:
    """``text`` with the part between the zoo-results marker lines replaced by ``body``."""
    return replace_between_markers(text, body, source, BLOCK)


def rows_from_results(data: Dict) -> List[Row]:
    """The rows of a results file (:func:`results_json`), mean and std recomputed from the
    seeds' top-1."""
    fields = {f for f in Row.__dataclass_fields__ if f != 'config'}
    rows = []
    for config, entry in data['models'].items():
        row = Row(config=config, **{k: v for k, v in entry.items() if k in fields})
        row.mean, row.std = mean_std(row.top1)
        rows.append(row)
    return rows


def plot(rows: Sequence[Row], out: Path) -> None:
    """Top-1 against parameters, one marker per model (full data; other data regimes hollow),
    error bars of one sample standard deviation; written atomically."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    markers = 'osD^v<>phH*Xd8P'
    for i, row in enumerate(r for r in rows if r.mean is not None):
        full = row.data == DATA_NAMES['fashion-mnist']
        ax.errorbar(row.params, row.mean, yerr=row.std or 0.0, fmt=markers[i % len(markers)],
                    capsize=3, markersize=7, mfc=None if full else 'none',
                    label=row.model + ('' if full else f' ({row.data})'))
    ax.set_xscale('log')
    ax.set_xlabel('parameters')
    ax.set_ylabel('top-1 accuracy (%), Fashion-MNIST test set')
    ax.set_title('Fashion-MNIST model zoo: mean ± std over seeds')
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    try:
        atomic_savefig(fig, out, dpi=120)
    finally:
        plt.close(fig)


def publish_all(rows: Sequence[Row], work_root: Path, out_dir: Path,
                test_images: Optional[int] = None) -> List[Path]:
    """Publish seed :data:`PUBLISHED_SEED` of every row (if that seed finished) into
    ``out_dir``, setting the rows' weights fields; returns the earlier publications of the
    published configs, which this leaves in place (:func:`remove_superseded` removes them once
    nothing names them)."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from publish_model import publish
    finally:
        sys.path.pop(0)
    from mmpoly.zoo.fashion_mnist import read_record, run_dir

    superseded: List[Path] = []
    for row in rows:
        folder = run_dir(work_root, row.config, PUBLISHED_SEED)
        record = read_record(folder)
        if PUBLISHED_SEED not in row.seeds or record is None:
            print(f'{row.config}: seed {PUBLISHED_SEED} did not finish; nothing published')
            continue
        info = publish(str(folder / record['checkpoint']), str(out_dir / row.config),
                       str(config_path(row.config)), num_images=test_images)
        for old in sorted(out_dir.glob(f'{row.config}-*.pth')):  # earlier publications
            if re.fullmatch(re.escape(row.config) + r'-[0-9a-f]{8}\.pth', old.name) and \
                    old.resolve() != Path(info['path']).resolve():
                superseded.append(old)
        row.weights = str(Path(info['path']).resolve().relative_to(REPO)) \
            if Path(info['path']).resolve().is_relative_to(REPO) else info['path']
        row.weights_top1, row.weights_dtype = info['top1'], info['dtype']
        print(f'published {row.weights} ({info["dtype"]}): top-1 {info["top1"]:.2f}')
    return superseded


def _weights_path(name: str) -> Path:
    """A ``weights`` / ``Weights`` entry as a path (relative ones: to the repository)."""
    path = Path(name)
    return (path if path.is_absolute() else REPO / path).resolve()


def named_weights(results_files: Sequence[Path], metafile: Path = METAFILE) -> Dict[Path, str]:
    """The weights files named by the results files and the metafile: path -> the file
    naming it."""
    import yaml

    from mmpoly.zoo.fashion_mnist import load_results

    named: Dict[Path, str] = {}
    for results_file in results_files:
        for entry in load_results(results_file).values():
            if isinstance(entry, dict) and entry.get('weights'):
                named.setdefault(_weights_path(entry['weights']), str(results_file))
    if metafile.is_file():
        data = yaml.safe_load(metafile.read_text(encoding='utf-8')) or {}
        for model in data.get('Models') or []:
            if isinstance(model, dict) and model.get('Weights'):
                named.setdefault(_weights_path(model['Weights']), str(metafile))
    return named


def remove_superseded(superseded: Sequence[Path], results_files: Sequence[Path],
                      metafile: Path = METAFILE) -> List[Path]:
    """Remove the earlier publications that neither ``results_files`` nor ``metafile`` name
    (run last, after they have been rewritten); a named one is kept and listed. Returns the
    files kept."""
    named = named_weights(results_files, metafile)
    kept = []
    for old in superseded:
        source = named.get(old.resolve())
        if source is None:
            old.unlink(missing_ok=True)
            print(f'removed the earlier publication {old}')
        else:
            kept.append(old)
            print(f'kept the earlier publication {old}: {source} still names it (publish '
                  'with --write-results --update-metafile to rewrite both and remove it)')
    return kept


def smoke_reasons(rows: Sequence[Row], publish_test_images: Optional[int]) -> List[str]:
    """Why the results would not be the suite's real ones: the configs with shortened or
    changed runs, and ``--publish-test-images`` (a published top-1 on part of the test set)."""
    reasons = []
    smoke = [r.config for r in rows if r.smoke]
    if smoke:
        reasons.append(f'shortened or changed (smoke) runs of {", ".join(smoke)} '
                       '(run_suite.py --max-iters / --test-images / --cfg-options)')
    if publish_test_images is not None:
        reasons.append(f'--publish-test-images {publish_test_images} evaluates the published '
                       'weights on part of the test set only')
    return reasons


def keep_published(rows: Sequence[Row], results_file: Path) -> None:
    """Carry the weights of an earlier results file over to rows not published now (same runs,
    same top-1s, and the published file still there)."""
    from mmpoly.zoo.fashion_mnist import load_results

    earlier = load_results(results_file)
    for row in rows:
        entry = earlier.get(row.config, {})
        if row.weights is None and entry.get('weights') and entry.get('top1') == row.top1 \
                and (REPO / entry['weights']).is_file():
            row.weights, row.weights_top1, row.weights_dtype = \
                entry['weights'], entry['weights_top1'], entry['weights_dtype']


def results_json(rows: Sequence[Row], found: Sequence[Verdict]) -> Dict:
    """The results file's content (``configs/zoo_results.json``)."""
    models = {}
    for row in rows:
        entry = asdict(row)
        entry.pop('config')
        entry['n'] = row.n
        models[row.config] = entry
    return dict(note='generated by tools/model_zoo/zoo_results.py from the suite\'s run '
                'folders; do not edit by hand', published_seed=PUBLISHED_SEED, models=models,
                claims=[dict(claim=v.claim.text, source=v.claim.source, a=v.claim.a,
                             b=v.claim.b, verdict=v.verdict, reason=v.reason, rule=v.rule)
                        for v in found])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--work-root', default=str(WORK_ROOT))
    parser.add_argument('--configs', nargs='+', default=list(SUITE),
                        help='config names (configs/<name>.py; default: the whole suite)')
    parser.add_argument('--json', help='write the table and claims as JSON here')
    parser.add_argument('--plot', help='write the accuracy-vs-parameters plot here (.png/.svg)')
    parser.add_argument('--update-readme', metavar='PAGE',
                        help=f'replace the text between {START_MARKER} and {END_MARKER} of '
                        'this markdown page')
    parser.add_argument('--publish', action='store_true',
                        help=f'publish seed {PUBLISHED_SEED} of every config to --checkpoints')
    parser.add_argument('--checkpoints', default=str(REPO / CHECKPOINTS_DIR))
    parser.add_argument('--publish-test-images', type=int, default=None,
                        help='evaluate published weights on the first N test images (smoke)')
    parser.add_argument('--write-results', nargs='?', const=str(RESULTS_FILE), default=None,
                        metavar='PATH', help=f'write the results file (default: {RESULTS_FILE})')
    parser.add_argument('--allow-smoke', action='store_true',
                        help='let shortened (smoke) runs, and --publish-test-images, into '
                        '--publish and --write-results')
    parser.add_argument('--update-metafile', action='store_true',
                        help='regenerate configs/metafile.yml from the results file')
    args = parser.parse_args(argv)
    args.configs = [Path(name).stem for name in args.configs]  # 'x' and 'x.py' are one config
    for name in args.configs:
        if not config_path(name).is_file():
            parser.error(f'--configs: {config_path(name)} does not exist (the suite: '
                         f'{", ".join(SUITE)})')
    if args.publish_test_images is not None and args.publish_test_images < 1:
        parser.error(f'--publish-test-images must be >= 1, got {args.publish_test_images}')
    if args.publish_test_images is not None and not args.publish:
        parser.error('--publish-test-images applies to --publish only; add --publish or drop it')
    # the files written after the work (and after --publish has written checkpoints): checked
    # before any of it
    for option, path in (('--json', args.json), ('--write-results', args.write_results),
                         ('--plot', args.plot)):
        problem = path and out_file_problem(path, option)
        if problem:
            parser.error(f'{problem}; give a file in a writable folder')
    if args.plot and Path(args.plot).suffix.lower() not in ('.png', '.svg'):
        parser.error(f'--plot {args.plot!r}: must end in .png or .svg (the image format)')
    if args.update_readme:
        try:
            replace_between(Path(args.update_readme).read_text(), '', args.update_readme)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            parser.error(f'--update-readme {args.update_readme!r}: {error}')
    work_root = Path(args.work_root)
    rows = summarise(work_root, args.configs)
    if not rows:
        print(f'no finished runs under {work_root}', file=sys.stderr)
        return 1
    without = [name for name in args.configs if name not in {row.config for row in rows}]
    if without:
        print(f'note: no finished runs of {", ".join(without)} under {work_root}: left out of '
              'the table', file=sys.stderr)
    reasons = smoke_reasons(rows, args.publish_test_images if args.publish else None)
    writes = [option for option, given in (('--publish', args.publish),
                                           ('--write-results', args.write_results)) if given]
    if writes and reasons and not args.allow_smoke:
        print(f'error: {" / ".join(writes)}: {"; ".join(reasons)}; nothing was written. Pass '
              '--allow-smoke to write them anyway (then with --checkpoints and --write-results '
              'outside the repository, so that no published result is replaced)',
              file=sys.stderr)
        return 2
    superseded: List[Path] = []
    if args.publish:
        superseded = publish_all(rows, work_root, Path(args.checkpoints),
                                 args.publish_test_images)
    elif args.write_results:
        keep_published(rows, Path(args.write_results))
    found = verdicts(rows)
    text = markdown(rows, found)
    print(text)
    data = results_json(rows, found)
    if args.json:
        atomic_write(json.dumps(data, indent=2, ensure_ascii=False) + '\n', args.json)
    if args.write_results:
        atomic_write(json.dumps(data, indent=2, ensure_ascii=False) + '\n', args.write_results)
        print(f'wrote {args.write_results}')
    if args.plot:
        plot(rows, Path(args.plot))
        print(f'wrote {args.plot}')
    if args.update_readme:
        readme = Path(args.update_readme)
        where = 'configs' if readme.resolve().parent == REPO / 'configs' else 'docs'
        body = markdown(rows, found, CONFIG_LINKS[where])
        atomic_write(replace_between(readme.read_text(), body, str(readme)), readme)
        print(f'updated {readme}')
    if args.update_metafile:
        sys.path.insert(0, str(Path(__file__).parent))
        try:
            from generate_metafile import main as generate
        finally:
            sys.path.pop(0)
        status = generate(['--results', args.write_results] if args.write_results else [])
        if status != 0:
            return status
    if superseded:
        results_files = [RESULTS_FILE] + ([Path(args.write_results)] if args.write_results
                                          else [])
        remove_superseded(superseded, results_files, METAFILE)
    return 0


if __name__ == '__main__':
    sys.exit(main())
