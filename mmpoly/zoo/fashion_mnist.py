"""The Fashion-MNIST model zoo: which configs and seeds the suite trains, where each run's files
are, and the results file (``configs/zoo_results.json``) from which the metafile's Fashion-MNIST
``Results`` and ``Weights`` are generated.

``tools/model_zoo/run_suite.py`` trains and tests every (config, seed) into
``work_dirs/zoo/<config>/seed<S>/`` and writes a run record there (:data:`RECORD_FILE`) last;
``tools/model_zoo/zoo_results.py`` reads the records back. One seed per model,
:data:`PUBLISHED_SEED`, fixed before any result existed, is the one whose checkpoint is published.
"""
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

REPO = Path(__file__).resolve().parents[2]
#: The batch and schedule field of the zoo's config names: ``<model>_<FIELD>_<data>``.
FIELD = '1xb128-1400i'
#: The models (config name up to the batch field): the taxonomy on one trunk (32-64-128).
MODELS: tuple = ('resnet8', 'se_resnet8', 'pinet_resnet8', 'pinet3_resnet8', 'pdc_resnet8',
                 'pdc3_resnet8', 'pdc-comp_resnet8', 'nl_resnet8', 'pdc-nl3_resnet8',
                 'pdc-nl4_resnet8', 'noact_resnet8', 'pinet-noact_resnet8', 'pdc-noact_resnet8')
#: The data regimes besides the full training set, and the models trained on them.
REGIMES: tuple = ('50perclass', 'lt-if100')
REGIME_MODELS: tuple = ('resnet8', 'pdc_resnet8')


def zoo_config(model: str, regime: Optional[str] = None) -> str:
    """The config name of ``model`` on the full data or on a data ``regime``."""
    return f'{model}_{FIELD}_fashion-mnist' + (f'-{regime}' if regime else '')


#: The suite: 13 models on the full training set, then ResNet / PDC on 50 images per class and
#: on the long-tailed set (imbalance factor 100); one schedule for all (see the configs).
SUITE: tuple = tuple(zoo_config(m) for m in MODELS) + tuple(
    zoo_config(m, r) for r in REGIMES for m in REGIME_MODELS)
SEEDS: tuple = (0, 1, 2)
#: The seed whose checkpoint is published for every model (fixed before any run: not the best).
PUBLISHED_SEED = 0
WORK_ROOT = Path('work_dirs') / 'zoo'
RECORD_FILE = 'suite_record.json'
METRICS_FILE = 'test_metrics.json'
TOP1 = 'accuracy/top1'
#: Status of a finished run: it trained and was tested, or training stopped on a NaN/Inf after
#: some updates; and of a run that did not finish (rerun by run_suite.py).
COMPLETE, DIVERGED, FAILED = 'complete', 'diverged', 'failed'
#: The results file the metafile is generated from (written by zoo_results.py --write-results).
RESULTS_FILE = REPO / 'configs' / 'zoo_results.json'
#: Published checkpoints, relative to the repository root (and to an installed ``.mim/``).
CHECKPOINTS_DIR = 'checkpoints/fashion-mnist'


def config_path(name: str, configs_root: Union[str, Path, None] = None) -> Path:
    """``configs/<name>.py`` of the checkout (or of ``configs_root``)."""
    return Path(configs_root or REPO / 'configs') / f'{Path(name).stem}.py'


def run_dir(work_root: Union[str, Path], config: str, seed: int) -> Path:
    """``<work_root>/<config>/seed<seed>``."""
    return Path(work_root) / Path(config).stem / f'seed{seed}'


def config_hash(cfg: Any) -> str:
    """sha256 of a loaded config's content (its ``_base_`` files resolved), so that a changed
    config or base is told apart from the one a recorded run used."""
    text = json.dumps(cfg.to_dict(), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def read_top1(metrics_file: Union[str, Path]) -> Optional[float]:
    """The finite top-1 accuracy of a ``tools/test.py --out-item metrics`` JSON, or None if the
    file is missing, unreadable or has no finite top-1."""
    try:
        value = json.loads(Path(metrics_file).read_text())[TOP1]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def read_record(folder: Union[str, Path]) -> Optional[Dict[str, Any]]:
    """The run record of a run folder, or None if there is none (or it is unreadable)."""
    try:
        record = json.loads((Path(folder) / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def non_finite_before_update(text: Optional[str]) -> bool:
    """Whether ``text`` (a run's log, or a record's ``error``) holds mmpoly's
    ``NonFiniteError`` of cause ``before_update``: the loss or a gradient was NaN/Inf before any
    update of the run, so no learning rate diverged: the config, the data or a loaded checkpoint
    is wrong (e.g. ``data_preprocessor.std=[0.0]``). Such a run failed; it did not diverge."""
    from mmpoly.engine.non_finite import NonFiniteError

    advice = NonFiniteError.ADVICE[NonFiniteError.BEFORE_UPDATE]
    return bool(text) and NonFiniteError.__name__ in text and advice in text


def finished_record(folder: Union[str, Path]) -> Optional[Dict[str, Any]]:
    """The record of a finished run: diverged, or complete with a valid test-metrics JSON whose
    top-1 equals the recorded one. None otherwise (not run, failed, or files damaged; a record
    that calls diverged a run stopped before any update, :func:`non_finite_before_update`, as
    earlier versions of run_suite.py wrote, is a failed run too)."""
    record = read_record(folder)
    if record is None:
        return None
    if record.get('status') == DIVERGED:
        return None if non_finite_before_update(record.get('error')) else record
    top1 = read_top1(Path(folder) / METRICS_FILE)
    if record.get('status') == COMPLETE and top1 is not None and top1 == record.get('top1'):
        return record
    return None


def collect_records(work_root: Union[str, Path],
                    configs: Sequence[str] = SUITE) -> Dict[str, List[Dict[str, Any]]]:
    """Finished records per config (``configs`` order), by seed; configs without any left out."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for config in configs:
        folder = Path(work_root) / Path(config).stem
        records = []
        for seed_dir in sorted(folder.glob('seed*')):
            record = finished_record(seed_dir)
            if record is not None:
                records.append(record)
        if records:
            out[Path(config).stem] = sorted(records, key=lambda r: r['seed'])
    return out


def load_results(path: Union[str, Path] = RESULTS_FILE) -> Dict[str, Dict[str, Any]]:
    """The results file's models (name -> entry); {} when the file does not exist yet."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f'{path}: not a JSON results file ({error}); write it again with '
                         'tools/model_zoo/zoo_results.py --write-results') from error
    models = data.get('models') if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise ValueError(f'{path}: expected {{"models": {{name: entry}}}}, got {type(data)}')
    return models


__all__ = [
    'FIELD', 'MODELS', 'REGIMES', 'REGIME_MODELS', 'zoo_config', 'SUITE', 'SEEDS',
    'PUBLISHED_SEED', 'WORK_ROOT', 'RECORD_FILE', 'METRICS_FILE', 'TOP1',
    'COMPLETE', 'DIVERGED', 'FAILED', 'RESULTS_FILE', 'CHECKPOINTS_DIR', 'config_path', 'run_dir',
    'config_hash', 'read_top1', 'read_record', 'non_finite_before_update',
    'finished_record', 'collect_records',
    'load_results'
]
