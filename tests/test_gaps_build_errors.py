"""A model key that no class takes, in a part whose type takes ``**kwargs`` (most mmpretrain and
mmdet heads: check_model_config cannot list their arguments): building the model ended in
Python's ``ClsHead.__init__() got an unexpected keyword argument 'num_clases'`` traceback, naming
neither the config key nor the argument meant. tools/train.py and tools/test.py now report the
key, the type and the closest argument as one message."""
from pathlib import Path

import pytest
from helpers import CONFIGS, FASHION_MNIST, load_tool
from mmengine.config import Config

from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import build_model
from mmpoly.utils.startup import StartupError, model_build_errors, unexpected_argument_problem


def _typo_config(tmp_path: Path, base: str, override: str) -> Path:
    """A config inheriting ``configs/<base>`` with the model override ``override``."""
    config = tmp_path / 'typo.py'
    config.write_text(f'_base_ = {str(CONFIGS / base)!r}\nmodel = {override}\n')
    return config


def _build_error(config: Path) -> TypeError:
    register_all_modules()
    cfg = Config.fromfile(str(config))
    with pytest.raises(TypeError) as error:
        build_model(cfg)
    return error.value


@pytest.mark.parametrize('base, override, key, type_, owner, close', [
    ('pdc_resnet8_1xb128_fashion-mnist.py', "dict(head=dict(num_clases=10))",
     'model.head.num_clases', 'LinearClsHead', 'ClsHead', 'num_classes'),
    ('mask-rcnn_pdc-resnet18_fpn_1x_coco.py',
     "dict(backbone=dict(init_cfg=None), roi_head=dict(bbox_head=dict(num_clases=10)))",
     'model.roi_head.bbox_head.num_clases', 'Shared2FCBBoxHead', 'BBoxHead',
     'num_classes, num_cls_fcs, num_cls_convs'),
])
def test_the_key_no_class_takes_is_named(tmp_path: Path, base: str, override: str, key: str,
                                         type_: str, owner: str, close: str) -> None:
    config = _typo_config(tmp_path, base, override)
    error = _build_error(config)
    assert "__init__() got an unexpected keyword argument 'num_clases'" in str(error)
    cfg = Config.fromfile(str(config))
    assert unexpected_argument_problem(error, cfg, str(config)) == (
        f"{key} of config {str(config)!r}: 'num_clases' is not an argument of "
        f"{key.rsplit('.', 1)[0]}.type {type_!r} (it passes it on to {owner}, which does not "
        f'take it) (close matches: {close})')
    with pytest.raises(StartupError) as startup_error:
        with model_build_errors(cfg, str(config)):
            build_model(cfg)
    assert str(startup_error.value).startswith(f'{key} of config')


@pytest.mark.parametrize('message', [
    "__init__() got an unexpected keyword argument 'num_clases'",  # Python 3.9
    "ClsHead.__init__() got an unexpected keyword argument 'num_clases'. Did you mean "
    "'num_classes'?",  # Python 3.13
])
def test_the_messages_of_other_python_versions_are_read(message: str) -> None:
    register_all_modules()
    cfg = Config(dict(model=dict(type='ImageClassifier', head=dict(type='LinearClsHead',
                                                                   num_clases=10))))
    assert unexpected_argument_problem(TypeError(message), cfg, 'x.py').startswith(
        "model.head.num_clases of config 'x.py': 'num_clases' is not an argument of "
        "model.head.type 'LinearClsHead'")


def test_other_type_errors_pass_unchanged() -> None:
    cfg = Config(dict(model=dict(type='ImageClassifier', head=dict(type='LinearClsHead',
                                                                   num_clases=10))))
    assert unexpected_argument_problem(TypeError('unsupported operand'), cfg, 'x.py') is None
    assert unexpected_argument_problem(ValueError(
        "ClsHead.__init__() got an unexpected keyword argument 'num_clases'"), cfg, 'x.py') is None
    # a keyword that no dict of the model gives (raised by code of its own, not the config)
    assert unexpected_argument_problem(TypeError(
        "ClsHead.__init__() got an unexpected keyword argument 'other'"), cfg, 'x.py') is None
    with pytest.raises(TypeError, match='^unsupported operand$'):
        with model_build_errors(cfg, 'x.py'):
            raise TypeError('unsupported operand')


@pytest.mark.skipif(not (FASHION_MNIST / 'train-images-idx3-ubyte.gz').is_file(),
                    reason='tools/setup_env.sh installs Fashion-MNIST')
def test_train_tool_prints_one_message(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = _typo_config(tmp_path, 'pdc_resnet8_1xb128_fashion-mnist.py',
                          "dict(head=dict(num_clases=10))")
    with pytest.raises(SystemExit) as exit_info:
        load_tool('train').main([str(config), '--work-dir', str(tmp_path / 'work')])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"tools/train.py: error: model.head.num_clases of config {str(config)!r}: 'num_clases' is "
        "not an argument of model.head.type 'LinearClsHead' (it passes it on to ClsHead, which "
        "does not take it) (close matches: num_classes)")
