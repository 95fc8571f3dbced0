"""The model zoo's ``configs/metafile.yml`` (mmpretrain's model-index format), generated from the
paper rows and their measured parameters / FLOPs. No released weights, hence no ``Results``."""
from collections import OrderedDict
from pathlib import Path
from typing import Dict, List, Sequence

import yaml

from .report import RowResult

COLLECTION = 'PolyNets'
PAPER = OrderedDict(
    Title='Augmenting Deep Classifiers with Polynomial Neural Networks',
    URL='https://arxiv.org/abs/2104.07916')
TRAINING_DATA = {'cifar10': 'CIFAR-10', 'cifar100': 'CIFAR-100', 'in1k': 'ImageNet-1k'}
ARCHITECTURE = {
    'ResNet': 'ResNet', 'SE': 'Squeeze-and-Excitation', 'Π-net': 'Π-net (shared factors)',
    'PDC': 'PDC (polynomial, no factor sharing)', 'NL': 'Non-local', 'DNL':
    'Disentangled non-local', 'PDC-NL': 'PDC non-local'
}


def _training_data(config: str) -> str:
    suffix = Path(config).stem.rsplit('_', 1)[-1]
    if suffix not in TRAINING_DATA:
        raise ValueError(f'cannot tell the training data of {config}: its name must end in one '
                         f'of {sorted(TRAINING_DATA)}')
    return TRAINING_DATA[suffix]


def metafile(results: Sequence[RowResult]) -> Dict:
    """One model per config (a config can be a row of several tables)."""
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
                                        ('Config', f'configs/{row.config}')])
        models[name]['Metadata']['Paper Rows'].append(
            f'{row.table} {row.model} ({row.paper_params}M in the paper)')
    architectures: List[str] = sorted({a for m in models.values()
                                       for a in m['Metadata']['Architecture']})
    collection = OrderedDict(
        Name=COLLECTION,
        Metadata=OrderedDict(Architecture=architectures),
        Paper=PAPER,
        README='README.md')
    return OrderedDict(Collections=[collection], Models=list(models.values()))


def dump_yaml(data: Dict) -> str:
    """YAML with keys in insertion order (as mmpretrain's metafiles are written)."""

    class _Dumper(yaml.SafeDumper):
        pass

    _Dumper.add_representer(
        OrderedDict, lambda d, data: d.represent_mapping('tag:yaml.org,2002:map', data.items()))
    return yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=100)
