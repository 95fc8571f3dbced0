"""The model zoo's ``configs/metafile.yml`` (mmpretrain's model-index format), generated from the
paper rows of arXiv:2104.07916 and their measured parameters / FLOPs, plus every other classifier
config of ``configs/`` (the data-regime and Fashion-MNIST configs) with its measured parameters.

Each model's ``Results`` names its task (``Image Classification``, which mmpretrain's
``inference_model`` dispatches on) and its dataset. Metrics and ``Weights`` exist only for the
Fashion-MNIST model zoo, from the results file ``configs/zoo_results.json`` that
``tools/model_zoo/zoo_results.py`` writes from the runs of this repository: ``Top 1 Accuracy`` is
that of the published checkpoint (seed ``published_seed``), next to the mean and standard
deviation over the seeds. No CIFAR, ImageNet or Speech Commands model was trained here: those
entries have no metrics and no weights.
"""
import re
from collections import OrderedDict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import yaml

from .report import RowResult

COLLECTION = 'PolyNets'
PAPER = OrderedDict(
    Title='Augmenting Deep Classifiers with Polynomial Neural Networks',
    URL='https://arxiv.org/abs/2104.07916')
TRAINING_DATA = {
    'cifar10': 'CIFAR-10', 'cifar100': 'CIFAR-100', 'in1k': 'ImageNet-1k',
    'cifar10-50perclass': 'CIFAR-10 (50 images per class)', 'speech-commands': 'Speech Commands',
    'fashion-mnist': 'Fashion-MNIST',
    'fashion-mnist-50perclass': 'Fashion-MNIST (50 images per class)',
    'fashion-mnist-lt-if100': 'Fashion-MNIST-LT (imbalance factor 100)',
    **{f'cifar10-lt-if{f}': f'CIFAR-10-LT (imbalance factor {f})' for f in (10, 20, 50, 100, 200)}
}
TASK = 'Image Classification'
CONFIGS_ROOT = Path(__file__).resolve().parents[2] / 'configs'
ARCHITECTURE = {
    'ResNet': 'ResNet', 'SE': 'Squeeze-and-Excitation', 'Π-net': 'Π-net (shared factors)',
    'PDC': 'PDC (polynomial, no factor sharing)', 'NL': 'Non-local', 'DNL':
    'Disentangled non-local', 'PDC-NL': 'PDC non-local'
}


#: (family, degree) of model fields that no paper row has (the paper's Π-net^[3] row is T-NA*'s
#: no-activation one).
EXTRA_MODEL_FIELDS = {'pinet3': ('Π-net', 3)}
#: Metrics of a results-file entry, and how many decimals they keep.
METRIC_DIGITS = 2


def _training_data(config: str) -> str:
    suffix = Path(config).stem.rsplit('_', 1)[-1]
    if suffix not in TRAINING_DATA:
        raise ValueError(f'cannot tell the training data of {config}: its name must end in one '
                         f'of {sorted(TRAINING_DATA)}')
    return TRAINING_DATA[suffix]


def _metrics(entry: Optional[Dict]) -> Dict:
    """The ``Metrics`` of a results-file entry (see the module docstring); {} for none."""
    if not entry:
        return {}
    metrics: Dict = OrderedDict()
    if entry.get('weights'):
        top1 = entry.get('weights_top1')
        if isinstance(top1, bool) or not isinstance(top1, (int, float)):
            raise ValueError(f'results-file entry with weights {entry["weights"]!r} needs '
                             f'weights_top1, the top-1 of those weights (a number); got {top1!r}')
        metrics['Top 1 Accuracy'] = round(top1, METRIC_DIGITS)
    if entry.get('mean') is not None:
        metrics['Top 1 Accuracy (mean over seeds)'] = round(entry['mean'], METRIC_DIGITS)
    if entry.get('std') is not None:
        metrics['Top 1 Accuracy (std over seeds)'] = round(entry['std'], METRIC_DIGITS)
    metrics['Seeds'] = len(entry.get('top1', []))
    metrics['Diverged Seeds'] = len(entry.get('diverged_seeds', []))
    return metrics


def _results(config: str, entry: Optional[Dict] = None) -> List[Dict]:
    return [OrderedDict([('Task', TASK), ('Dataset', _training_data(config)),
                         ('Metrics', _metrics(entry))])]


def _model_prefix(config: str) -> str:
    """The model field of a config name ('pdc-comp_resnet18_...' -> 'pdc-comp'; 'resnet7_...'
    and 'resnet18_...' -> 'resnet')."""
    prefix = Path(config).stem.split('_', 1)[0]
    return 'resnet' if re.fullmatch(r'resnet\d+', prefix) else prefix


def classifier_configs(configs_root: Union[str, Path, None] = None) -> List[str]:
    """The config files of ``configs_root`` (default: the checkout's ``configs/``) whose model is
    an ``ImageClassifier`` (the detection configs are not), sorted by name."""
    from mmengine.config import Config

    root = Path(configs_root) if configs_root is not None else CONFIGS_ROOT
    names = []
    for path in sorted(root.glob('*.py')):
        model = Config.fromfile(str(path)).get('model', {})
        if model.get('type') == 'ImageClassifier':
            names.append(path.name)
    return names


def other_models(results: Sequence[RowResult],
                 configs_root: Union[str, Path, None] = None,
                 zoo_results: Optional[Dict[str, Dict]] = None) -> List[Dict]:
    """A metafile entry for each classifier config that is no paper row (data-regime and
    Fashion-MNIST configs), with its measured parameters and the architecture and degree of
    the paper rows with the same model field (``pdc-comp_..._cifar10-lt-if10`` takes those of
    ``pdc-comp_..._cifar10``; :data:`EXTRA_MODEL_FIELDS` for the others), and, for the configs
    of ``zoo_results`` (the results file's models), their metrics and weights."""
    from mmengine.config import Config

    from mmpoly.utils import register_all_modules
    from mmpoly.utils.complexity import build_model, count_params

    register_all_modules(init_default_scope=False)
    root = Path(configs_root) if configs_root is not None else CONFIGS_ROOT
    by_prefix: Dict[str, Tuple[str, int]] = {}
    for result in results:
        key, value = _model_prefix(result.row.config), (result.row.family, result.row.degree)
        if by_prefix.setdefault(key, value) != value:
            raise ValueError(f'paper rows with model field {key!r} disagree on (family, degree): '
                             f'{by_prefix[key]} and {value} ({result.row.config})')
    for key, value in EXTRA_MODEL_FIELDS.items():
        by_prefix.setdefault(key, value)
    known = {result.row.config for result in results}
    zoo_results = dict(zoo_results or {})
    for name in zoo_results:
        if not (root / f'{name}.py').is_file() or \
                not _training_data(name).startswith('Fashion-MNIST'):
            raise ValueError(f'the results file has results for {name}: only the Fashion-MNIST '
                             f'model zoo\'s configs of {root} are trained in this repository')
    models = []
    for config in classifier_configs(root):
        if config in known:
            continue
        prefix = _model_prefix(config)
        if prefix not in by_prefix:
            raise ValueError(f'cannot tell the architecture of {config}: its model field '
                             f'{prefix!r} is none of the paper rows\' {sorted(by_prefix)}')
        family, degree = by_prefix[prefix]
        params = count_params(build_model(Config.fromfile(str(root / config))))
        metadata = OrderedDict([('Parameters', params), ('Training Data', _training_data(config)),
                                ('Architecture', [ARCHITECTURE[family]]),
                                ('Polynomial Degree', degree)])
        entry = zoo_results.pop(Path(config).stem, None)
        model = OrderedDict([('Name', Path(config).stem), ('Metadata', metadata),
                             ('In Collection', COLLECTION), ('Results', _results(config, entry)),
                             ('Config', f'configs/{config}')])
        if entry and entry.get('weights'):
            model['Weights'] = entry['weights']
        models.append(model)
    if zoo_results:
        raise ValueError(f'the results file has models that are not non-paper-row classifier '
                         f'configs of {root}: {sorted(zoo_results)}')
    return models


def metafile(results: Sequence[RowResult],
             configs_root: Optional[Union[str, Path]] = None,
             with_other_configs: bool = True,
             zoo_results: Optional[Dict[str, Dict]] = None) -> Dict:
    """One model per config (a config can be a row of several tables), then (with
    ``with_other_configs``) the classifier configs that are no paper row (:func:`other_models`),
    with the metrics and weights of ``zoo_results`` (the results file's models).
    """
    models: Dict[str, Dict] = OrderedDict()
    for result in results:
        row = result.row
        if result.error is not None:
            raise ValueError(f'{row.config} failed to build: {result.error}')
        name = Path(row.config).stem
        if name not in models:
            metadata = OrderedDict()
            if result.flops is not None:
                metadata['FLOPs'] = result.flops
            metadata['Parameters'] = result.params
            metadata['Training Data'] = _training_data(row.config)
            metadata['Architecture'] = [ARCHITECTURE[row.family]]
            metadata['Polynomial Degree'] = row.degree
            metadata['Paper Rows'] = []
            models[name] = OrderedDict([('Name', name), ('Metadata', metadata),
                                        ('In Collection', COLLECTION),
                                        ('Results', _results(row.config)),
                                        ('Config', f'configs/{row.config}')])
        models[name]['Metadata']['Paper Rows'].append(
            f'{row.table} {row.model} ({row.paper_params}M in the paper)')
    all_models = list(models.values())
    if with_other_configs:
        all_models += other_models(results, configs_root, zoo_results)
    architectures: List[str] = sorted({a for m in all_models
                                       for a in m['Metadata']['Architecture']})
    collection = OrderedDict(
        Name=COLLECTION,
        Metadata=OrderedDict(Architecture=architectures),
        Paper=PAPER,
        README='configs/README.md')  # mmpretrain's metafiles: the path from the repository root
    return OrderedDict(Collections=[collection], Models=all_models)


def dump_yaml(data: Dict) -> str:
    """YAML with keys in insertion order (as mmpretrain's metafiles are written)."""

    class _Dumper(yaml.SafeDumper):
        pass

    _Dumper.add_representer(
        OrderedDict, lambda d, data: d.represent_mapping('tag:yaml.org,2002:map', data.items()))
    return yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=100)
