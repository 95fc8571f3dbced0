"""Gaps of deployment and the model hub: the input size a test pipeline gives (each transform's
(w, h) / (h, w) order), export of a float16 / float64 model, a ``part`` the model cannot run,
bad ``input_shape`` values, pytorch2onnx's ``--out`` and det_inference's ``--device``, and
``get_model(name, pretrained=True)`` of every published zoo model."""
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch
from helpers import CONFIGS, load_tool
from mmengine.config import Config

from mmpoly.deploy import (PARITY_RTOL, export_onnx, input_shape_from_config, load_model,
                           onnx_parity)
from mmpoly.utils.classifier_backbone import mmpoly_config_path

FASHION = 'pdc-comp_resnet8_1xb128-1400i_fashion-mnist.py'


# --------------------------------------------------------------------------- input size


@pytest.mark.parametrize('transform', [
    dict(type='CenterCrop', crop_size=(40, 24)),  # mmcv: (w, h)
    dict(type='Resize', scale=(40, 24)),  # mmcv: (w, h)
    dict(type='RandomCrop', crop_size=(24, 40)),  # mmpretrain: (h, w)
    dict(type='RandomResizedCrop', scale=(24, 40)),  # mmpretrain: (h, w)
    dict(type='EfficientNetCenterCrop', crop_size=24),
], ids=lambda t: t['type'])
def test_input_shape_is_what_the_transform_outputs(transform: dict) -> None:
    """RandomCrop / RandomResizedCrop sizes used to be read as (w, h): H and W swapped. The
    expected size is the one the transform itself produces on an image."""
    from mmpretrain.registry import TRANSFORMS
    from mmpretrain.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    image = np.random.RandomState(0).randint(0, 255, (64, 96, 3), np.uint8)
    out = TRANSFORMS.build(dict(transform))(dict(img=image, img_shape=image.shape[:2],
                                                 ori_shape=image.shape[:2]))
    cfg = Config(dict(
        model=dict(type='ImageClassifier', data_preprocessor=dict(mean=[0, 0, 0])),
        test_dataloader=dict(dataset=dict(type='CustomDataset',
                                          pipeline=[transform, dict(type='PackInputs')]))))
    assert input_shape_from_config(cfg) == (3, *out['img'].shape[:2])


# --------------------------------------------------------------------------- export


def _model():
    from test_onnx import _random_model
    return _random_model(FASHION)


@pytest.mark.parametrize('dtype', [torch.float16, torch.float64])
def test_a_float16_or_float64_model_exports_as_float32(dtype: torch.dtype, tmp_path: Path) -> None:
    """Used to fail with 'the model does not take a (1, 1, 28, 28) input' (a float32 example
    against float16 weights); the exported copy is float32 and the model is left as it was."""
    onnx = pytest.importorskip('onnx')
    cfg, model = _model()
    model = model.to(dtype)
    path = str(tmp_path / 'm.onnx')
    export_onnx(model, path, (1, 28, 28), batch_size=2)
    assert next(model.parameters()).dtype == dtype
    graph = onnx.load(path).graph
    assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    x = torch.randn(2, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    parity = onnx_parity(model, path, x)
    assert parity.scale > 0 and parity.max_abs <= PARITY_RTOL * parity.scale, parity
    # onnxruntime against an independent float64 run of the same (rounded) weights
    from mmpoly.deploy import onnx_session, run_onnx
    reference = model.double().eval()
    with torch.no_grad():
        expected = reference(x.double(), mode='tensor').numpy()
    actual, = run_onnx(onnx_session(path), x)
    assert np.abs(actual - expected).max() <= PARITY_RTOL * np.abs(expected).max()


def test_a_part_the_model_cannot_run_is_named(tmp_path: Path) -> None:
    """A bare backbone as 'classifier' used to end in a raw TypeError of its forward."""
    _, model = _model()
    path = tmp_path / 'm.onnx'
    with pytest.raises(ValueError, match=r"part='classifier'.*takes no mode"):
        export_onnx(model.backbone, str(path), (1, 28, 28))
    with pytest.raises(ValueError, match=r"part='features'.*extract_feat"):
        export_onnx(torch.nn.Conv2d(1, 2, 3), str(path), (1, 28, 28), part='features')
    with pytest.raises(ValueError, match=r"part must be 'classifier' or 'features', got 'x'"):
        export_onnx(model, str(path), (1, 28, 28), part='x')
    _, detector = load_model(str(CONFIGS / 'mask-rcnn_resnet18_fpn_1x_coco.py'))
    with pytest.raises(ValueError, match=r"mmdet detector: export its backbone \+ neck with "
                       r"part='features'"):
        export_onnx(detector, str(path), (3, 64, 64))
    assert not path.exists()


@pytest.mark.parametrize('shape', [(1, 28.5, 28), (1, '28', 28), (1, True, 28), 28])
def test_input_shape_must_be_ints(shape, tmp_path: Path) -> None:
    """28.5 used to be truncated to 28 and '28' accepted without a word."""
    _, model = _model()
    with pytest.raises(ValueError, match='input_shape must be'):
        export_onnx(model, str(tmp_path / 'm.onnx'), shape)


# --------------------------------------------------------------------------- tools


def test_pytorch2onnx_refuses_an_out_it_cannot_write(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    """A folder as --out used to fail in os.replace after the whole export."""
    tool = load_tool('deployment/pytorch2onnx')
    (tmp_path / 'file').write_text('x')
    cases = {str(tmp_path): 'is a folder; give the .onnx file to write',
             str(tmp_path / 'file' / 'm.onnx'): f'{tmp_path / "file"} is a file, not a folder'}
    for out, message in cases.items():
        with pytest.raises(SystemExit) as exit_info:
            tool.parse_args([str(CONFIGS / FASHION), '--out', out])
        assert exit_info.value.code == 2
        assert f"error: --out '{out}': {message}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['file']


@pytest.mark.parametrize('device', ['meta', 'xpu'])
def test_det_inference_refuses_a_device_torch_has_not(device: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    """'meta' and absent accelerators used to pass the check and fail inside mmdet."""
    tool = load_tool('det_inference')
    image = tmp_path / 'a.png'
    import cv2
    cv2.imwrite(str(image), np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args([str(image), str(CONFIGS / 'mask-rcnn_resnet18_fpn_1x_coco.py'),
                         'unused.pth', '--device', device])
    assert exit_info.value.code == 2
    assert f"--device '{device}': torch has no available '{device}' device" in \
        capsys.readouterr().err


# --------------------------------------------------------------------------- model hub


def _published() -> List[str]:
    import yaml
    models = yaml.safe_load((CONFIGS / 'metafile.yml').read_text())['Models']
    return sorted(m['Name'] for m in models if m.get('Weights'))


def test_get_model_pretrained_loads_every_tensor_of_every_published_checkpoint() -> None:
    """mmengine loads checkpoints non-strictly (a missing key is only logged): every key of
    each published model must be in its checkpoint, with the checkpoint's value."""
    import mmpoly  # noqa: F401  (registers the hub)
    from mmpretrain import get_model
    from mmpretrain.apis.model import ModelHub
    names = _published()
    assert len(names) == 17
    for name in names:
        weights = ModelHub.get(name).weights
        state = torch.load(weights, map_location='cpu', weights_only=True)['state_dict']
        model = get_model(name, pretrained=True)
        loaded = model.state_dict()
        assert sorted(loaded) == sorted(state), name
        for key, value in loaded.items():
            assert torch.equal(value, state[key].to(value.dtype)), (name, key)
        assert model._dataset_meta['classes'][0] == 'T-shirt/top', name
