"""mmpoly's classifiers in mmpretrain's model hub: ``list_models``, ``get_model``,
``inference_model`` and ``ImageClassificationInferencer`` know them by config name, from the
checkout and from an installed wheel."""
import gzip
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from mmengine.config import Config
from mmpretrain import ImageClassificationInferencer, get_model, inference_model, list_models
from mmpretrain.apis.model import ModelHub

import mmpoly
from mmpoly.utils import mmpoly_config_path, mmpoly_model_names, register_model_hub
from mmpoly.utils.complexity import build_model, count_params
from mmpoly.utils.resources import RESOURCE_ROOTS
from helpers import FASHION_MNIST, REPO

METAFILE = REPO / 'configs' / 'metafile.yml'
FASHION = 'pdc_resnet8_1xb128_fashion-mnist'
FASHION_MNIST_TEST = FASHION_MNIST / 't10k-images-idx3-ubyte.gz'


def _metafile_models() -> dict:
    return {m['Name']: m for m in yaml.safe_load(METAFILE.read_text())['Models']}


def _fashion_mnist_images(count: int) -> np.ndarray:
    """The first ``count`` real Fashion-MNIST test images (28×28 uint8), as installed by
    tools/setup_env.sh (Debian's dataset-fashion-mnist)."""
    with gzip.open(FASHION_MNIST_TEST) as f:
        data = f.read(16 + count * 28 * 28)
    return np.frombuffer(data, np.uint8, offset=16).reshape(count, 28, 28).copy()


#: the one mmpoly config name that mmpretrain's zoo also uses (there: ResNet18 with weights)
SHARED_WITH_MMPRETRAIN = 'resnet18_8xb32_in1k'


def test_every_metafile_model_is_in_the_hub_with_its_mmpoly_config():
    models = _metafile_models()
    assert sorted(n.lower() for n in models) == mmpoly_model_names()
    listed = set(list_models())
    roots = tuple(str(Path(root, 'configs')) for root in RESOURCE_ROOTS)
    for name, entry in models.items():
        assert name.lower() in listed, name
        assert entry['Config'] == f'configs/{name}.py'  # names are config names
        config = ModelHub._models_dict[name.lower()].config
        path = config if isinstance(config, str) else config.filename
        if name == SHARED_WITH_MMPRETRAIN:  # keeps mmpretrain's meaning
            assert not path.startswith(roots)
            continue
        assert path.startswith(roots) and os.path.samefile(path, mmpoly_config_path(f'{name}.py'))


@pytest.mark.slow
def test_every_classifier_config_is_in_the_metafile():
    """Every ``configs/*.py`` with an ImageClassifier (not the detection configs) has its entry."""
    from mmpoly.zoo.metafile import classifier_configs
    classifiers = {Path(c).stem for c in classifier_configs(REPO / 'configs')}
    assert FASHION in classifiers and 'pdc_resnet18_8xb32_in1k' in classifiers
    assert not any('coco' in c for c in classifiers)
    assert set(_metafile_models()) == classifiers


def test_list_models_finds_the_pdc_configs():
    pdc = list_models('*pdc*')
    expected = sorted(p.stem for p in (REPO / 'configs').glob('*pdc*.py')
                      if p.stem in _metafile_models())
    assert len(expected) > 30 and FASHION in expected and 'pdc_resnet18_8xb32_in1k' in expected
    assert [n for n in pdc if n in mmpoly_model_names()] == expected
    assert list_models('pdc_resnet8_1xb128_') == [FASHION]  # the zoo's are pdc_resnet8_1xb128-*
    assert FASHION in list_models(task='Image Classification')


@pytest.mark.parametrize('name', [
    FASHION, 'pdc-comp_resnet18_1xb128_cifar10', 'pinet_resnet18_1xb128_cifar10-lt-if100',
    'pdc_resnet7_1xb128_speech-commands', 'se_resnet18_8xb32_in1k'
])
def test_get_model_builds_the_config(name):
    model = get_model(name)
    direct = build_model(Config.fromfile(mmpoly_config_path(f'{name}.py')))
    assert count_params(model) == count_params(direct)
    assert count_params(model) == _metafile_models()[name]['Metadata']['Parameters']
    assert type(model.backbone) is type(direct.backbone)
    assert os.path.samefile(model._config.filename, mmpoly_config_path(f'{name}.py'))


def test_a_name_shared_with_mmpretrain_keeps_mmpretrain_meaning():
    """mmpretrain's resnet18_8xb32_in1k (the same ResNet18, with weights) is not shadowed; mmpoly's
    config of that name is built by path and has the same parameter count."""
    model = get_model(SHARED_WITH_MMPRETRAIN)
    assert type(model.backbone).__name__ == 'ResNet'
    assert ModelHub.get(SHARED_WITH_MMPRETRAIN).weights  # mmpretrain's released checkpoint
    ours = get_model(mmpoly_config_path(f'{SHARED_WITH_MMPRETRAIN}.py'))
    assert type(ours.backbone).__name__ == 'PolyResNet'
    assert count_params(ours) == count_params(model)
    assert len(list_models('resnet50_8xb32_in1k')) == 1  # mmpretrain's models are still there


def test_registering_again_is_harmless():
    before = list_models()
    assert register_model_hub() == mmpoly_model_names()
    importlib.reload(mmpoly)  # runs mmpoly/__init__ (the check and the registration) again
    register_model_hub()
    assert list_models() == before
    assert count_params(get_model(FASHION)) == _metafile_models()[FASHION]['Metadata']['Parameters']


def test_inference_model_on_fashion_mnist_images():
    images = _fashion_mnist_images(3)
    model = get_model(FASHION)
    result = inference_model(model, images[0])
    classes = model._dataset_meta['classes']
    assert len(classes) == 10
    assert set(result) >= {'pred_label', 'pred_score', 'pred_scores', 'pred_class'}
    assert 0 <= result['pred_label'] < 10 and result['pred_class'] == classes[result['pred_label']]
    scores = np.asarray(result['pred_scores'])
    assert scores.shape == (10, ) and np.isclose(scores.sum(), 1, atol=1e-5)
    assert result['pred_label'] == int(scores.argmax())
    # the same computation as the model's own test step on that image
    with torch.no_grad():
        sample, = model.test_step(dict(inputs=[torch.from_numpy(images[0])[None]]))
    np.testing.assert_allclose(scores, sample.pred_score.numpy(), rtol=1e-5, atol=1e-6)

    by_name = inference_model(FASHION, images[1])
    assert 0 <= by_name['pred_label'] < 10

    inferencer = ImageClassificationInferencer(FASHION)
    results = inferencer(list(images))
    assert len(results) == 3
    for res in results:
        assert 0 <= res['pred_label'] < 10 and res['pred_class'] in classes


# --------------------------------------------------------------------------- installed wheel


@pytest.fixture(scope='module')
def installed_wheel(tmp_path_factory) -> Path:
    """mmpoly's wheel (built from an sdist of the checkout) installed into a fresh folder."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from test_packaging import build_distributions
    finally:
        sys.path.pop(0)
    _, wheel = build_distributions(tmp_path_factory.mktemp('dist'))
    target = tmp_path_factory.mktemp('site')
    result = subprocess.run([sys.executable, '-m', 'pip', 'install', '--disable-pip-version-check',
                             '--no-deps', '--no-cache-dir', '--target', str(target), str(wheel)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return target


HUB_SCRIPT = f'''
import json
import mmpoly
from mmpretrain import get_model, list_models
from mmpretrain.apis.model import ModelHub
from mmpoly.utils import mmpoly_config_path, model_index_path
from mmpoly.utils.complexity import count_params
model = get_model({FASHION!r})
print(json.dumps(dict(
    mmpoly=mmpoly.__file__, index=model_index_path(),
    hub_config=ModelHub.get({FASHION!r}).config.filename,
    config_path=mmpoly_config_path({FASHION!r} + '.py'),
    model_config=model._config.filename, params=count_params(model),
    pdc=list_models('*pdc*'), imagenet=ModelHub.get('pdc_resnet18_8xb32_in1k').config.filename)))
'''


def test_the_hub_works_from_an_installed_wheel(installed_wheel, tmp_path):
    env = {**os.environ, 'PYTHONPATH': str(installed_wheel), 'PYTHONWARNINGS': 'ignore'}
    result = subprocess.run([sys.executable, '-c', HUB_SCRIPT], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    mim = installed_wheel / 'mmpoly' / '.mim'
    assert Path(out['mmpoly']).parent == installed_wheel / 'mmpoly'
    assert Path(out['index']) == mim / 'model-index.yml'
    for key in ('hub_config', 'config_path', 'model_config'):
        assert Path(out[key]) == mim / 'configs' / f'{FASHION}.py', key
    assert Path(out['imagenet']) == mim / 'configs' / 'pdc_resnet18_8xb32_in1k.py'
    assert out['params'] == _metafile_models()[FASHION]['Metadata']['Parameters']
    assert [n for n in out['pdc'] if n in mmpoly_model_names()] == \
        [n for n in list_models('*pdc*') if n in mmpoly_model_names()]
    assert str(REPO) not in result.stdout  # nothing came from the checkout
