"""``torch.fx.symbolic_trace`` of mmpoly's backbones: the traced graph gives eager's outputs.

Every registered block family (ResNet, SE, Π-net, PDC of degrees 2 and 3, with and without
activations, BN or IN projections) in both backbone stems is traced. In eager mode with grad
enabled the polynomial terms run their fused chains (:mod:`mmpoly.models.polynomial.chain`);
a trace records the terms' layers, so the comparison also checks the two against each other.

The non-local plugins (NL, DNL, PDC-NL[3], PDC-NL[4]) are not fx-traceable, and are not
tested here: not for data-dependent shapes, but because they branch in Python on their input's
metadata, which a symbolic trace cannot evaluate (``torch.fx`` raises a ``TraceError``): its
shape in every block's input check (``NonLocalBase.check_input``) and, past that, in the
re-association test of ``pairwise_product`` without softmax; its strides in the layout test of
``mix_positions`` (DNL, PDC-NL); its device in the chunk size of ``factor_mix`` (PDC-NL). NL
with softmax fails at its input check only. ``test_non_local_plugins_do_not_trace`` keeps the
claim checked.
"""
import inspect
from typing import Dict

import pytest
import torch
from helpers import randomise_norms

from mmpoly.models import PolyResNetBase, ResNetBlock
from mmpoly.registry import MODELS

SMALL = dict(depth=None, stage_blocks=(1, 2), stage_channels=(8, 16), out_indices=(0, 1))
PDC = dict(type='PDCBlock', hidden_channels=4, scale_init=0.5)
PINET = dict(type='PiNetBlock', scale_init=0.5)

#: name -> backbone options (on top of SMALL); every registered block type and backbone is used.
FAMILIES: Dict[str, dict] = {
    'ResNet (CIFAR stem)': dict(type='PolyResNetCIFAR', block_cfg=dict(type='ResNetBlock')),
    'ResNet (ImageNet stem)': dict(type='PolyResNet', block_cfg=dict(type='ResNetBlock')),
    'ResNet, no activation': dict(type='PolyResNetCIFAR', block_cfg=dict(type='ResNetBlock'),
                                  use_activation=False),
    'SE': dict(type='PolyResNetCIFAR', block_cfg=dict(type='SEBlock', reduction=4)),
    'SE, no activation': dict(type='PolyResNetCIFAR', use_activation=False,
                              block_cfg=dict(type='SEBlock', reduction=4)),
    'Pi-net': dict(type='PolyResNetCIFAR', block_cfg=dict(PINET, degree=2)),
    'Pi-net degree 3, input convs, two projection convs': dict(
        type='PolyResNetCIFAR',
        block_cfg=dict(PINET, degree=3, num_input_convs=1, num_projection_convs=2)),
    'Pi-net degree 3, no projection': dict(
        type='PolyResNetCIFAR',
        block_cfg=dict(PINET, degree=3, num_projection_convs=0, projection_norm='none')),
    'PDC (CIFAR stem)': dict(type='PDCResNetCIFAR', block_cfg=PDC),
    'PDC (ImageNet stem)': dict(type='PDCResNet', block_cfg=PDC),
    'PDC degree 3, channels-last input': dict(type='PDCResNetCIFAR',
                                              block_cfg=dict(PDC, degree=3)),
    'PDC, no activation': dict(type='PDCResNetCIFAR', block_cfg=PDC, use_activation=False),
    'PDC, BN projection, two projection convs': dict(
        type='PDCResNetCIFAR', block_cfg=dict(PDC, projection_norm='BN', num_projection_convs=2)),
    'PDC, IN factors': dict(type='PDCResNetCIFAR', block_cfg=dict(PDC, factor_norm='IN')),
}


def _registered(base: type) -> set:
    return {name for name, cls in MODELS.module_dict.items()
            if inspect.isclass(cls) and issubclass(cls, base) and not inspect.isabstract(cls)
            and cls.__module__.startswith('mmpoly.')}


def test_the_families_cover_every_registered_block_and_backbone():
    assert {f['block_cfg']['type'] for f in FAMILIES.values()} == _registered(ResNetBlock)
    assert {f['type'] for f in FAMILIES.values()} == _registered(PolyResNetBase)


@pytest.mark.parametrize('family', list(FAMILIES))
def test_backbones_trace_with_torch_fx(family):
    torch.manual_seed(0)
    backbone = randomise_norms(MODELS.build(dict(SMALL, **FAMILIES[family]))).eval()
    x = torch.randn(2, 3, 16, 16)
    if 'channels-last' in family:
        backbone.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    traced = torch.fx.symbolic_trace(backbone)
    if 'PDC' in family:  # eager runs the fused chains, the graph the terms' layers
        targets = {str(node.target) for node in traced.graph.nodes}
        assert {'layer1.0.terms.0.factors.1.conv', 'layer1.0.terms.0.projection.0.conv'} \
            <= targets
    expected = backbone(x)
    got = traced(x)
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize('plugin', [
    dict(type='NonLocalBlock'),
    dict(type='DisentangledNonLocalBlock'),
    dict(type='PDCNonLocal3', spatial_size=(8, 8)),
    dict(type='PDCNonLocal4', spatial_size=(8, 8)),
])
def test_non_local_plugins_do_not_trace(plugin):
    """The claim of the module docstring: the non-local blocks branch on their input's shape."""
    backbone = MODELS.build(dict(
        SMALL, type='PolyResNetCIFAR', plugins=[dict(cfg=plugin, stages=(False, True))],
        stage_blocks=(1, 1), strides=(2, 1))).eval()
    assert backbone(torch.randn(1, 3, 16, 16))[1].shape == (1, 16, 8, 8)
    with pytest.raises(torch.fx.proxy.TraceError):
        torch.fx.symbolic_trace(backbone)
