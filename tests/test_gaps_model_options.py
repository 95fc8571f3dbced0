"""Model options that were silently accepted or failed with a message naming no option: plugin
configs are checked as block configs are (path, allowed options or types, close match);
options a block would not use are refused (PDC degree 1, no-activation blocks, DNL's
temperature without softmax), defaults never; channel arguments of the building blocks are
positive ints; a backbone input without a batch axis says so; PDC-NL's parameter count in its
docstring is the built block's; every shipped config's backbone still builds."""
import re

import pytest
import torch
from mmengine.config import Config

from mmpoly.models import PDCBlock, PDCResNetCIFAR, PolyResNetCIFAR, ResNetBlock
from mmpoly.models.backbones.poly_resnet import PolyResNetBase
from mmpoly.models.blocks.pdc import LEAKY_RELU
from mmpoly.models.nonlocal_family import (DisentangledNonLocalBlock, NonLocalBlock,
                                           PDCNonLocal3)
from mmpoly.models.polynomial import ChannelGate, Factor, PolynomialTerm, Projection
from mmpoly.utils.complexity import build_model

from helpers import CONFIGS

SMALL = dict(depth=None, stage_blocks=[1, 1], stage_channels=[8, 8], out_indices=(1, ))


def _net(**kwargs) -> PolyResNetCIFAR:
    return PolyResNetCIFAR(**SMALL, **kwargs)


# --- 1. plugin configs ------------------------------------------------------------------------

@pytest.mark.parametrize('plugin, message', [
    (dict(cfg=dict(type='NonLocalBlock', reducton=2)),
     r"^plugins\[0\]\.cfg has unknown option 'reducton' for NonLocalBlock; allowed options: "
     r"\[.*'reduction'.*\]; did you mean 'reduction'\?$"),
    (dict(cfg=dict(type='NonLocalBlock', reduction=2), stage_cfgs=[None, dict(use_sofmax=False)]),
     r"^plugins\[0\]\.stage_cfgs\[1\] has unknown option 'use_sofmax' for NonLocalBlock; "
     r".*did you mean 'use_softmax'\?$"),
    (dict(cfg=dict(type='NonLocalBlok')),
     r"^plugins\[0\]\.cfg\.type='NonLocalBlok' is not a registered module type \(scope "
     r"'mmpretrain'\); plugin types: \[.*'DisentangledNonLocalBlock', .*'NonLocal2d', "
     r"'NonLocalBlock', 'PDCNonLocal3', 'PDCNonLocal4'\].*did you mean 'NonLocalBlock'\?$"),
    (dict(cfg=dict(type='ReLU')),
     r"^plugins\[0\]\.cfg\.type='ReLU': ReLU takes no in_channels, which the backbone sets"),
    (dict(cfg=dict(type='PDCNonLocal3', reduction=2)),
     r"^plugins\[0\]\.cfg: PDCNonLocal3 needs \['spatial_size'\] \(missing for the plugin after "
     r'stage 0\)'),
    (dict(cfg=dict(type='NonLocalBlock', reduction=2),
          stage_cfgs=[dict(type='PDCNonLocal3'), None]),
     r"^plugins\[0\]\.stage_cfgs\[0\]\.type='PDCNonLocal3': a plugin has one type"),
    # mmcv's NonLocal2d takes **kwargs: its error, with the path and its named options
    (dict(cfg=dict(type='NonLocal2d', reducton=2)),
     r"^plugins\[0\]\.cfg \(type NonLocal2d\) has an option it does not take: .*'reducton'.*"
     r"its named options: \[.*'sub_sample'\]"),
])
def test_plugin_config_errors_name_the_entry(plugin, message):
    with pytest.raises(ValueError, match=message):
        _net(plugins=[plugin])


def test_plugin_options_are_checked_for_stages_without_the_plugin():
    # the plugin only follows stage 1, the typo is found all the same
    with pytest.raises(ValueError, match=r"^plugins\[0\]\.cfg has unknown option 'reducton'"):
        _net(plugins=[dict(cfg=dict(type='NonLocalBlock', reducton=2), stages=(False, True))])


def test_block_cfg_unknown_option_has_a_close_match():
    with pytest.raises(ValueError, match=r"^block_cfg has unknown option 'degre' for PDCBlock; "
                       r"allowed options: \[.*\]; did you mean 'degree'\?$"):
        _net(block_cfg=dict(type='PDCBlock', degre=3))


def test_valid_plugins_still_build():
    net = _net(plugins=[
        dict(cfg=dict(type='NonLocalBlock', reduction=2), stages=(False, True)),
        dict(cfg=dict(type='PDCNonLocal3', reduction=2), stages=(True, False),
             stage_cfgs=[dict(spatial_size=(8, 8)), None]),
        dict(cfg=dict(type='NonLocal2d', reduction=2, mode='dot_product'), stages=(True, False)),
        dict(cfg=dict(type='ContextBlock', ratio=0.25), stages=(False, True))])
    assert [type(m).__name__ for m in net.layer1[1:]] == ['PDCNonLocal3', 'NonLocal2d']
    assert [type(m).__name__ for m in net.layer2[1:]] == ['NonLocalBlock', 'ContextBlock']
    assert net(torch.randn(2, 3, 8, 8))[0].shape == (2, 8, 4, 4)


# --- 2. options a block would not use --------------------------------------------------------

@pytest.mark.parametrize('option, value', [
    ('hidden_channels', 4), ('scale_init', 1.0), ('factor_kernel_size', 5),
    ('projection_kernel_size', 1), ('num_projection_convs', 2), ('input_norm', 'none'),
    ('factor_norm', 'IN'), ('projection_norm', 'BN'), ('factor_act', 'ReLU'),
    ('projection_act', 'none'),
])
def test_pdc_degree_1_refuses_term_options(option, value):
    with pytest.raises(ValueError, match=rf"^{option}={re.escape(repr(value))}: unused with "
                       r'degree=1, which builds no higher-degree terms'):
        PDCBlock(8, 8, degree=1, **{option: value})


def test_pdc_degree_1_refuses_the_backbone_hidden_channels():
    with pytest.raises(ValueError, match=r'^hidden_channels=4: unused with degree=1.*'
                       r'backbone\.hidden_channels'):
        _net(block_cfg=dict(type='PDCBlock', degree=1), hidden_channels=4)


def test_pdc_degree_1_accepts_the_defaults_given_explicitly():
    block = PDCBlock(8, 8, degree=1, hidden_channels=None, factor_kernel_size=3,
                     projection_kernel_size=3, num_projection_convs=1, input_norm='BN',
                     factor_norm='BN', projection_norm='IN', factor_act=dict(LEAKY_RELU),
                     projection_act=dict(LEAKY_RELU), scale_init=0)
    assert len(block.terms) == 0
    assert len(list(block.parameters())) == len(list(ResNetBlock(8, 8).parameters()))


@pytest.mark.parametrize('option', ['factor_act', 'projection_act'])
def test_pdc_without_activations_refuses_an_activation(option):
    with pytest.raises(ValueError, match=rf"^{option}='ReLU' is unused with use_activation=False"):
        PDCBlock(8, 8, use_activation=False, **{option: 'ReLU'})
    # the default, and no activation, are accepted
    for value in (dict(LEAKY_RELU), 'none', None):
        PDCBlock(8, 8, use_activation=False, **{option: value})


def test_no_activation_block_and_backbone_refuse_an_activation():
    with pytest.raises(ValueError, match=r"^act_cfg=\{'type': 'GELU'\} is unused with "
                       r'use_activation=False'):
        ResNetBlock(8, 8, act_cfg=dict(type='GELU'), use_activation=False)
    with pytest.raises(ValueError, match=r"^backbone\.act_cfg=\{'type': 'GELU'\} is unused with "
                       r'use_activation=False'):
        _net(act_cfg=dict(type='GELU'), use_activation=False)
    # defaults (ReLU, also given explicitly) and no activation are accepted
    for act_cfg in (dict(type='ReLU'), 'ReLU', None, 'none'):
        ResNetBlock(8, 8, act_cfg=act_cfg, use_activation=False)
        _net(act_cfg=act_cfg, use_activation=False)
    _net(use_activation=False, block_cfg=dict(type='PDCBlock'), hidden_channels=4)


@pytest.mark.parametrize('off, why', [
    (dict(use_softmax=False), 'use_softmax=False'),
    (dict(use_activation=False), r'use_activation=False \(which also turns the softmax off\)'),
])
def test_dnl_temperature_without_softmax_is_refused(off, why):
    with pytest.raises(ValueError, match=rf'^temperature=0\.5 is unused with {why}: τ divides'):
        DisentangledNonLocalBlock(8, temperature=0.5, **off)
    DisentangledNonLocalBlock(8, temperature=0.05, **off)  # the default
    DisentangledNonLocalBlock(8, **off)


def test_dnl_temperature_in_a_no_activation_backbone():
    plugin = dict(cfg=dict(type='DisentangledNonLocalBlock', reduction=2, temperature=0.1))
    _net(plugins=[plugin])
    with pytest.raises(ValueError, match=r'^temperature=0\.1 is unused with use_activation=False'):
        _net(plugins=[plugin], use_activation=False)


def test_nl_use_scale_default_is_kept_without_softmax():
    """use_scale has no effect without softmax (the map is divided by HW), but True is its
    default, which every no-activation config relies on: accepted, and False (no scaling,
    which is what happens) too."""
    x = torch.randn(2, 8, 4, 4)
    outs = []
    for use_scale in (True, False):
        torch.manual_seed(0)
        block = NonLocalBlock(8, reduction=2, use_softmax=False, use_scale=use_scale,
                              norm_cfg=None).eval()
        torch.nn.init.normal_(block.conv_out.conv.weight)
        outs.append(block(x))
    torch.testing.assert_close(outs[0], outs[1])
    assert _net(use_activation=False, plugins=[dict(cfg=dict(type='NonLocalBlock'))]).layer1[1] \
        .use_scale is True


# --- 3. channel arguments ---------------------------------------------------------------------

@pytest.mark.parametrize('cls, args, field, value', [
    (PolynomialTerm, (2, 0, 4, 4), 'in_channels', 0),
    (PolynomialTerm, (2, 4, -1, 4), 'hidden_channels', -1),
    (PolynomialTerm, (2, 4, 4, 2.0), 'out_channels', 2.0),
    (Factor, (0, 4), 'in_channels', 0),
    (Factor, (4, True), 'out_channels', True),
    (Projection, (0, 4), 'in_channels', 0),
    (Projection, (4, -2), 'out_channels', -2),
    (ChannelGate, (0, 1), 'channels', 0),
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_channel_arguments_are_positive_ints(cls, args, field, value):
    with pytest.raises(ValueError, match=rf'^{field} must be a positive integer, got '
                       rf'{re.escape(repr(value))}$'):
        cls(*args)


# --- 4. backbone input without a batch axis -------------------------------------------------

@pytest.mark.parametrize('shape, hint', [
    ((3, 8, 8), r' \(3-D; a single image\? add the batch axis: x\[None\]\)'),
    ((1, 2, 3, 8, 8), r' \(5-D\)'),
    ((8, 8), r' \(2-D\)'),
])
def test_backbone_input_must_be_a_batch(shape, hint):
    net = _net().eval()
    with pytest.raises(ValueError, match=r'^the backbone expected a \(B, C, H, W\) batch, got '
                       rf'shape {re.escape(str(shape))}{hint}; C = model\.backbone\.in_channels '
                       r'= 3$'):
        net(torch.randn(*shape))
    # a batch of the wrong width still names backbone.in_channels
    with pytest.raises(ValueError, match=r'^model\.backbone\.in_channels=3 but the input batch '
                       r'has shape \(1, 8, 8, 8\) \(8 channels\)'):
        net(torch.randn(1, 8, 8, 8))


# --- 5. PDC-NL's parameter count ----------------------------------------------------------

def test_pdc_nl_docstring_parameter_counts():
    doc = ' '.join(PDCNonLocal3.__doc__.split())
    found = re.search(r'c = 64, r = 4, HW = 32² gives ([\d,]+) \(([\d,]+) with ``norm_cfg=None``',
                      doc)
    assert found, doc
    default, no_norm = (int(n.replace(',', '')) for n in found.groups())

    def count(**kwargs):
        return sum(p.numel() for p in PDCNonLocal3(64, (32, 32), reduction=4,
                                                   **kwargs).parameters())

    assert (default, no_norm) == (count(), count(norm_cfg=None)) == (72_912, 72_848)


# --- every shipped config still builds --------------------------------------------------------

SHIPPED = sorted(p.name for p in CONFIGS.glob('*.py'))


def test_shipped_configs_include_the_detectors():
    assert len(SHIPPED) > 100 and sum('rcnn' in name for name in SHIPPED) == 4


@pytest.mark.parametrize('name', SHIPPED)
def test_shipped_config_backbone_builds(name):
    """Every configs/*.py (classifiers and detectors): its backbone, which carries every option
    checked above, builds (on the meta device: the checks, no weights)."""
    with torch.device('meta'):
        backbone = build_model(Config.fromfile(str(CONFIGS / name)), 'backbone')
    assert isinstance(backbone, PolyResNetBase)


def test_shipped_pdc_defaults_build_without_activations():
    # PDCResNetCIFAR's default block with use_activation=False (the noact configs' pattern)
    assert PDCResNetCIFAR(**SMALL, hidden_channels=4, use_activation=False).layer1[0].degree == 2
