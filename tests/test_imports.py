"""Imports only register: importing ``mmpoly``, ``mmpoly.datasets`` or ``mmpoly.models`` leaves
mmengine's file backends and checkpoint loaders, torch's safe globals, mmpretrain's model hub and
mmdet's registries as they were (new names aside: registering adds them), and does not import
``mmpoly.engine``. The imports run one after the other in a fresh interpreter, each compared
with the state before it; ``import mmpoly.engine`` is the control that changes them."""
import json
import subprocess
import sys
from typing import Dict, List

import pytest
from helpers import REPO

SNAPSHOT = r'''
import json, sys
import torch
import torch._dynamo  # adds a torch class to torch's safe globals when first imported
import mmdet.registry as det_registry
from mmengine.fileio import io as mmengine_io
from mmengine.fileio.backends import backends, prefix_to_backends
from mmengine.registry import Registry
from mmengine.runner.checkpoint import CheckpointLoader
from mmpretrain.apis.model import ModelHub

ModelHub._register_mmpretrain_models()  # what the first hub lookup does

def snapshot():
    registries = {name: (reg, dict(reg.module_dict)) for name, reg in vars(det_registry).items()
                  if isinstance(reg, Registry)}
    return dict(
        backends=dict(backends), prefix_to_backends=dict(prefix_to_backends),
        backend_instances={k: type(v) for k, v in mmengine_io.backend_instances.items()},
        schemes=dict(CheckpointLoader._schemes),
        safe_globals=list(torch.serialization.get_safe_globals()),
        hub_class=dict(vars(ModelHub)), hub_models=dict(ModelHub._models_dict),
        registries=registries)

def changes(before, after):
    out = []
    for key in ('backends', 'prefix_to_backends', 'backend_instances', 'schemes', 'hub_class'):
        for name in set(before[key]) | set(after[key]):
            if before[key].get(name) is not after[key].get(name):
                out.append(f'{key}[{name!r}]')
    if before['safe_globals'] != after['safe_globals']:
        out.append('torch safe globals')
    for name, metainfo in before['hub_models'].items():
        if after['hub_models'].get(name) is not metainfo:
            out.append(f'ModelHub._models_dict[{name!r}]')
    for name, (reg, modules) in before['registries'].items():
        now = after['registries'][name][1]
        for key, cls in modules.items():  # new names (mmpoly's, and mmdet's own) are fine
            if now.get(key) is not cls:
                out.append(f'mmdet {name}[{key!r}]')
    return out

results = {}
before = snapshot()
import importlib
for module in sys.argv[1:]:  # each import is compared with the state just before it
    importlib.import_module(module)
    after = snapshot()
    results[module] = dict(
        changes=changes(before, after), engine='mmpoly.engine' in sys.modules,
        new_hub=sorted(set(after['hub_models']) - set(before['hub_models'])),
        new_det_models=sorted(set(after['registries']['MODELS'][1])
                              - set(before['registries']['MODELS'][1])))
    before = after
print(json.dumps(results))
'''


ORDER = ('mmpoly', 'mmpoly.datasets', 'mmpoly.models', 'mmpoly.engine')


@pytest.fixture(scope='module')
def imported() -> Dict[str, Dict[str, object]]:
    """What each import of ``ORDER`` changed, in one fresh interpreter, one after the other."""
    result = subprocess.run([sys.executable, '-c', SNAPSHOT, *ORDER], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('module', ORDER[:3])
def test_import_only_registers(imported: Dict[str, Dict[str, object]], module: str) -> None:
    out = imported[module]
    assert out['changes'] == [], out['changes']
    assert out['engine'] is False
    if module == 'mmpoly':  # registered mmpoly's classifiers with the hub
        assert 'pdc_resnet8_1xb128_fashion-mnist' in out['new_hub']
        assert 'resnet18_8xb32_in1k' not in out['new_hub']  # mmpretrain's name
    if module == 'mmpoly.models':  # registered mmpoly's models in mmdet too
        assert {'PDCResNet', 'PolyResNet'} <= set(out['new_det_models'])


def test_engine_import_is_what_patches(imported: Dict[str, Dict[str, object]]) -> None:
    """The control: importing mmpoly.engine replaces the local loader and file backend."""
    changed: List[str] = imported['mmpoly.engine']['changes']
    assert "schemes['']" in changed
    assert "prefix_to_backends['']" in changed and "backends['local']" in changed
    assert imported['mmpoly.engine']['engine'] is True


#: The model hub, used as README shows: a zoo model with its weights, and inference on an image.
HUB_USE = SNAPSHOT.split('results = {}')[0] + r'''
import numpy as np
import mmpoly
from mmpretrain import get_model, inference_model
before = snapshot()
model = get_model('pdc_resnet8_1xb128-1400i_fashion-mnist', pretrained=True)
image = np.zeros((28, 28), np.uint8)
image[6:22, 9:19] = 200  # a bright upright block
result = inference_model(model, image)
print('\n' + json.dumps(dict(changes=changes(before, snapshot()),
                             engine='mmpoly.engine' in sys.modules,
                             scores=len(result['pred_scores']),
                             engine_listed='mmpoly.engine' in
                             model._config.custom_imports.imports)))
'''


def test_the_model_hub_does_not_patch() -> None:
    """get_model reads the config, whose custom_imports list mmpoly.engine for runners: the hub
    imports the config's other modules only, so getting a model and running it leave mmengine's
    loading and saving as they were."""
    result = subprocess.run([sys.executable, '-c', HUB_USE], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out == dict(changes=[], engine=False, scores=10, engine_listed=True), out
