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
(tools/model_zoo/publish_model.py) into ``checkpoints/fashion-mnist/``; ``--write-results``
writes ``configs/zoo_results.json``, from which tools/model_zoo/generate_metafile.py fills the
Fashion-MNIST entries' ``Results`` and ``Weights`` (``--update-metafile`` runs it). Runs shortened
or changed for a test (``--max-iters``, ``--test-images`` or ``--cfg-options`` of run_suite.py)
are refused there unless ``--allow-smoke`` is given.
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
from mmpoly.zoo.fashion_mnist import (CHECKPOINTS_DIR, COMPLETE, DIVERGED, PUBLISHED_SEED, REPO,
                                      RESULTS_FILE, SUITE, WORK_ROOT, collect_records,
                                      config_path, zoo_config)
from mmpoly.zoo.report import block_markers, replace_between_markers

BLOCK = 'zoo-results'
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
                test_images: Optional[int] = None) -> None:
    """Publish seed :data:`PUBLISHED_SEED` of every row (if that seed finished) into
    ``out_dir``, setting the rows' weights fields."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from publish_model import publish
    finally:
        sys.path.pop(0)
    from mmpoly.zoo.fashion_mnist import read_record, run_dir

    for row in rows:
        folder = run_dir(work_root, row.config, PUBLISHED_SEED)
        record = read_record(folder)
        if PUBLISHED_SEED not in row.seeds or record is None:
            print(f'{row.config}: seed {PUBLISHED_SEED} did not finish; nothing published')
            continue
        info = publish(str(folder / record['checkpoint']), str(out_dir / row.config),
                       str(config_path(row.config)), num_images=test_images)
        for old in out_dir.glob(f'{row.config}-*.pth'):  # earlier publications of this config
            if re.fullmatch(re.escape(row.config) + r'-[0-9a-f]{8}\.pth', old.name) and \
                    old.resolve() != Path(info['path']).resolve():
                old.unlink()
        row.weights = str(Path(info['path']).resolve().relative_to(REPO)) \
            if Path(info['path']).resolve().is_relative_to(REPO) else info['path']
        row.weights_top1, row.weights_dtype = info['top1'], info['dtype']
        print(f'published {row.weights} ({info["dtype"]}): top-1 {info["top1"]:.2f}')


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
    parser.add_argument('--configs', nargs='+', default=list(SUITE))
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
                        help='let shortened (smoke) runs into --write-results')
    parser.add_argument('--update-metafile', action='store_true',
                        help='regenerate configs/metafile.yml from the results file')
    args = parser.parse_args(argv)
    work_root = Path(args.work_root)
    rows = summarise(work_root, args.configs)
    if not rows:
        print(f'no finished runs under {work_root}', file=sys.stderr)
        return 1
    if args.write_results and not args.allow_smoke and any(r.smoke for r in rows):
        smoke = [r.config for r in rows if r.smoke]
        print(f'error: --write-results: {", ".join(smoke)} have shortened (smoke) runs '
              '(run_suite.py --max-iters / --test-images); pass --allow-smoke to write them',
              file=sys.stderr)
        return 2
    if args.publish:
        publish_all(rows, work_root, Path(args.checkpoints), args.publish_test_images)
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
        return generate(['--results', args.write_results or str(RESULTS_FILE)])
    return 0


if __name__ == '__main__':
    sys.exit(main())
