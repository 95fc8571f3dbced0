"""The backbone's norm_cfg reaches every norm it builds: stem, first-degree branch, the norms of
the polynomial terms (PDC factors and inputs, Π-net inputs and products) and the non-local
plugins' output norms; explicit block roles and plugin norm_cfgs win; defaults are unchanged."""
import hashlib
from collections import Counter
from typing import List, Tuple

import pytest
import torch
from helpers import CONFIGS
from mmengine.config import Config
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm, _NormBase

import mmpoly.models.polynomial.term as term_module
from mmpoly.models import Factor, PDCBlock, PDCResNetCIFAR
from mmpoly.models.polynomial.chain import fused_term
from mmpoly.utils.complexity import build_model

#: One config per family and a GroupNorm that divides all of its widths (stem, stages, hidden).
FAMILIES = {
    'pdc_resnet18_8xb32_in1k.py': 15,  # PDC-ResNet18 (ImageNet): 60-480, hidden 15-120
    'pdc-comp_resnet18_1xb128_cifar10.py': 16,  # PDC-comp: 64-256, hidden 64-128, 'IN' proj.
    'pinet_resnet18_1xb128_cifar10.py': 32,  # Π-net: BN on the shared factor and the product
    'pdc-nl3_pdc-resnet18_8xb32_in1k.py': 15,  # PDC-ResNet18 + PDC-NL[3] plugins
}

#: sha256 of ''.join(f'{key}:{tuple(shape)}\n' for the sorted backbone state dict) of each
#: shipped config, computed with the code before the backbone's norm_cfg reached the terms and
#: plugins (build_model(Config.fromfile(config), 'backbone')): the zoo checkpoints still fit.
KEY_HASHES = {
    'pdc_resnet18_8xb32_in1k.py':
    (312, 'fa39f694786f052a3df55c418616c4c4cb6d78671be41d0a8a34323878314539'),
    'pdc-comp_resnet18_1xb128_cifar10.py':
    (199, 'f7558231cf60bd56e6172d30dd51808fc56d938233cba447444a808f55c8a16a'),
    'pinet_resnet18_1xb128_cifar10.py':
    (204, '0d8396c8c19dd54f3d64d0bb8c2be0d9711682579a990aa110527b8f910988e7'),
    'pdc-nl3_pdc-resnet18_8xb32_in1k.py':
    (366, '9575348d3317669011ce91caa317b4fa9179874c21255935331c5c8dd3f67cdf'),
    'pdc-nl4_resnet18_1xb128_cifar100.py':
    (208, '7499f7ee0ac008267849cbfedbd9a775fe759b84d74c5e22437e5bafbb09b335'),
}

SMALL = dict(depth=None, stage_blocks=[1, 1], stage_channels=[8, 16], hidden_channels=4,
             out_indices=(1, ))
NL_PLUGIN = dict(cfg=dict(type='NonLocalBlock', reduction=4), stages=(True, True))


def build_backbone(config: str, **overrides) -> nn.Module:
    """The backbone of ``configs/<config>`` with ``overrides`` of its options, seed 0."""
    cfg = Config.fromfile(str(CONFIGS / config))
    cfg.model.backbone.update(overrides)
    torch.manual_seed(0)
    return build_model(cfg, 'backbone')


def norm_layers(module: nn.Module) -> List[Tuple[str, nn.Module]]:
    """Every norm layer of ``module`` (batch, instance, group and layer norms)."""
    return [(name, m) for name, m in module.named_modules()
            if isinstance(m, (_NormBase, nn.GroupNorm, nn.LayerNorm))]


def role(name: str) -> str:
    """Where the norm layer ``name`` of a backbone is: 'term', 'plugin' or 'first degree'."""
    if '.conv_out.' in name:
        return 'plugin'
    if any(part in name for part in ('.factors.', '.input_norm', '.projection')):
        return 'term'
    return 'first degree'


def check_term_projection_in(name: str, norm: nn.Module) -> None:
    """PDC's per-sample 'IN' projection norm is kept (explicit): no parameters, no state."""
    assert '.terms.' in name and '.projection.' in name, name
    assert isinstance(norm, nn.InstanceNorm2d) and not norm.affine \
        and not norm.track_running_stats and not list(norm.parameters()), name


# --- defaults: bit-identical ------------------------------------------------------------------
@pytest.mark.parametrize('config', sorted(KEY_HASHES))
def test_default_state_dict_keys_are_those_before_the_change(config):
    state = build_backbone(config).state_dict()
    text = ''.join(f'{k}:{tuple(v.shape)}\n' for k, v in sorted(state.items()))
    assert (len(state), hashlib.sha256(text.encode()).hexdigest()) == KEY_HASHES[config]


@pytest.mark.parametrize('config', ['pdc-comp_resnet18_1xb128_cifar10.py',
                                    'pinet_resnet18_1xb128_cifar10.py'])
def test_default_equals_explicit_default_norm_cfg(config):
    """Left unset and given as the default BN: the same layers, keys and values (seed 0)."""
    nets = []
    for overrides in ({}, dict(norm_cfg=dict(type='BN', requires_grad=True))):
        net = build_backbone(config, **overrides)  # seed 0
        net.init_weights()  # Kaiming convs: the same random numbers in the same order
        nets.append(net)
    default, explicit = nets
    assert [(n, type(m)) for n, m in default.named_modules()] == \
        [(n, type(m)) for n, m in explicit.named_modules()]
    ours, theirs = default.state_dict(), explicit.state_dict()
    assert list(ours) == list(theirs)
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
    assert all(type(m) is nn.BatchNorm2d for _, m in norm_layers(default)
               if not isinstance(m, nn.InstanceNorm2d))


# --- the backbone's norm_cfg reaches every norm -------------------------------------------------
@pytest.mark.parametrize('config', sorted(FAMILIES))
@pytest.mark.parametrize('kind', ['GN', 'SyncBN', 'frozen BN'])
def test_norm_cfg_reaches_every_norm(config, kind):
    norm_cfg, norm_type = {
        'GN': (dict(type='GN', num_groups=FAMILIES[config]), nn.GroupNorm),
        'SyncBN': (dict(type='SyncBN'), nn.SyncBatchNorm),
        'frozen BN': (dict(type='BN', requires_grad=False), nn.BatchNorm2d),
    }[kind]
    default = norm_layers(build_backbone(config))
    net = build_backbone(config, norm_cfg=norm_cfg)
    norms = norm_layers(net)
    assert len(norms) == len(default)  # the same layers, of another type
    counts = Counter()
    for name, norm in norms:
        if isinstance(norm, nn.InstanceNorm2d):
            check_term_projection_in(name, norm)
            continue
        assert isinstance(norm, norm_type), (name, type(norm))  # mmengine's SyncBN: a subclass
        assert [p.requires_grad for p in norm.parameters()] == [kind != 'frozen BN'] * 2, name
        counts[role(name)] += 1
    # the terms' / products' norms (PDC: input + 2 factors (+ a BN projection on ImageNet);
    # Π-net: input and product) of every block, and one plugin after stages 2-4
    assert counts == Counter(role(name) for name, norm in default
                             if not isinstance(norm, nn.InstanceNorm2d))
    assert counts['term'] >= 2 * 7 and counts['plugin'] == ('nl3' in config) * 3
    if kind == 'GN':  # no running statistics: other state-dict keys
        assert not any(k.endswith('running_mean') for k in net.state_dict())


def test_group_norm_backbone_trains_with_checkpointing_and_without_activations():
    """GN in the terms (the layers, not the fused chains) with with_cp and use_activation=False:
    the same outputs and gradients as without with_cp."""
    outs, grads = [], []
    for with_cp in (False, True):
        torch.manual_seed(0)
        net = PDCResNetCIFAR(**SMALL, norm_cfg=dict(type='GN', num_groups=4), with_cp=with_cp,
                             use_activation=False, plugins=[NL_PLUGIN],
                             block_cfg=dict(type='PDCBlock', degree=3, scale_init=0.5)).train()
        assert all(isinstance(m, (nn.GroupNorm, nn.InstanceNorm2d)) for _, m in norm_layers(net))
        out = net(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1)))[0]
        out.square().sum().backward()
        outs.append(out)
        grads.append([p.grad for p in net.parameters()])
    assert outs[0].shape == (2, 16, 4, 4)
    torch.testing.assert_close(outs[1], outs[0])
    for cp, plain in zip(grads[1], grads[0]):
        torch.testing.assert_close(cp, plain)


def test_frozen_norms_train_the_same_in_the_fused_terms_as_in_the_layers(monkeypatch):
    """requires_grad=False on the CPU's memory-lean term chains: no gradient for the frozen
    γ, β; the same output, conv gradients and running statistics as the layers give."""
    fused_calls = []

    def counting_fused_term(*args):
        fused_calls.append(1)
        return fused_term(*args)

    monkeypatch.setattr(term_module, 'fused_term', counting_fused_term)
    results = []
    for fused in (True, False):
        torch.manual_seed(0)
        block = PDCBlock(8, 8, degree=3, hidden_channels=4, scale_init=0.5,
                         norm_cfg=dict(type='BN', requires_grad=False)).train()
        for term in block.terms if not fused else []:  # a hook: the term runs its layers
            term.factors[0].register_forward_hook(lambda *args: None)
        x = torch.randn(2, 8, 6, 6, generator=torch.Generator().manual_seed(1))
        out = block(x)
        out.square().sum().backward()
        frozen = [p for m in block.modules() if isinstance(m, nn.BatchNorm2d)
                  for p in m.parameters()]
        assert len(frozen) == 2 * (2 + 1 + 2 + 3)  # bn1, bn2, input, factors of degrees 2, 3
        assert all(not p.requires_grad and p.grad is None for p in frozen)
        convs = [m.weight.grad for m in block.modules() if isinstance(m, nn.Conv2d)]
        stats = [m.running_mean.clone() for m in block.modules() if isinstance(m, _BatchNorm)]
        results.append((out, convs, stats))
    assert len(fused_calls) == 2  # the fused block's two terms; the hooked ones: none
    (out, convs, stats), (out_l, convs_l, stats_l) = results
    torch.testing.assert_close(out, out_l)
    for a, b in zip(convs + stats, convs_l + stats_l):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('norm_eval', [True, False])
def test_norm_eval_and_frozen_stages_cover_the_term_and_plugin_norms(norm_eval):
    net = PDCResNetCIFAR(**SMALL, norm_cfg=dict(type='SyncBN'), frozen_stages=1,
                         norm_eval=norm_eval, plugins=[NL_PLUGIN]).train()
    norms = [(n, m) for n, m in norm_layers(net) if isinstance(m, _BatchNorm)]
    assert all(isinstance(m, nn.SyncBatchNorm) for _, m in norms)
    names = [n for n, _ in norms]
    assert 'layer1.0.terms.0.factors.0.bn' in names and 'layer1.1.conv_out.bn' in names
    assert 'layer2.0.input_norm' in names and 'layer2.1.conv_out.bn' in names
    for name, norm in norms:
        frozen = name == 'bn1' or name.startswith('layer1.')
        assert norm.training is (not frozen and not norm_eval), name
        assert [p.requires_grad for p in norm.parameters()] == [not frozen] * 2, name


# --- explicit norms win ---------------------------------------------------------------------
def test_explicit_block_roles_and_plugin_norm_cfg_win():
    net = PDCResNetCIFAR(
        **SMALL, norm_cfg=dict(type='GN', num_groups=2),
        block_cfg=dict(type='PDCBlock', factor_norm=dict(type='BN'), input_norm='IN'),
        plugins=[dict(cfg=dict(type='NonLocalBlock', reduction=4, norm_cfg=dict(type='BN')),
                      stages=(True, False)),
                 dict(cfg=dict(type='DisentangledNonLocalBlock', reduction=4),
                      stages=(False, True), stage_cfgs=[None, dict(norm_cfg=None)])])
    block = net.layer2[0]
    assert block.norm1_name == 'gn1' and type(block.gn1) is nn.GroupNorm
    assert type(block.downsample[1]) is nn.GroupNorm
    assert type(block.terms[0].factors[0].norm) is nn.BatchNorm2d  # a dict: as given
    assert isinstance(block.input_norm, nn.InstanceNorm2d)  # another norm: as given
    assert type(net.layer1[1].conv_out.norm) is nn.BatchNorm2d  # the plugin's own
    assert not net.layer2[1].conv_out.with_norm  # stage_cfgs: no norm, a biased conv
    assert net.layer2[1].conv_out.conv.bias is not None


def test_plugins_without_a_default_norm_stay_without():
    """mmcv's NonLocal2d defaults to no norm: the backbone adds none."""
    net = PDCResNetCIFAR(**SMALL, norm_cfg=dict(type='SyncBN'), plugins=[dict(
        cfg=dict(type='NonLocal2d', reduction=2), stages=(False, True))])
    plugin = net.layer2[1]
    assert type(plugin).__name__ == 'NonLocal2d' and norm_layers(plugin) == []


def test_factor_in_keeps_requires_grad():
    """The faster InstanceNorm2d a Factor swaps in keeps norm_cfg's requires_grad."""
    factor = Factor(4, 4, 3, norm_cfg=dict(type='IN', affine=True, requires_grad=False))
    assert [p.requires_grad for p in factor.norm.parameters()] == [False, False]


# --- norms that cannot apply: one error naming the field and value ------------------------------
@pytest.mark.parametrize('kwargs, match', [
    (dict(norm_cfg=dict(type='LN')),
     r"^backbone\.norm_cfg=\{'type': 'LN'\}: LayerNorm does not normalise the \(B, C, H, W\) "
     r"feature maps of these layers; use a 2-d norm such as 'BN', 'SyncBN', 'GN'"),
    (dict(norm_cfg=dict(type='BN1d')), r"^backbone\.norm_cfg=\{'type': 'BN1d'\}: BatchNorm1d"),
    (dict(norm_cfg=dict(type='GN', num_groups=3)),
     r"^backbone\.norm_cfg=\{'type': 'GN', 'num_groups': 3\}: GroupNorm num_groups must be a "
     r"positive divisor of the 8 channels it normalises, got 3$"),
    (dict(norm_cfg=dict(type='GN', num_groups=8)),  # divides 8 and 16, not the hidden 4
     r"^norm_cfg \(through factor_norm='BN'\)=\{'type': 'GN', 'num_groups': 8\}: GroupNorm "
     r"num_groups must be a positive divisor of the 4 channels it normalises, got 8$"),
    (dict(block_cfg=dict(type='PDCBlock', factor_norm='IN3d')),
     r"^factor_norm=\{'type': 'IN3d'\}: InstanceNorm3d does not normalise"),
    (dict(norm_cfg=dict(type='GN', num_groups=4), plugins=[dict(
        cfg=dict(type='NonLocalBlock', norm_cfg=dict(type='GN', num_groups=32)))]),
     r"norm_cfg=\{'type': 'GN', 'num_groups': 32\}: GroupNorm num_groups must be a positive "
     r"divisor of the 8 channels"),
])
def test_norms_that_cannot_apply_are_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PDCResNetCIFAR(**{**SMALL, **kwargs})
