"""mmpretrain's ResNet options on every mmpoly backbone, checked by behaviour: frozen stages and
norm_eval keep every BatchNorm's statistics (also the polynomial terms' and the plugins'),
with_cp gives the same outputs, gradients and statistics, zero_init_residual makes every block
type start as its shortcut; the plugin options are checked; every registered name builds in
mmpretrain's and mmdet's registries."""
import inspect
from typing import Dict, List

import pytest
import torch
from mmengine.registry import DefaultScope
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from mmpoly.models import PDCResNetCIFAR, PolyResNetCIFAR, ResNetBlock
from mmpoly.models.nonlocal_family import NonLocalBase

from helpers import run_keeping_count

#: One option set per block type (α != 0 so that the higher-degree terms count).
BLOCK_CFGS = {
    'ResNetBlock': dict(type='ResNetBlock'),
    'SEBlock': dict(type='SEBlock', reduction=4),
    'PiNetBlock': dict(type='PiNetBlock', degree=3, scale_init=0.5),
    'PDCBlock': dict(type='PDCBlock', degree=3, scale_init=0.5),
}
SMALL = dict(depth=None, stage_blocks=[1, 1, 1], stage_channels=[8, 16, 16], out_indices=(2, ))
NL_AFTER_STAGE_2 = [dict(cfg=dict(type='NonLocalBlock', reduction=4),
                         stages=(False, True, False))]


def _small(block: str, **kwargs) -> PolyResNetCIFAR:
    hidden = dict(hidden_channels=4) if block == 'PDCBlock' else {}
    return PolyResNetCIFAR(**SMALL, block_cfg=BLOCK_CFGS[block], **hidden, **kwargs)


def _norm_buffers(module: nn.Module) -> Dict[str, Tensor]:
    """Copies of every BatchNorm buffer (running mean / var, batches tracked), by name."""
    return {f'{name}.{b}': buf.detach().clone() for name, m in module.named_modules()
            if isinstance(m, _BatchNorm) for b, buf in m.named_buffers(recurse=False)}


def _train_step(net: nn.Module, x: Tensor) -> None:
    out = net(x)[0]
    out.square().mean().backward()


def _changed(before: Dict[str, Tensor], after: Dict[str, Tensor]) -> List[str]:
    return sorted(k for k in before if not torch.equal(before[k], after[k]))


# --- frozen_stages and norm_eval, by what a training step does -------------------------------
@pytest.mark.parametrize('block', sorted(BLOCK_CFGS))
def test_frozen_stages_keep_their_norm_statistics_and_get_no_gradient(block):
    """frozen_stages=1 without norm_eval: a training step leaves the stem's and stage 1's
    BatchNorm statistics (the polynomial terms' too) and parameters as they were, and
    updates those of the later stages and of the plugin."""
    torch.manual_seed(0)
    net = _small(block, frozen_stages=1, plugins=NL_AFTER_STAGE_2,
                 zero_init_residual=False).double()  # every branch contributes
    net.init_weights()
    net.train()
    before = _norm_buffers(net)
    _train_step(net, torch.randn(4, 3, 8, 8, dtype=torch.float64))
    changed = _changed(before, _norm_buffers(net))
    frozen = [k for k in before if k.startswith(('bn1.', 'layer1.'))]
    assert frozen and not set(frozen) & set(changed)
    assert set(changed) == set(before) - set(frozen)  # every other BN was updated
    assert any(k.startswith('layer2.1.conv_out') for k in changed)  # the plugin's output BN
    for name, param in net.named_parameters():
        assert (param.grad is None) == name.startswith(('conv1.', 'bn1.', 'layer1.')), name


@pytest.mark.parametrize('block', sorted(BLOCK_CFGS))
def test_norm_eval_training_step_is_the_eval_model(block):
    """norm_eval=True: in training mode the backbone computes what it computes in eval mode
    (every BatchNorm, in the blocks, their polynomial terms and the plugins, uses its running
    statistics), and a training step leaves those statistics unchanged."""
    torch.manual_seed(0)
    net = _small(block, norm_eval=True, plugins=NL_AFTER_STAGE_2).double()
    net.init_weights()
    with torch.no_grad():  # non-trivial statistics and plugin output
        for m in net.modules():
            if isinstance(m, _BatchNorm):
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.normal_(1, 0.2)
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    net.eval()
    with torch.no_grad():
        expected = net(x)[0]
    net.train()
    before = _norm_buffers(net)
    out = net(x)[0]  # with autograd: the CPU polynomial terms take their fused path
    torch.testing.assert_close(out, expected)
    out.square().mean().backward()
    assert _changed(before, _norm_buffers(net)) == []


# --- with_cp --------------------------------------------------------------------------------
def _step_results(net: nn.Module, x: Tensor):
    out = net(x)[0]
    grads = torch.autograd.grad(out.square().sum(), [p for p in net.parameters()
                                                     if p.requires_grad])
    return out.detach(), grads, _norm_buffers(net)


@pytest.mark.parametrize('block', sorted(BLOCK_CFGS))
def test_with_cp_keeps_the_norm_statistics_of_a_training_step(block):
    """The checkpoint's recomputation in the backward pass does not update the BatchNorm
    statistics a second time: outputs, gradients and statistics equal with_cp=False's."""
    results = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        net = _small(block, with_cp=with_cp).double().train()
        net.init_weights()
        torch.manual_seed(1)
        results.append(_step_results(net, torch.randn(4, 3, 8, 8, dtype=torch.float64)))
    (out, grads, stats), (out_cp, grads_cp, stats_cp) = results
    torch.testing.assert_close(out_cp, out)
    torch.testing.assert_close(grads_cp, grads)
    assert list(stats_cp) == list(stats)
    for key in stats:
        torch.testing.assert_close(stats_cp[key], stats[key], msg=key)
    assert int(stats_cp['layer1.0.bn1.num_batches_tracked']) == 1  # one update per step


def test_with_cp_checkpoints_the_first_block_after_frozen_stages():
    """With frozen_stages=1 the input of stage 2 needs no gradient, but its blocks' parameters
    do: the first of them is checkpointed too (less kept for backward), with the same
    gradients."""
    results = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        net = PDCResNetCIFAR(depth=None, stage_blocks=[1, 1], stage_channels=[8, 16],
                             hidden_channels=8, out_indices=(1, ), frozen_stages=1,
                             with_cp=with_cp).double().train()
        x = net.layer1(net.stem(torch.randn(4, 3, 8, 8, dtype=torch.float64)))
        assert not x.requires_grad
        results.append(run_keeping_count(lambda: net.layer2(x), net.layer2.parameters()))
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1])
    assert results[1][2] < results[0][2] / 4, (results[1][2], results[0][2])


# --- zero_init_residual --------------------------------------------------------------------
@pytest.mark.parametrize('first_degree_convs', [1, 2])
@pytest.mark.parametrize('block', sorted(BLOCK_CFGS))
def test_zero_init_residual_starts_every_block_as_its_shortcut(block, first_degree_convs):
    """zero_init_residual=True (default): after init_weights every block, whatever its degree
    terms (here with α = 0.5), outputs act(shortcut(x)); False: it does not."""
    cfg = dict(BLOCK_CFGS[block], first_degree_convs=first_degree_convs)
    if block == 'PDCBlock':
        cfg['scale_init'] = 0.0  # PDC's terms do not multiply the branch: α = 0 switches them
    for zero_init in (True, False):
        torch.manual_seed(0)
        net = PolyResNetCIFAR(**SMALL, block_cfg=cfg, zero_init_residual=zero_init,
                              hidden_channels=4 if block == 'PDCBlock' else None).double()
        net.init_weights()
        net.train()
        x = torch.randn(4, 8, 8, 8, dtype=torch.float64)
        with torch.no_grad():
            for blk in (net.layer1[0], net.layer2[0]):  # identity and projecting shortcut
                assert isinstance(blk, ResNetBlock)
                same = torch.allclose(blk(x), torch.relu(blk.shortcut(x)))
                assert same == zero_init, (block, first_degree_convs, zero_init)


# --- plugins and per-stage options: bad values name the field -------------------------------
@pytest.mark.parametrize('kwargs,match', [
    (dict(plugins=dict(cfg=dict(type='NonLocalBlock'))),
     r"^plugins must be a list of dicts \(each with a \"cfg\" key\), or None; got \{'cfg'"),
    (dict(plugins=[dict(cfg='NonLocalBlock')]),
     r"^plugins\[0\]\.cfg must be a dict with a \"type\" key .*got 'NonLocalBlock'$"),
    (dict(plugins=[dict(cfg=dict(reduction=4))]),
     r'^plugins\[0\]\.cfg must be a dict with a "type" key'),
    (dict(plugins=[dict(cfg=dict(type='PDCNonLocal3'), stages=(False, False, True),
                        stage_cfgs=[None, None, (4, 4)])]),
     r'^plugins\[0\]\.stage_cfgs\[2\] must be a dict of options for the plugin after stage 2, '
     r'or None; got \(4, 4\)$'),
    (dict(plugins=[dict(cfg=dict(type='PDCNonLocal3'), stages=(False, False, True),
                        stage_cfgs=dict(spatial_size=(2, 2)))]),
     r'^plugins\[0\]\.stage_cfgs must be a list with one dict \(or None\) per stage '
     r'\(3 stages\)'),
    (dict(plugins=[dict(cfg=dict(type='NonLocalBlock'), stages=(False, False, True),
                        stage_cfgs=[None, None, dict(in_channels=8)])]),
     r'^plugins\[0\]\.stage_cfgs\[2\]\.in_channels is set by the backbone'),
    (dict(stage_channels=16), r'^stage_channels must be a list with one int per stage '
                              r'\(3 stages\), got 16$'),
    (dict(strides=2), r'^strides must be a list with one int per stage \(3 stages\), got 2$'),
])
def test_bad_plugin_and_stage_options_name_the_field(kwargs, match):
    options = dict(SMALL, **kwargs)
    with pytest.raises(ValueError, match=match):
        PolyResNetCIFAR(**options)


def test_plugin_stage_cfgs_build_per_stage():
    net = PolyResNetCIFAR(**SMALL, plugins=[dict(
        cfg=dict(type='PDCNonLocal3'), stages=(False, True, True),
        stage_cfgs=[None, dict(spatial_size=(4, 4)), dict(spatial_size=(2, 2), reduction=8)])])
    assert (net.layer2[-1].spatial_size, net.layer2[-1].reduction) == ((4, 4), 4)
    assert (net.layer3[-1].spatial_size, net.layer3[-1].reduction) == ((2, 2), 8)
    assert net(torch.randn(2, 3, 8, 8))[0].shape == (2, 16, 2, 2)


# --- use_activation=False reaches the plugins -------------------------------------------------
@pytest.mark.parametrize('plugin', ['NonLocalBlock', 'DisentangledNonLocalBlock',
                                    'PDCNonLocal4'])
def test_no_activation_backbone_builds_its_plugins_without_softmax(plugin):
    """A backbone with use_activation=False builds every plugin that takes use_activation
    without it (no softmax): the same network as setting it on the plugin; a plugin's own
    use_activation=True is kept."""
    def build(plugin_options: dict) -> PolyResNetCIFAR:
        extra = dict(spatial_size=(2, 2)) if plugin == 'PDCNonLocal4' else {}
        torch.manual_seed(0)
        net = PolyResNetCIFAR(**SMALL, use_activation=False, plugins=[dict(
            cfg=dict(type=plugin, **extra, **plugin_options), stages=(False, False, True))])
        net.init_weights()
        with torch.no_grad():  # a plugin that contributes
            net.layer3[-1].conv_out.norm.weight.fill_(1.0)
        return net.eval()

    inherited, explicit, kept = build({}), build(dict(use_activation=False)), \
        build(dict(use_activation=True))
    assert not inherited.layer3[-1].use_softmax and not explicit.layer3[-1].use_softmax
    assert kept.layer3[-1].use_softmax and kept.layer3[-1].use_activation
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(inherited(x)[0], explicit(x)[0])
        assert not torch.allclose(kept(x)[0], explicit(x)[0])
    with_act = PolyResNetCIFAR(**SMALL, plugins=[dict(
        cfg=dict(type='NonLocalBlock'), stages=(False, False, True))])
    assert with_act.layer3[-1].use_softmax  # the default backbone keeps the softmax


def test_no_activation_backbone_builds_a_plugin_without_that_option_as_given():
    net = PolyResNetCIFAR(**SMALL, use_activation=False, plugins=[dict(
        cfg=dict(type='ContextBlock', ratio=0.25), stages=(False, False, True))])
    assert type(net.layer3[-1]).__name__ == 'ContextBlock'
    assert net(torch.randn(2, 3, 8, 8))[0].shape == (2, 16, 2, 2)


# --- every registered name, in both registries -------------------------------------------------
#: Minimal arguments and an input (B, C, H, W) for every model mmpoly registers.
REGISTERED = {
    'PolyResNet': (dict(depth=10, out_indices=(0, 3)), (1, 3, 64, 64),
                   [(1, 64, 16, 16), (1, 512, 2, 2)]),
    'PDCResNet': (dict(depth=10, hidden_channels=8, out_indices=(3, )), (1, 3, 64, 64),
                  [(1, 512, 2, 2)]),
    'PolyResNetCIFAR': (dict(depth=10, out_indices=(-1, )), (1, 3, 32, 32), [(1, 512, 4, 4)]),
    'PDCResNetCIFAR': (dict(depth=10, hidden_channels=8, out_indices=(0, 1)), (1, 3, 32, 32),
                       [(1, 64, 32, 32), (1, 128, 16, 16)]),
    'ResNetBlock': (dict(in_channels=8, out_channels=16, stride=2), (2, 8, 8, 8),
                    (2, 16, 4, 4)),
    'SEBlock': (dict(in_channels=8, out_channels=16, reduction=4), (2, 8, 8, 8),
                (2, 16, 8, 8)),
    'PiNetBlock': (dict(in_channels=8, out_channels=8, degree=3), (2, 8, 8, 8), (2, 8, 8, 8)),
    'PDCBlock': (dict(in_channels=8, out_channels=16, stride=2, degree=3), (2, 8, 8, 8),
                 (2, 16, 4, 4)),
    'NonLocalBlock': (dict(in_channels=8), (2, 8, 5, 3), (2, 8, 5, 3)),
    'DisentangledNonLocalBlock': (dict(in_channels=8), (2, 8, 5, 3), (2, 8, 5, 3)),
    'PDCNonLocal3': (dict(in_channels=8, spatial_size=(5, 3)), (2, 8, 5, 3), (2, 8, 5, 3)),
    'PDCNonLocal4': (dict(in_channels=8, spatial_size=(5, 3)), (2, 8, 5, 3), (2, 8, 5, 3)),
}


def test_every_registered_model_is_listed_here():
    from mmpretrain.registry import MODELS
    ours = sorted(name for name, cls in MODELS.module_dict.items()
                  if inspect.isclass(cls) and cls.__module__.startswith('mmpoly.'))
    assert ours == sorted(REGISTERED)


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmdet'])
@pytest.mark.parametrize('name', sorted(REGISTERED))
def test_every_registered_model_builds_and_runs_in_both_registries(name, scope):
    """The same class under the same name in mmpretrain's and mmdet's MODELS; built there (in
    that default scope, as a config of that codebase builds it), it initialises and gives the
    documented output shapes."""
    from mmdet.registry import MODELS as DET_MODELS
    from mmpretrain.registry import MODELS
    registry = MODELS if scope == 'mmpretrain' else DET_MODELS
    assert DET_MODELS.get(name) is MODELS.get(name)
    kwargs, in_shape, out_shape = REGISTERED[name]
    with DefaultScope.overwrite_default_scope(scope):
        model = registry.build(dict(type=name, **kwargs))
        model.init_weights()
        model.eval()
        with torch.no_grad():
            out = model(torch.randn(*in_shape))
    if isinstance(out, tuple):
        assert [tuple(o.shape) for o in out] == out_shape
    else:
        assert tuple(out.shape) == out_shape
    if isinstance(model, NonLocalBase):  # its default init survives init_weights: the identity
        x = torch.randn(*in_shape)
        with torch.no_grad():
            torch.testing.assert_close(model(x), x)
