"""Backbones and whole classifiers: ResNet equivalence, mmpretrain semantics (the configs'
parameter counts are pinned in test_model_zoo.py)."""
import pytest
import torch
from helpers import build_from_config, run_keeping_count
from mmengine.model.weight_init import PretrainedInit
from mmpretrain.registry import MODELS
from torch import nn

from mmpoly.models import PDCResNet, PDCResNetCIFAR, PolyResNetCIFAR
from mmpoly.models.backbones.pretrained import PretrainedMismatchError
from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import count_params

register_all_modules()


def _mmpretrain_resnet18_cifar(num_classes: int = 10) -> torch.nn.Module:
    return MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(type='ResNet_CIFAR', depth=18),
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=num_classes, in_channels=512)))


def test_resnet18_matches_mmpretrain_resnet_cifar():
    ours = build_from_config('resnet18_1xb128_cifar10.py')
    theirs = _mmpretrain_resnet18_cifar()
    assert count_params(ours) == count_params(theirs) == 11_173_962
    assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize('block_type', ['ResNetBlock', 'PDCBlock'])
def test_degree_one_network_loads_resnet_cifar_and_gives_same_outputs(block_type):
    theirs = _mmpretrain_resnet18_cifar().eval()
    theirs.init_weights()
    with torch.no_grad():  # non-trivial BN statistics
        for m in theirs.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.bias.data.normal_(0, 0.1)
    ours = MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(type='PDCResNetCIFAR', depth=18,
                          block_cfg=dict(type=block_type, **({'degree': 1}
                                                             if block_type == 'PDCBlock' else {}))),
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=512))).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, mode='tensor'), theirs(x, mode='tensor'))


def test_cifar_and_imagenet_stems_and_out_indices():
    cifar = PDCResNetCIFAR(depth=18, out_indices=(0, 1, 2, 3), hidden_channels=16)
    outs = cifar(torch.randn(2, 3, 32, 32))
    assert [o.shape for o in outs] == [(2, 64, 32, 32), (2, 128, 16, 16), (2, 256, 8, 8),
                                       (2, 512, 4, 4)]
    inet = PDCResNet(depth=18, out_indices=(1, 3), hidden_channels=[16, 32, 64, 128])
    outs = inet(torch.randn(1, 3, 224, 224))
    assert [o.shape for o in outs] == [(1, 128, 28, 28), (1, 512, 7, 7)]
    assert not hasattr(cifar, 'maxpool') and isinstance(inet.maxpool, torch.nn.MaxPool2d)


def test_stride_two_cifar_stem_halves_the_maps_before_the_first_stage():
    """``stem_stride=2`` changes only the stem convolution's stride: the same parameters, the
    stem's output is the stride-1 stem's output at the even positions, every map is halved."""
    kwargs = dict(depth=None, stage_blocks=[1, 1, 1], stage_channels=[16, 32, 64], in_channels=1,
                  strides=[1, 2, 2], hidden_channels=[8, 16, 32], out_indices=(0, 1, 2))
    dense = PDCResNetCIFAR(**kwargs).eval()
    strided = PDCResNetCIFAR(stem_stride=2, **kwargs).eval()
    strided.load_state_dict(dense.state_dict(), strict=True)
    assert dense.conv1.stride == (1, 1) and strided.conv1.stride == (2, 2)
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(strided.stem(x), dense.stem(x)[:, :, ::2, ::2])
        assert [o.shape for o in dense(x)] == [(2, 16, 28, 28), (2, 32, 14, 14), (2, 64, 7, 7)]
        assert [o.shape for o in strided(x)] == [(2, 16, 14, 14), (2, 32, 7, 7), (2, 64, 4, 4)]


def test_explicit_stages_in_channels_and_extra_stride_one_stage():
    net = PDCResNetCIFAR(depth=None, stage_blocks=[1, 1, 1, 1, 1],
                         stage_channels=[8, 16, 32, 64, 64], in_channels=1,
                         hidden_channels=[4, 4, 8, 8, 8], out_indices=(4, ))
    (out, ) = net(torch.randn(2, 1, 32, 32))
    assert out.shape == (2, 64, 4, 4)  # the fifth stage has stride 1
    assert [b.hidden_channels for layer in [net.layer1, net.layer5] for b in layer] == [4, 8]


def test_frozen_stages_and_norm_eval():
    net = PDCResNet(depth=18, frozen_stages=2, norm_eval=True, hidden_channels=8)
    net.train()
    assert not any(p.requires_grad for p in net.conv1.parameters())
    assert not any(p.requires_grad for p in net.layer2.parameters())
    assert all(p.requires_grad for p in net.layer3.parameters())
    assert not net.layer2.training
    bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and not any(m.training for m in bns)


def test_zero_init_residual():
    net = PolyResNetCIFAR(depth=18, zero_init_residual=True)
    net.init_weights()
    assert all(float(b.bn2.weight.abs().sum()) == 0 for layer in [net.layer1, net.layer4]
               for b in layer)
    net = PDCResNetCIFAR(depth=18, zero_init_residual=False, hidden_channels=8)
    net.init_weights()
    assert all(float(b.bn2.weight.abs().sum()) > 0 for b in net.layer1)


@pytest.mark.parametrize('block_type', ['ResNetBlock', 'SEBlock', 'PiNetBlock', 'PDCBlock'])
def test_with_cp_same_outputs_and_gradients_less_saved(block_type):
    """with_cp=True (mmpretrain's option) checkpoints every block: the same outputs and
    gradients in training, and autograd keeps fewer bytes for the backward pass."""
    extra = dict(degree=3, scale_init=0.5) if block_type == 'PDCBlock' else \
        dict(scale_init=0.5) if block_type == 'PiNetBlock' else \
        dict(reduction=4) if block_type == 'SEBlock' else {}
    nets = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        net = PolyResNetCIFAR(depth=None, stage_blocks=[1, 1], stage_channels=[8, 16],
                              block_cfg=dict(type=block_type, **extra), with_cp=with_cp,
                              out_indices=(1, )).double().train()
        nets.append(net)
    assert all(block.with_cp for block in nets[1].layer1) and not nets[0].layer2[0].with_cp
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    results = []
    for net in nets:
        results.append(run_keeping_count(lambda: net(x)[0], net.parameters()))
    torch.testing.assert_close(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1])
    assert results[1][2] < results[0][2] / 2, (results[1][2], results[0][2])
    with torch.no_grad():  # no checkpoint without autograd
        torch.testing.assert_close(nets[1](x)[0], nets[0](x)[0])


def test_no_activation_network_is_activation_free():
    net = PDCResNetCIFAR(depth=18, use_activation=False, hidden_channels=8)
    acts = (torch.nn.ReLU, torch.nn.LeakyReLU)
    assert not any(isinstance(m, acts) for m in net.modules())


@pytest.mark.parametrize('kwargs,field', [
    (dict(depth=19), 'depth'),
    (dict(depth=None, stage_blocks=[2, 0, 2, 2]), r'stage_blocks\[1\]'),
    (dict(depth=18, stage_blocks=[2, 2, 2, 1]), 'stage_blocks'),
    (dict(stage_channels=[64, 128, 256]), 'stage_channels'),
    (dict(stage_channels=[64, 128, -1, 512]), r'stage_channels\[2\]'),
    (dict(hidden_channels=[64, 64]), 'hidden_channels'),
    (dict(hidden_channels=0), r'hidden_channels\[0\]'),
    (dict(strides=[1, 2]), 'strides'),
    (dict(in_channels=0), 'in_channels'),
    (dict(out_indices=(4, )), 'out_indices'),
    (dict(frozen_stages=7), 'frozen_stages'),
    (dict(block_cfg=dict(type='NoSuchBlock')), 'block_cfg.type'),
    (dict(block_cfg=dict(type='PDCBlock', foo=1)), "unknown option 'foo'"),
    (dict(block_cfg=dict(type='PDCBlock', degree=0)), 'degree'),
    (dict(block_cfg=dict(type='PDCBlock', factor_kernel_size=2)), 'factor_kernel_size'),
    (dict(block_cfg=dict(type='PDCBlock', stride=2)), 'block_cfg.stride'),
    (dict(block_cfg=dict(type='ResNetBlock'), hidden_channels=8), 'hidden_channels'),
    (dict(with_cp='yes'), 'with_cp'),
    (dict(stem_stride=0), r'stem_stride must be one of \[1, 2\], got 0$'),
    (dict(stem_stride=3), r'stem_stride must be one of \[1, 2\], got 3$'),
    (dict(stem_stride=2.0), r'stem_stride must be one of \[1, 2\], got 2\.0$'),
    (dict(stem_stride=True), r'stem_stride must be one of \[1, 2\], got True$'),
    (dict(block_cfg=dict(type='PDCBlock', with_cp=True), with_cp=True),
     'block_cfg.with_cp is set by'),
    # depth: an int preset, also next to stage_blocks (where it used to be ignored)
    (dict(depth=18.0), r'depth must be one of \[10, 18, 34\] .*got 18\.0$'),
    (dict(depth=True), r'depth must be one of \[10, 18, 34\] .*got True$'),
    (dict(depth=50, stage_blocks=[3, 4, 6, 3]), r'depth must be one of .*got 50$'),
    (dict(depth=34, stage_blocks=[3, 4, 6, 2]),
     r'stage_blocks=\[3, 4, 6, 2\] contradicts depth=34'),
    (dict(frozen_stages=True), r'frozen_stages must be an int in \[-1, 4\], got True$'),
    (dict(frozen_stages=1.0), r'frozen_stages must be an int in \[-1, 4\], got 1\.0$'),
    # out_indices: the message shows the value given
    (dict(out_indices=(1, -5)),
     r'out_indices must be .* in \[-4, 3\] \(4 stages\), got \(1, -5\)$'),
    (dict(out_indices=()), r'out_indices must be .*non-empty.*got \(\)$'),
    (dict(out_indices=True), r'out_indices must be .*got True$'),
    (dict(out_indices=(3, -1)), r'out_indices=\(3, -1\) names stage\(s\) \[3\] more than once'),
    # layer configs: dicts whose type mmcv can build, act_cfg also without activations
    (dict(norm_cfg=dict(type='BNN')),
     r"backbone\.norm_cfg\.type='BNN': not a norm type registered in the MODELS registry that "
     r"mmcv\.cnn\.build_norm_layer searches .*; close matches: \['BN'"),
    (dict(norm_cfg=None), r"backbone\.norm_cfg=None: must be a dict with a \"type\" key "
                          r"\(e\.g\. dict\(type='BN'\)\), as mmcv"),
    (dict(norm_cfg=dict(type='none')), r"backbone\.norm_cfg\.type='none': not a norm type"),
    (dict(norm_cfg='BN'), r"backbone\.norm_cfg='BN': must be a dict"),
    (dict(conv_cfg=dict(type='Conv2D')),
     r"backbone\.conv_cfg\.type='Conv2D': not a conv type .*close matches: \['Conv2d'"),
    (dict(conv_cfg='Conv2d'),
     r"backbone\.conv_cfg='Conv2d': must be a dict .*dict\(type='Conv2d'\)\) or None"),
    # registered, but not 2-d convolutions: 'deconv' built a net whose maps grew (16, 31, 61,
    # 121 instead of 16, 8, 4, 2) without a word; Conv1d / Conv3d failed at the first forward
    (dict(conv_cfg=dict(type='deconv')),
     r"backbone\.conv_cfg=\{'type': 'deconv'\}: ConvTranspose2d is not a 2-d convolution of "
     r"\(B, C, H, W\) maps; use 'Conv2d'"),
    (dict(conv_cfg=dict(type='Conv1d')), r"backbone\.conv_cfg=.*: Conv1d is not a 2-d conv"),
    (dict(conv_cfg=dict(type='Conv3d')), r"backbone\.conv_cfg=.*: Conv3d is not a 2-d conv"),
    (dict(act_cfg=dict(type='ReLu')),
     r"backbone\.act_cfg\.type must be 'none' or an activation type .*got 'ReLu'; close "
     r"matches: \['ReLU'"),
    (dict(act_cfg=dict(type='ReLu'), use_activation=False), r"backbone\.act_cfg\.type .*'ReLu'"),
    (dict(act_cfg=dict(), use_activation=False), r'backbone\.act_cfg must be'),
    # PiNetBlock: a scale_init that learn_scale=False would leave unused
    (dict(block_cfg=dict(type='PiNetBlock', learn_scale=False, scale_init=0.5)),
     r'scale_init=0\.5 is unused with learn_scale=False, which fixes α = 1'),
    (dict(block_cfg=dict(type='PiNetBlock', learn_scale=False, scale_init=0.0)),
     r'scale_init=0\.0 is unused with learn_scale=False'),
])
def test_invalid_backbone_options_name_the_option(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PDCResNetCIFAR(**kwargs)


def test_unknown_backbone_option_is_an_error():
    with pytest.raises(TypeError, match='planes_ho'):
        MODELS.build(dict(type='PDCResNetCIFAR', planes_ho=64))


@pytest.mark.parametrize('block_type', ['ResNetBlock', 'SEBlock', 'PiNetBlock', 'PDCBlock'])
@pytest.mark.parametrize('kwargs,match', [
    (dict(norm_cfg=dict(type='BNN')), r"^norm_cfg\.type='BNN': not a norm type"),
    (dict(conv_cfg=dict(type='Conv2dd')), r"^conv_cfg\.type='Conv2dd': not a conv type"),
    (dict(act_cfg=dict(type='ReLu'), use_activation=False), r"^act_cfg\.type .*got 'ReLu'"),
    (dict(act_cfg=dict(type='ReLu')), r"^act_cfg\.type .*got 'ReLu'"),
])
def test_block_layer_configs_are_checked_even_without_activations(block_type, kwargs, match):
    with pytest.raises(ValueError, match=match):
        MODELS.build(dict(type=block_type, in_channels=8, out_channels=8, **kwargs))


def _pinet(**kwargs) -> torch.nn.Module:
    return MODELS.build(dict(type='PiNetBlock', in_channels=4, out_channels=4, **kwargs))


def test_pinet_scale_init_is_refused_only_where_unused():
    """learn_scale=False fixes α = 1: a scale_init other than 1 would be silently unused. The
    defaults are unchanged: a learnt α from 0, or no α at all."""
    with pytest.raises(ValueError, match=r'scale_init=2 is unused with learn_scale=False'):
        _pinet(learn_scale=False, scale_init=2)
    assert float(_pinet().scale) == 0.0 and float(_pinet(scale_init=0.5).scale) == 0.5
    assert _pinet(learn_scale=False).scale is None
    assert _pinet(learn_scale=False, scale_init=1.0).scale is None


def test_pinet_projection_kernel_size_is_refused_only_where_unused():
    with pytest.raises(ValueError, match=r'projection_kernel_size=3 is unused with '
                                         r'num_input_convs=0 and num_projection_convs=0'):
        _pinet(num_projection_convs=0, projection_kernel_size=3)
    assert not list(_pinet(num_projection_convs=0).input_convs)  # the default kernel is fine

    def kernels(module: nn.Module) -> set:
        return {m.kernel_size for m in module.modules() if isinstance(m, nn.Conv2d)}

    block = _pinet(num_projection_convs=0, num_input_convs=1, projection_kernel_size=3)
    assert kernels(block.input_convs) == {(3, 3)} and not kernels(block.projection)
    block = _pinet(projection_kernel_size=3)
    assert kernels(block.projection) == {(3, 3)} and not kernels(block.input_convs)


SMALL = dict(depth=None, stage_blocks=[1, 1], stage_channels=[8, 16], out_indices=(1, ))


@pytest.mark.parametrize('kwargs', [
    dict(norm_cfg=dict(type='BN2d', requires_grad=True)),
    dict(norm_cfg=dict(type=nn.BatchNorm2d)),
    dict(conv_cfg=dict(type='Conv2d')),
    dict(conv_cfg=dict(type=nn.Conv2d)),
    dict(act_cfg='ReLU'),
    dict(act_cfg=dict(type=nn.ReLU)),
])
def test_layer_configs_as_type_names_build_the_same_backbone(kwargs):
    """mmcv's aliases, classes and (for act_cfg, as in the blocks) bare type names build the
    same layers as the defaults (BN, Conv2d, ReLU): equal state dicts and outputs."""
    nets = []
    for options in ({}, kwargs):
        torch.manual_seed(0)
        net = PDCResNetCIFAR(hidden_channels=4, **SMALL, **options)
        net.init_weights()
        nets.append(net.eval())
    assert [type(m) for m in nets[0].modules()] == [type(m) for m in nets[1].modules()]
    ref, other = (net.state_dict() for net in nets)
    assert list(ref) == list(other)
    for key in ref:
        torch.testing.assert_close(other[key], ref[key])
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(nets[1](x), nets[0](x))


PRETRAINED_FORMS = {
    'dict': lambda path: dict(type='Pretrained', checkpoint=path),
    'scoped': lambda path: dict(type='mmengine.Pretrained', checkpoint=path),
    'class': lambda path: dict(type=PretrainedInit, checkpoint=path),
    'list': lambda path: [dict(type='Pretrained', checkpoint=path)],
    'list-after-kaiming': lambda path: [dict(type='Kaiming', layer=['Conv2d']),
                                        dict(type='mmengine.Pretrained', checkpoint=path)],
    'list-of-class': lambda path: [dict(type=PretrainedInit, checkpoint=path, prefix=None)],
}


@pytest.mark.parametrize('form', sorted(PRETRAINED_FORMS))
def test_pretrained_load_is_strict_in_every_init_cfg_form(form, tmp_path):
    """mmengine loads Pretrained non-strictly (it only warns); mmpoly backbones load strictly
    whichever of mmengine's spellings the init_cfg uses."""
    torch.manual_seed(1)
    source = PolyResNetCIFAR(**SMALL)
    with torch.no_grad():
        for tensor in source.state_dict().values():
            if tensor.is_floating_point():
                tensor.normal_()
    state = source.state_dict()
    torch.save(state, tmp_path / 'good.pth')
    torch.save(dict(state, **{'extra.weight': torch.zeros(1)}), tmp_path / 'extra.pth')
    torch.save({k: v for k, v in state.items() if k != 'conv1.weight'}, tmp_path / 'missing.pth')
    for name, match in (('extra', r'unexpected 1 \(extra\.weight\)'),
                        ('missing', r'missing 1 \(conv1\.weight\)')):
        init_cfg = PRETRAINED_FORMS[form](str(tmp_path / f'{name}.pth'))
        net = PolyResNetCIFAR(**SMALL, init_cfg=init_cfg)
        with pytest.raises(PretrainedMismatchError, match=match):
            net.init_weights()
    net = PolyResNetCIFAR(**SMALL, init_cfg=PRETRAINED_FORMS[form](str(tmp_path / 'good.pth')))
    net.init_weights()
    loaded = net.state_dict()
    assert list(loaded) == list(state)
    for key in state:
        torch.testing.assert_close(loaded[key], state[key])


def test_pretrained_counts_loaded_and_missing_tensors_alike(tmp_path, monkeypatch):
    """The log line of a load and the error of a checkpoint that fits in nothing count the same
    tensors: parameters and running statistics, not BatchNorm's step counters (it said "loaded
    all 432" where a foreign file was "missing 364")."""
    from mmpoly.models.backbones import pretrained
    logged = []
    monkeypatch.setattr(pretrained, 'print_log', lambda message, **_: logged.append(message))
    source = PolyResNetCIFAR(**SMALL)
    state = source.state_dict()
    counters = [k for k in state if k.endswith('num_batches_tracked')]
    expected = len(list(source.parameters())) + 2 * len(counters)  # + running mean and var
    assert counters and expected == len(state) - len(counters)
    torch.save({k: v for k, v in state.items() if k not in counters}, tmp_path / 'good.pth')
    net = PolyResNetCIFAR(**SMALL, init_cfg=dict(type='Pretrained', checkpoint=str(
        tmp_path / 'good.pth')))
    net.init_weights()
    assert f'Pretrained: loaded all {expected} backbone tensors of PolyResNetCIFAR' in logged[-1]
    torch.save({'other.' + k: v for k, v in state.items()}, tmp_path / 'foreign.pth')
    net = PolyResNetCIFAR(**SMALL, init_cfg=dict(type='Pretrained', checkpoint=str(
        tmp_path / 'foreign.pth')))
    with pytest.raises(PretrainedMismatchError, match=rf'missing {expected} \('):
        net.init_weights()


def test_pretrained_checkpoint_under_home_is_found(tmp_path, monkeypatch):
    """'~/...' is the user's home, as mmengine's loader reads it: the backbone's own check and
    the start-up checks used to report the existing file as missing."""
    from mmengine.config import Config

    from mmpoly.utils import startup
    monkeypatch.setenv('HOME', str(tmp_path))
    source = PolyResNetCIFAR(**SMALL)
    torch.save(source.state_dict(), tmp_path / 'backbone.pth')
    net = PolyResNetCIFAR(**SMALL, init_cfg=dict(type='Pretrained', checkpoint='~/backbone.pth'))
    net.init_weights()
    for key, value in source.state_dict().items():
        torch.testing.assert_close(net.state_dict()[key], value)
    startup.check_pretrained_backbone(Config(dict(model=dict(backbone=dict(
        init_cfg=dict(type='Pretrained', checkpoint='~/backbone.pth'))))))
    startup.check_checkpoint('~/backbone.pth', 'load_from', 'fix it')
    with pytest.raises(startup.StartupError, match="load_from '~/other.pth' does not exist"):
        startup.check_checkpoint('~/other.pth', 'load_from', 'fix it')


@pytest.mark.parametrize('init_cfg', [
    dict(type='Pretrained', checkpoint='a.pth'),
    [dict(type='mmengine.Pretrained', checkpoint='a.pth')],
    dict(type=PretrainedInit, checkpoint='a.pth'),
])
def test_pretrained_in_a_block_or_twice_is_refused(init_cfg):
    with pytest.raises(ValueError, match=r"block_cfg\.init_cfg=.*: a Pretrained init inside a "
                                         r"block .*put it on the backbone: init_cfg=dict\("
                                         r"type='Pretrained'"):
        PolyResNetCIFAR(**SMALL, block_cfg=dict(type='ResNetBlock', init_cfg=init_cfg))
    twice = [dict(type='Kaiming', layer=['Conv2d']), dict(type='Pretrained', checkpoint='b.pth'),
             init_cfg if isinstance(init_cfg, dict) else init_cfg[0]]
    with pytest.raises(ValueError, match=r'^backbone\.init_cfg has 2 Pretrained inits '
                                         r'\(backbone\.init_cfg\[1\], backbone\.init_cfg\[2\]\); '
                                         r'one checkpoint initialises the backbone'):
        PolyResNetCIFAR(**SMALL, init_cfg=twice)


@pytest.mark.parametrize('where', ['cfg', 'stage_cfgs'])
def test_pretrained_in_a_plugin_is_refused(where):
    """mmengine would load the whole checkpoint into the plugin, non-strictly; refused for a plugin
    of any stage (also one the plugin's ``stages`` skip), with the backbone's way named."""
    init_cfg = [dict(type='mmengine.Pretrained', checkpoint='a.pth')]
    plugin = dict(cfg=dict(type='NonLocalBlock'), stages=(False, True))
    field = r'plugins\[0\]\.cfg'
    if where == 'cfg':
        plugin['cfg']['init_cfg'] = init_cfg
    else:
        plugin['stage_cfgs'] = [dict(init_cfg=init_cfg), None]
        field = r'plugins\[0\]\.stage_cfgs\[0\]'
    message = (field + r"\.init_cfg=.*: a Pretrained init inside a plugin .*put it on the "
               r"backbone: init_cfg=dict\(type='Pretrained'")
    with pytest.raises(ValueError, match=message):
        PolyResNetCIFAR(**SMALL, plugins=[plugin])
    plugin.pop('stage_cfgs', None)
    plugin['cfg'].pop('init_cfg', None)
    built = PolyResNetCIFAR(**SMALL, plugins=[plugin])  # the same plugin without it builds
    assert sum(type(m).__name__ == 'NonLocalBlock' for m in built.modules()) == 1


@pytest.mark.parametrize('init_cfg, kept', [
    ("dict(type='Pretrained', checkpoint='missing.pth')", None),
    ("[dict(type='Kaiming', layer='Conv2d'), dict(type='mmengine.Pretrained', "
     "checkpoint='missing.pth')]", [dict(type='Kaiming', layer='Conv2d')]),
    ("[dict(type='Pretrained', checkpoint='missing.pth')]", None),
    ("dict(type='Kaiming', layer='Conv2d')", dict(type='Kaiming', layer='Conv2d')),
])
def test_standalone_model_config_drops_the_pretrained_init_in_every_form(
        init_cfg, kept, tmp_path):
    """The analysis tools and the exporter build a config's model without reading its backbone
    checkpoint, whichever form the Pretrained init has; other inits stay."""
    from mmpoly.utils.complexity import build_model, standalone_model_config
    path = tmp_path / 'cfg.py'
    path.write_text(
        "model = dict(type='ImageClassifier', backbone=dict(type='PolyResNetCIFAR', depth=None, "
        f"stage_blocks=[1, 1], stage_channels=[8, 16], out_indices=(1, ), init_cfg={init_cfg}), "
        "neck=dict(type='GlobalAveragePooling'), head=dict(type='LinearClsHead', "
        "num_classes=10, in_channels=16, loss=dict(type='CrossEntropyLoss')))\n")
    cfg = standalone_model_config(str(path))
    got = cfg.model.backbone.init_cfg
    assert (got if got is None or isinstance(got, dict) else [dict(e) for e in got]) == kept
    build_model(cfg).init_weights()  # (the checkpoint file does not exist)
