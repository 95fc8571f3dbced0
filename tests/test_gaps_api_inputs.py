"""API inputs that failed deep inside torch or mmengine with a message naming no field: an
unknown key inside a norm_cfg / act_cfg / conv_cfg (or an argument mmcv or the layer sets
itself: a norm's channels, a conv's channels, kernel, stride, ...) is refused
with the field, the key and the options the layer class takes; input_shape_from_config takes
the path of a config file (and refuses other types); onnx_parity refuses a batch that is not a
torch.Tensor."""
import ast
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from torch import nn

from mmpoly.deploy import input_shape_from_config, onnx_parity
from mmpoly.models import PDCResNetCIFAR
from mmpoly.utils.startup import StartupError

from helpers import CONFIGS

SMALL = dict(depth=None, stage_blocks=[1, 1], stage_channels=[8, 16], hidden_channels=4,
             out_indices=(1, ))
#: A CIFAR-10 config and the (C, H, W) input its test pipeline gives.
CIFAR = CONFIGS / 'resnet18_1xb128_cifar10.py'
CIFAR_SHAPE = (3, 32, 32)


# --- 1. the inner keys of norm_cfg / act_cfg ---------------------------------------------------

@pytest.mark.parametrize('kwargs, message', [
    (dict(act_cfg=dict(type='ReLU', inplace=True, foo=1)),
     "backbone.act_cfg has unknown option 'foo' for ReLU; allowed options: ['inplace']"),
    (dict(block_cfg=dict(type='PDCBlock', factor_act=dict(type='LeakyReLU', negativ_slope=0.1))),
     "factor_act has unknown option 'negativ_slope' for LeakyReLU; allowed options: ['inplace', "
     "'negative_slope']; did you mean 'negative_slope'?"),
    (dict(norm_cfg=dict(type='BN', num_features=8)),
     "backbone.norm_cfg={'type': 'BN', 'num_features': 8}: num_features is set by "
     "mmcv.cnn.build_norm_layer (the channels of the map it normalises); remove it"),
    (dict(norm_cfg=dict(type='GN', num_groups=4, num_channels=8)),
     "backbone.norm_cfg={'type': 'GN', 'num_groups': 4, 'num_channels': 8}: num_channels is set "
     "by mmcv.cnn.build_norm_layer (the channels of the map it normalises); remove it"),
    # conv_cfg: torch's "got multiple values for keyword argument 'stride'" / "unexpected
    # keyword argument", naming neither the field nor the options
    (dict(conv_cfg=dict(type='Conv2d', stride=2)),
     "backbone.conv_cfg={'type': 'Conv2d', 'stride': 2}: stride is set by "
     "mmcv.cnn.build_conv_layer (each layer's channels, kernel size, stride, padding and bias); "
     "remove it"),
    (dict(conv_cfg=dict(type='Conv2d', paddingmode='reflect')),
     "backbone.conv_cfg has unknown option 'paddingmode' for Conv2d; allowed options: ['device', "
     "'dilation', 'dtype', 'groups', 'padding_mode']; did you mean 'padding_mode'?"),
    (dict(conv_cfg=dict(type='ConvWS', bias=True)),
     "backbone.conv_cfg={'type': 'ConvWS', 'bias': True}: bias is set by "
     "mmcv.cnn.build_conv_layer (each layer's channels, kernel size, stride, padding and bias); "
     "remove it"),
])
def test_layer_cfg_key_errors_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=f'^{re.escape(message)}$'):
        PDCResNetCIFAR(**SMALL, **kwargs)


def _allowed_options(error: pytest.ExceptionInfo) -> list:
    """The 'allowed options: [...]' list of an unknown-option error."""
    return ast.literal_eval(re.search(r'allowed options: (\[.*?\])', str(error.value)).group(1))


@pytest.mark.parametrize('kwargs, field, key, layer, close', [
    (dict(norm_cfg=dict(type='BN', moment=0.1)), 'backbone.norm_cfg', 'moment', 'BatchNorm2d',
     'momentum'),
    (dict(block_cfg=dict(type='PDCBlock', factor_norm=dict(type='IN', afine=True))),
     'factor_norm', 'afine', 'InstanceNorm2d', 'affine'),
    # a plugin's own norm_cfg (mmpoly's non-local block checks it as its norm_cfg)
    (dict(plugins=[dict(cfg=dict(type='NonLocalBlock', reduction=4,
                                 norm_cfg=dict(type='SyncBN', momentum=0.1, eps=1e-3,
                                               requires_grad=False, esp=1e-3)))]),
     'norm_cfg', 'esp', 'SyncBatchNorm', 'eps'),
])
def test_unknown_norm_key_lists_the_norm_options(kwargs, field, key, layer, close):
    with pytest.raises(ValueError, match=rf"^{re.escape(field)} has unknown option '{key}' for "
                       rf"{layer}; allowed options: \[.*\]; did you mean '{close}'\?$") as error:
        PDCResNetCIFAR(**SMALL, **kwargs)
    # the norm's own options and mmcv's requires_grad; not the channels build_norm_layer sets
    allowed = _allowed_options(error)
    assert {'eps', 'momentum', 'affine', 'track_running_stats', 'requires_grad'} <= set(allowed)
    assert 'num_features' not in allowed and key not in allowed


def test_valid_layer_cfg_keys_reach_the_layers():
    net = PDCResNetCIFAR(**SMALL, norm_cfg=dict(type='BN', momentum=0.01, eps=1e-3,
                                                requires_grad=False),
                         act_cfg=dict(type='LeakyReLU', negative_slope=0.2, _scope_='mmengine'),
                         conv_cfg=dict(type='Conv2d', padding_mode='reflect'))
    assert (net.bn1.momentum, net.bn1.eps) == (0.01, 1e-3)
    assert net.conv1.padding_mode == 'reflect'
    assert not any(p.requires_grad for p in net.bn1.parameters())
    assert net.relu.negative_slope == 0.2


class KeywordNorm(nn.BatchNorm2d):
    """A norm whose constructor takes ``**kwargs``: its options cannot be listed."""

    def __init__(self, num_features: int, **kwargs) -> None:
        super().__init__(num_features)
        self.extra = kwargs


def test_a_norm_that_takes_any_keyword_is_left_alone():
    net = PDCResNetCIFAR(**SMALL, norm_cfg=dict(type=KeywordNorm, anything=1))
    assert isinstance(net.bn1, KeywordNorm) and net.bn1.extra == dict(anything=1, eps=1e-5)


# --- 2. input_shape_from_config takes a config path --------------------------------------------

@pytest.mark.parametrize('given', [str(CIFAR), CIFAR, Config.fromfile(str(CIFAR)),
                                   Config.fromfile(str(CIFAR)).to_dict()],
                         ids=['str', 'Path', 'Config', 'dict'])
def test_input_shape_from_config_takes_a_path(given):
    assert input_shape_from_config(given) == CIFAR_SHAPE


def test_input_shape_from_a_missing_path_names_the_file(tmp_path: Path):
    missing = tmp_path / 'resnet18_cifar.py'
    with pytest.raises(StartupError, match=rf"^config file {re.escape(repr(str(missing)))} does "
                       'not exist; give the path of a config file'):
        input_shape_from_config(missing)


@pytest.mark.parametrize('given, name', [(42, 'int'), ([str(CIFAR)], 'list'),
                                         (np.zeros(3), 'numpy.ndarray')])
def test_input_shape_from_config_refuses_other_types(given, name):
    with pytest.raises(TypeError, match=rf'^cfg must be an mmengine Config, a dict or the path of '
                       rf'a config file \(str or os\.PathLike\), got {re.escape(name)}$'):
        input_shape_from_config(given)


# --- 3. onnx_parity takes a tensor batch -------------------------------------------------------

class TinyClassifier(nn.Module):
    """The interface onnx_parity runs: forward(x, mode='tensor') -> logits."""

    def forward(self, x: torch.Tensor, mode: str = 'tensor') -> torch.Tensor:
        return x.flatten(1)


@pytest.mark.parametrize('x, name', [(np.zeros((1, 3, 4, 4), np.float32), 'numpy.ndarray'),
                                     ([[0.0]], 'list')])
def test_onnx_parity_refuses_a_batch_that_is_not_a_tensor(x, name):
    with pytest.raises(TypeError, match=rf'^x must be a torch\.Tensor \(the \(B, C, H, W\) input '
                       rf'batch\), got {re.escape(name)}; convert a numpy array with '
                       r'torch\.from_numpy\(x\)$'):
        onnx_parity(TinyClassifier(), 'model.onnx', x)


# --- mmcv plugins' own checks ---------------------------------------------------------------

@pytest.mark.parametrize('cfg, check, line', [
    (dict(type='ContextBlock', ratio=0.25, pooling_type='max'),
     "assert pooling_type in ['avg', 'att']", r'\d+'),
    (dict(type='ContextBlock', ratio=0.25, fusion_types=('channel_mull', )),
     'assert all([f in valid_fusion_types for f in fusion_types])', r'\d+'),
])
def test_a_value_an_mmcv_plugin_asserts_against_is_named(cfg, check, line):
    """mmcv's ContextBlock checks its options with bare asserts: an AssertionError without a
    message. The error names the plugin entry, the failed check and the plugin's options."""
    with pytest.raises(ValueError, match=(
            rf'^plugins\[0\]\.cfg \(type ContextBlock, the plugin after stage 1\) has a value '
            rf'ContextBlock refuses: its check `{re.escape(check)}` failed \(context_block\.py, '
            rf"line {line}\); its named options: \['fusion_types', 'pooling_type', 'ratio'\]$")):
        PDCResNetCIFAR(**SMALL, plugins=[dict(cfg=cfg, stages=(False, True))])
    net = PDCResNetCIFAR(**SMALL, plugins=[dict(cfg=dict(cfg, pooling_type='att',
                                                         fusion_types=('channel_add', )),
                                                stages=(False, True))])
    assert net(torch.randn(1, 3, 16, 16))[-1].shape == (1, 16, 8, 8)
