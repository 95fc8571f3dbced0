"""The degree analyser (tools/analysis_tools/poly_degree.py, mmpoly.analysis): the paper's
taxonomy (arXiv:2104.07916) measured on configs, on a user-registered block and on any module."""
import json
import math
from typing import Optional

import pytest
import torch
from helpers import CONFIGS, disk_full_at_fsync, load_tool
from mmengine.config import Config
from torch import nn

from mmpoly.analysis import (FrozenStatsNorm, analyse_backbone, analyse_config,
                             finite_differences, freeze_norms, numerical_degree,
                             polynomial_config, randomise_parameters)
from mmpoly.models import ResNetBlock
from mmpoly.registry import MODELS
from mmpoly.utils import register_all_modules

register_all_modules()
poly_degree = load_tool('analysis_tools/poly_degree')


def blocks(report, block_type):
    return [r for r in report.rows if r.part == 'block' and r.type == block_type]


# --- configs of the taxonomy ---------------------------------------------------------------

@pytest.mark.parametrize('config,block_type,degree,size', [
    ('resnet18_1xb128_cifar10.py', 'ResNetBlock', 1, 8),
    ('se_resnet18_1xb128_cifar10.py', 'SEBlock', 2, 8),
    ('pinet_resnet18_1xb128_cifar10.py', 'PiNetBlock', 2, 8),
    ('pdc3_resnet18_1xb128_cifar100.py', 'PDCBlock', 3, 8),
    ('nl_resnet18_1xb128_cifar100.py', 'NonLocalBlock', 3, 8),
    ('pdc-nl4_resnet18_1xb128_cifar100.py', 'PDCNonLocal4', 4, 32),  # built for 32² inputs
])
def test_every_block_of_a_config_has_its_degree(config, block_type, degree, size):
    report = analyse_config(str(CONFIGS / config), input_size=(size, size), max_degree=degree,
                            parts=('blocks', ))
    found = blocks(report, block_type)
    assert found and all(r.measured == degree == r.expected and r.status == 'match'
                         for r in found), report.format_table()
    others = [r for r in report.rows if r.part == 'block' and r.type != block_type]
    assert all(r.type == 'ResNetBlock' and r.measured == 1 for r in others)  # NL: after stages
    assert {r.part for r in report.rows} == {'block'}
    assert report.switched_off[0] == 'backbone.use_activation=False'


def test_stages_are_the_product_of_their_blocks():
    report = analyse_config(str(CONFIGS / 'se_resnet18_1xb128_cifar10.py'), input_size=(8, 8),
                            max_degree=4)
    assert report.row('stem').measured == 1  # CIFAR stem: conv + BN (eval mode) = affine
    stages = [r for r in report.rows if r.part == 'stage']
    assert [(r.measured, r.expected, r.status) for r in stages] == [(4, 4, 'match')] * 4
    backbone = report.row('backbone')  # 2^8 = 256: beyond finite differences, a lower bound
    assert backbone.measured is None and backbone.expected == 256
    assert backbone.status == 'beyond max' and 'degree > 5: a lower bound' in backbone.notes[-1]


def test_softmax_and_activation_of_the_plugins_are_switched_off():
    cfg = Config.fromfile(str(CONFIGS / 'pdc-nl4_resnet18_1xb128_cifar100.py'))
    poly, switched = polynomial_config(cfg)
    plugin = poly.model.backbone.plugins[0].cfg
    assert plugin.use_softmax is False and plugin.use_activation is False
    assert switched == ['backbone.use_activation=False',
                        'backbone.plugins[0].cfg.use_activation=False',
                        'backbone.plugins[0].cfg.use_softmax=False']
    assert cfg.model.backbone.plugins[0].cfg.get('use_softmax') is None  # a copy is changed


def test_no_activation_backbone_is_the_product_of_its_blocks():
    """Stem (1) × two PDC^[3] blocks (3 × 3): degree 9 of the input image."""
    small = {'model.backbone.stage_blocks': [1, 1], 'model.backbone.stage_channels': [4, 4],
             'model.backbone.hidden_channels': 4, 'model.backbone.out_indices': (1, )}
    report = analyse_config(str(CONFIGS / 'pdc3-noact_resnet18_1xb128_cifar10.py'),
                            input_size=(4, 4), max_degree=10, cfg_options=small)
    backbone = report.row('backbone')
    assert backbone.input == 'image' and backbone.measured == backbone.expected == 9
    assert report.switched_off == []  # the no-act config has use_activation=False already
    # its InstanceNorm projections (PDC-noact keeps them) are frozen, one per term and block
    assert len(report.frozen_norms) == 4
    assert all(name.endswith('.in') for name in report.frozen_norms)


def test_plain_resnet18_backbone_is_first_degree():
    report = analyse_config(str(CONFIGS / 'noact_resnet18_1xb128_cifar10.py'),
                            input_size=(8, 8), max_degree=3)
    assert report.row('backbone').measured == report.row('backbone').expected == 1
    assert len(blocks(report, 'ResNetBlock')) == 8


def test_imagenet_stem_with_max_pool_is_not_a_polynomial(tmp_path):
    out = tmp_path / 'degrees.json'
    code = poly_degree.main([
        str(CONFIGS / 'se_resnet18_8xb32_in1k.py'), '--input-size', '16', '16', '--max-degree',
        '4', '--json', str(out), '--cfg-options', 'model.backbone.depth=None',
        'model.backbone.stage_blocks=[1]', 'model.backbone.stage_channels=[16]',
        'model.backbone.out_indices=[0]'])
    assert code == 0  # the stem declares no degree: reported, not a failure
    rows = {r['name']: r for r in json.loads(out.read_text())['rows']}
    stem = rows['stem']
    assert stem['measured'] is None and stem['status'] == 'not a polynomial'
    assert 'MaxPool2d' in stem['notes'][-1]
    backbone = rows['backbone']
    assert backbone['input'] == 'stem output' and backbone['measured'] == 2
    assert rows['layer1.0']['measured'] == 2 and rows['layer1']['measured'] == 2


def test_keep_norms_reports_instance_norm_blocks_as_not_polynomial():
    small = {'model.backbone.stage_blocks': [1], 'model.backbone.stage_channels': [4],
             'model.backbone.hidden_channels': 4, 'model.backbone.out_indices': (0, )}
    config = str(CONFIGS / 'pdc-noact_resnet18_1xb128_cifar10.py')
    kept = analyse_config(config, input_size=(4, 4), max_degree=3, freeze=False,
                          cfg_options=small)
    (block, ) = blocks(kept, 'PDCBlock')
    assert block.measured is None and block.status == 'not a polynomial'
    assert 'InstanceNorm2d' in block.notes[-1] and kept.frozen_norms == []
    frozen = analyse_config(config, input_size=(4, 4), max_degree=3, cfg_options=small)
    assert blocks(frozen, 'PDCBlock')[0].measured == 2


def test_frozen_norm_is_the_norm_at_the_reference_input_and_affine_after():
    for norm in (nn.InstanceNorm2d(3, affine=True), nn.GroupNorm(1, 3), nn.LayerNorm([3, 4, 4])):
        norm = norm.double()
        with torch.no_grad():
            for p in norm.parameters():
                p.uniform_(0.5, 1.5)
        x = torch.randn(1, 3, 4, 4, dtype=torch.float64)
        frozen = FrozenStatsNorm(norm)
        torch.testing.assert_close(frozen(x), norm(x))
        d = torch.randn_like(x)
        assert numerical_degree(frozen, x, d, max_degree=3) == 1
        assert numerical_degree(norm, x, d, max_degree=3) is None
    net = nn.Sequential(nn.Conv2d(3, 3, 1), nn.GroupNorm(1, 3), nn.BatchNorm2d(3))
    assert freeze_norms(net) == ['1'] and isinstance(net[1], FrozenStatsNorm)


# --- the shipped no-activation configs, as they are -----------------------------------------

NOACT_CONFIGS = sorted(p.name for p in CONFIGS.glob('*noact_*.py'))


def _backbones(configs):
    """{backbone config (as text): the configs that build it}: CIFAR-10 and CIFAR-100 configs
    differ only in their heads."""
    found = {}
    for name in configs:
        found.setdefault(repr(Config.fromfile(str(CONFIGS / name)).model.backbone), []).append(name)
    return found


NOACT_BACKBONES = list(_backbones(NOACT_CONFIGS).values())


def _noact_blocks(config: str, size: int = 16):
    """The backbone of a shipped config (random float64 weights, eval mode) and the first
    residual block of every stage, with a random input of the shape it gets in a forward pass
    at size×size (the inputs themselves grow with the network's degree, up to overflow), and
    whether it holds an InstanceNorm."""
    cfg = Config.fromfile(str(CONFIGS / config))
    backbone = randomise_parameters(MODELS.build(cfg.model.backbone).double()).eval()
    blocks = [stage[0] for stage in (getattr(backbone, name) for name in backbone.res_layers)]
    assert all(isinstance(block, ResNetBlock) for block in blocks)
    shapes = {}

    def record(block, args):
        shapes[block] = args[0].shape

    hooks = [b.register_forward_pre_hook(record) for b in blocks]
    torch.manual_seed(0)
    x = torch.randn(1, cfg.model.backbone.get('in_channels', 3), size, size,
                    dtype=torch.float64)
    with torch.no_grad():
        backbone(x)
    for hook in hooks:
        hook.remove()
    return [(b, torch.randn(shapes[b], dtype=torch.float64),
             any(isinstance(m, nn.InstanceNorm2d) for m in b.modules())) for b in blocks]


def _differences(block, x0, degree):
    """max |n-th finite difference| of t -> block(x0 + t·d), relative to max |block|, for n =
    degree and degree + 1 (float64, random direction d, step 0.5)."""
    d = torch.randn_like(x0)
    with torch.no_grad():
        values = torch.stack([block(x0 + 0.5 * t * d).flatten() for t in range(degree + 2)])
    scale = values.abs().max()
    return [float(finite_differences(values, n).abs().max() / scale)
            for n in (degree, degree + 1)]


def test_every_shipped_no_activation_config_is_checked():
    families = {name.split('_')[0] for name in NOACT_CONFIGS}
    assert families == {'noact', 'pinet-noact', 'pinet3-noact', 'pinet4-noact', 'pdc-noact',
                        'pdc3-noact', 'pdc4-noact'}
    assert sorted(sum(NOACT_BACKBONES, [])) == NOACT_CONFIGS


@pytest.mark.parametrize('configs', NOACT_BACKBONES, ids=lambda configs: configs[0])
def test_shipped_no_activation_blocks_are_polynomials_exactly_without_instance_norm(configs):
    """The shipped no-activation backbones (eval mode, 16×16 input), the first block of every
    stage. ResNet and Π-net blocks (BN in eval mode) are polynomials of their degree N: the
    (N+1)-th finite difference vanishes and the N-th does not. The PDC blocks keep their
    InstanceNorm projections (PDC's default): each divides by the standard deviation of the
    sample's own map, so the block is not a polynomial and its (N+1)-th difference stays."""
    torch.manual_seed(1)
    found = _noact_blocks(configs[0])
    assert found
    for block, x0, has_instance_norm in found:
        # the PDC configs are the ones with InstanceNorm, in every block
        assert has_instance_norm == configs[0].startswith('pdc'), type(block).__name__
        last, beyond = _differences(block, x0, block.degree)
        assert last > 1e-6, (type(block).__name__, last)
        if has_instance_norm:
            assert beyond > 1e-2 * last, (type(block).__name__, last, beyond)
        else:
            assert beyond < 1e-10, (type(block).__name__, last, beyond)


def test_pdc_block_with_frozen_instance_norm_is_a_polynomial():
    """The same shipped PDC no-activation block becomes a polynomial of its degree once its
    InstanceNorm is frozen at one input (then affine), as the degree analyser does."""
    config = 'pdc-noact_resnet8_1xb128-1400i_fashion-mnist.py'
    found = _noact_blocks(config)
    assert sum(has_instance_norm for *_, has_instance_norm in found) == 3
    block, x0, _ = found[0]
    assert block.degree == 2 and len(freeze_norms(block)) == 1
    last, beyond = _differences(block, x0, 2)
    assert last > 1e-6 and beyond < 1e-10


# --- a block the user writes ---------------------------------------------------------------

class CubeBlock(ResNetBlock):
    """A user block: branch + shortcut + f1(s) ∘ f2(s) ∘ f3(s), s the shortcut (degree 3)."""

    degree = 3

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1,
                 conv_cfg: Optional[dict] = None, norm_cfg: dict = dict(type='BN'),
                 act_cfg: Optional[dict] = dict(type='ReLU'), use_activation: bool = True) -> None:
        super().__init__(in_channels, out_channels, stride, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                         act_cfg=act_cfg, use_activation=use_activation)
        self.factors = nn.ModuleList(nn.Conv2d(out_channels, out_channels, 1) for _ in range(3))

    def polynomial_terms(self, branch, shortcut):
        product = self.factors[0](shortcut) * self.factors[1](shortcut) * \
            self.factors[2](shortcut)
        return branch + shortcut + product


class MislabelledCubeBlock(CubeBlock):
    degree = 2  # wrong on purpose: the analyser must catch it


MODELS.register_module(name='TestDegreeCubeBlock', module=CubeBlock, force=True)
MODELS.register_module(name='TestDegreeMislabelledBlock', module=MislabelledCubeBlock, force=True)


def user_config(block_type: str) -> str:
    return f'''\
model = dict(
    type='ImageClassifier',
    backbone=dict(type='PolyResNetCIFAR', depth=None, stage_blocks=[2], stage_channels=[4],
                  out_indices=(0, ), block_cfg=dict(type={block_type!r})),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=2, in_channels=4))
'''


def test_the_tool_measures_a_user_registered_block(tmp_path, capsys, monkeypatch):
    config = tmp_path / 'cube.py'
    config.write_text(user_config('TestDegreeCubeBlock'))
    out = tmp_path / 'degrees.json'
    code = poly_degree.main([str(config), '--input-size', '4', '4', '--max-degree', '10',
                             '--json', str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert 'CubeBlock' in printed and 'switched off: backbone.use_activation=False' in printed
    report = json.loads(out.read_text())
    rows = {r['name']: r for r in report['rows']}
    assert rows['layer1.0']['measured'] == rows['layer1.0']['expected'] == 3
    assert rows['layer1.1']['type'] == 'CubeBlock' and rows['layer1.1']['measured'] == 3
    assert rows['layer1']['measured'] == 9 and rows['backbone']['measured'] == 9
    assert report['input_shape'] == [1, 3, 4, 4] and report['max_degree'] == 10
    # the JSON is written complete or not at all: a failed write leaves the previous file
    disk_full_at_fsync(monkeypatch)
    with pytest.raises(OSError, match='No space left'):
        poly_degree.main([str(config), '--input-size', '4', '4', '--max-degree', '10',
                          '--json', str(out)])
    assert json.loads(out.read_text()) == report
    assert sorted(p.name for p in tmp_path.iterdir()) == ['cube.py', 'degrees.json']


def test_the_tool_fails_on_a_block_that_misstates_its_degree(tmp_path, capsys):
    config = tmp_path / 'mislabelled.py'
    config.write_text(user_config('TestDegreeMislabelledBlock'))
    assert poly_degree.main([str(config), '--input-size', '4', '4', '--max-degree', '4']) == 1
    assert 'MISMATCH' in capsys.readouterr().out


class Square(nn.Module):
    """x -> conv(x) ∘ conv(x): degree 2."""

    degree = 2

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        return self.conv(x) * x


def test_the_python_api_takes_any_module():
    report = analyse_backbone(nn.Sequential(Square(2), nn.Conv2d(2, 2, 3), Square(2)),
                              (2, 5, 5), max_degree=6)
    assert [(r.name, r.measured, r.status) for r in report.rows] == [
        ('0', 2, 'match'), ('2', 2, 'match'), ('backbone', 4, 'measured')]
    # activations the options cannot switch off are named, and measured as non-polynomial
    report = analyse_backbone(nn.Sequential(Square(2), nn.ReLU()), (2, 3, 3), max_degree=3)
    assert report.row('backbone').status == 'not a polynomial'
    assert report.row('backbone').notes == ['still holds ReLU']


# --- bad input -------------------------------------------------------------------------------

def test_unknown_config():
    with pytest.raises(FileNotFoundError, match="config file 'configs/nope.py' does not exist"):
        poly_degree.main(['configs/nope.py'])


@pytest.mark.parametrize('max_degree', ['0', '-2', '21'])
def test_bad_max_degree(max_degree):
    with pytest.raises(ValueError, match=rf'max_degree must be an int in \[1, 20\].*'
                       rf'got {max_degree}'):
        poly_degree.main([str(CONFIGS / 'resnet18_1xb128_cifar10.py'), '--max-degree',
                          max_degree])


@pytest.mark.parametrize('size,match', [((0, 4), r'input_size must be \(H, W\), two positive '
                                         r'ints, got \(0, 4\)'),
                                        ((4, ), r'input_size must be \(H, W\)')])
def test_bad_input_size(size, match):
    with pytest.raises(ValueError, match=match):
        analyse_config(str(CONFIGS / 'resnet18_1xb128_cifar10.py'), input_size=size)


def test_bad_parts():
    with pytest.raises(ValueError, match=r"parts must be a non-empty list of \['blocks', "
                       r"'stages', 'backbone'\], got \('stem',\)"):
        analyse_config(str(CONFIGS / 'resnet18_1xb128_cifar10.py'), parts=('stem', ))


def test_numerical_degree_checks_its_arguments():
    x = torch.zeros(3, dtype=torch.float64)
    with pytest.raises(ValueError, match='max_degree must be an int >= 0, got -1'):
        numerical_degree(lambda v: v, x, x, -1)
    ones = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match='needs float64 outputs, got torch.float32'):
        numerical_degree(lambda v: v.float(), x, ones, 1)
    # each of these read every function as degree 0, or none as a polynomial, without a word
    for kwargs, message in [(dict(d=x), 'd must be a non-zero direction'),
                            (dict(step=0), 'step must be a finite number > 0, got 0'),
                            (dict(step=math.nan), 'step must be a finite number > 0, got nan'),
                            (dict(rtol=math.nan), 'rtol must be a finite number > 0, got nan'),
                            (dict(max_degree=True), 'max_degree must be an int >= 0, got True')]:
        arguments = {**dict(fn=lambda v: v ** 3, x0=x, d=ones, max_degree=4), **kwargs}
        with pytest.raises(ValueError, match=message):
            numerical_degree(**arguments)
    assert numerical_degree(lambda v: (v[0] ** 5, v), x, torch.ones(3, dtype=torch.float64),
                            6) == 5
