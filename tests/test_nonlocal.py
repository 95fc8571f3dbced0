"""The non-local family (NL, DNL, PDC-NL[3], PDC-NL[4]): equations, counts, degree, plugins."""
import functools
import math

import pytest
import torch
from helpers import CONFIGS, build_from_config
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

from mmpoly.analysis import numerical_degree
from mmpoly.models import (DisentangledNonLocalBlock, NonLocalBlock, PDCNonLocal3, PDCNonLocal4,
                           PolyResNetCIFAR)
from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import count_params
from mmpoly.zoo.nonlocal_family import NONLOCAL_ROWS

register_all_modules()

CIFAR_CONFIGS = {  # whole CIFAR-100 classifier, trainable parameters
    'nl_resnet18_1xb128_cifar100.py': 11_570_932,
    'dnl_resnet18_1xb128_cifar100.py': 11_571_896,
    'pdc-nl3_resnet18_1xb128_cifar100.py': 11_869_732,
    'pdc-nl4_resnet18_1xb128_cifar100.py': 12_045_012,
}
IMAGENET_CONFIGS = {  # whole ImageNet classifier (measured)
    'nl_resnet18_8xb32_in1k.py': 12_019_304,
    'pdc-nl3_pdc-resnet18_8xb32_in1k.py': 11_395_227,
    'pdc-nl4_pdc-resnet18_8xb32_in1k.py': 11_547_477,
}


#: Each config's model is built once per session (the ImageNet ones take seconds).
build_cached = functools.lru_cache(maxsize=None)(build_from_config)


def random_double(module: torch.nn.Module, std: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """float64 copy with every parameter random and non-zero (conv_out included)."""
    gen = torch.Generator().manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * std)
    return module.eval()


# ------------------------------------------------------------------------------------------
# Independent computations of the equations, from the weights only (Z: (B, P, c), P = HW).
def zmat(x):
    return x.flatten(2).transpose(1, 2)  # (B, P, c)


def lin(conv_module, z):
    """Z C + b for a 1×1 conv: (B, P, c_in) -> (B, P, c_out)."""
    weight = conv_module.conv.weight[:, :, 0, 0]
    return torch.einsum('oc,bpc->bpo', weight, z) + conv_module.conv.bias


def normalise(scores, softmax):
    return scores.softmax(-1) if softmax else scores / scores.shape[-1]


def output(block, x, y):
    """x + conv_out(y), y (B, P, c/r), back to (B, c, H, W)."""
    return x + lin(block.conv_out, y).transpose(1, 2).reshape(x.shape)


def reference_nl(block, x, softmax):
    z = zmat(x)
    theta, phi, g = lin(block.theta, z), lin(block.phi, z), lin(block.g, z)
    d = theta.shape[-1]
    scores = torch.einsum('bpd,bqd->bpq', theta, phi)
    if softmax:
        scores = scores / math.sqrt(d)
    return output(block, x, torch.einsum('bpq,bqd->bpd', normalise(scores, softmax), g))


def reference_dnl(block, x, softmax, temperature):
    z = zmat(x)
    theta, phi, g = lin(block.theta, z), lin(block.phi, z), lin(block.g, z)
    d = theta.shape[-1]
    theta = theta - theta.mean(1, keepdim=True)  # μ_q
    phi = phi - phi.mean(1, keepdim=True)  # μ_k
    scores = torch.einsum('bpd,bqd->bpq', theta, phi)
    if softmax:
        scores = scores / math.sqrt(d) / temperature
    pairwise = torch.einsum('bpq,bqd->bpd', normalise(scores, softmax), g)
    mask = normalise(lin(block.conv_mask, z)[..., 0], softmax)  # (B, P) over positions
    unary = torch.einsum('bq,bqd->bd', mask, g)[:, None, :]  # broadcast to every position
    return output(block, x, pairwise + unary)


def reference_pdc_nl3_inner(block, x, softmax):
    z = zmat(x)
    theta, phi, g = lin(block.theta, z), lin(block.phi, z), lin(block.g, z)
    d = theta.shape[-1]
    scores = torch.einsum('bpd,bqd->bpq', theta, phi)
    if softmax:
        scores = scores / math.sqrt(d)
    third = torch.einsum('bpq,bqd->bpd', normalise(scores, softmax), g)
    second = torch.einsum('bpq,bqd->bpd', normalise(lin(block.c4, z), softmax), lin(block.c5, z))
    first = lin(block.c6, z)
    return third + second + first


def reference_pdc_nl3(block, x, softmax):
    return output(block, x, reference_pdc_nl3_inner(block, x, softmax))


def reference_pdc_nl4(block, x, softmax):
    z = zmat(x)
    y3 = lin(block.conv_out, reference_pdc_nl3_inner(block, x, softmax))  # (B, P, c)
    pooled = lin(block.c7, z).mean(1)  # p(Z C7): (B, c/r)
    gate = torch.einsum('od,bd->bo', block.c8.conv.weight[:, :, 0, 0], pooled) + block.c8.conv.bias
    out = y3 + y3 * gate[:, None, :]
    return x + out.transpose(1, 2).reshape(x.shape)


# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize('softmax', [True, False])
def test_nl_matches_equation(softmax):
    block = random_double(NonLocalBlock(12, reduction=3, use_softmax=softmax, norm_cfg=None))
    x = torch.randn(2, 12, 5, 6, dtype=torch.float64)
    torch.testing.assert_close(block(x), reference_nl(block, x, softmax), rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize('softmax', [True, False])
def test_dnl_matches_equation(softmax):
    temperature = 0.5 if softmax else 0.05  # without the softmax it has no effect: refused
    block = random_double(DisentangledNonLocalBlock(12, reduction=4, use_softmax=softmax,
                                                    norm_cfg=None, temperature=temperature))
    x = torch.randn(2, 12, 4, 5, dtype=torch.float64)
    torch.testing.assert_close(block(x), reference_dnl(block, x, softmax, temperature),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('softmax', [True, False])
def test_pdc_nl3_matches_equation(softmax):
    block = random_double(PDCNonLocal3(8, spatial_size=(3, 5), reduction=2, use_softmax=softmax,
                                       norm_cfg=None))
    x = torch.randn(2, 8, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(block(x), reference_pdc_nl3(block, x, softmax), rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize('softmax', [True, False])
def test_pdc_nl4_matches_equation(softmax):
    block = random_double(PDCNonLocal4(8, spatial_size=(4, 4), reduction=4, use_softmax=softmax,
                                       norm_cfg=None))
    x = torch.randn(2, 8, 4, 4, dtype=torch.float64)
    torch.testing.assert_close(block(x), reference_pdc_nl4(block, x, softmax), rtol=1e-10,
                               atol=1e-10)


def test_nl_equals_mmcv_nonlocal2d():
    from mmcv.cnn import NonLocal2d
    for softmax, mode in [(True, 'embedded_gaussian'), (False, 'dot_product')]:
        ours = random_double(NonLocalBlock(16, reduction=4, use_softmax=softmax, norm_cfg=None))
        theirs = NonLocal2d(16, reduction=4, mode=mode).double().eval()
        theirs.load_state_dict(ours.state_dict(), strict=True)
        x = torch.randn(2, 16, 6, 6, dtype=torch.float64)
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------------
def nl_params(c, r):
    return 4 * c * c // r + 3 * c // r + c


def pdc_nl3_params(c, r, hw):
    return 5 * (c * c // r + c // r) + (c * c // r + c) + (c * hw + hw)


@pytest.mark.parametrize('c,r,hw', [(64, 4, 1024), (128, 4, 256), (512, 4, 16), (60, 2, 49)])
def test_parameter_formulas(c, r, hw):
    side = int(math.isqrt(hw))
    # formulas with a biased conv_out (norm_cfg=None)
    assert count_params(NonLocalBlock(c, reduction=r, norm_cfg=None)) == nl_params(c, r)
    assert count_params(DisentangledNonLocalBlock(c, reduction=r, norm_cfg=None)) == \
        nl_params(c, r) + c + 1
    assert count_params(PDCNonLocal3(c, (side, side), reduction=r, norm_cfg=None)) == \
        pdc_nl3_params(c, r, hw)
    assert count_params(PDCNonLocal4(c, (side, side), reduction=r, norm_cfg=None)) == \
        pdc_nl3_params(c, r, hw) + 2 * c * c // r + c // r + c
    # the default BN on conv_out: no conv bias (-c), BN weight and bias (+2c)
    for block in (NonLocalBlock(c, reduction=r), DisentangledNonLocalBlock(c, reduction=r),
                  PDCNonLocal3(c, (side, side), reduction=r),
                  PDCNonLocal4(c, (side, side), reduction=r)):
        unnormed = type(block)(**{**_args(block), 'norm_cfg': None})
        assert count_params(block) == count_params(unnormed) + c, type(block).__name__
        assert block.conv_out.with_norm and block.conv_out.conv.bias is None


def _args(block) -> dict:
    args = dict(in_channels=block.in_channels, reduction=block.reduction)
    if hasattr(block, 'spatial_size'):
        args['spatial_size'] = block.spatial_size
    return args


def test_pdc_nl3_per_block_count():
    assert count_params(PDCNonLocal3(64, (32, 32), reduction=4, norm_cfg=None)) == 72_848


@pytest.mark.parametrize('config,expected', list(CIFAR_CONFIGS.items()) +
                         list(IMAGENET_CONFIGS.items()))
def test_nonlocal_config_parameter_counts(config, expected):
    assert count_params(build_cached(config)) == expected


def test_paper_rows():
    assert {row.table for row in NONLOCAL_ROWS} == {'T-NLC', 'T-NLI'}
    counts = {**CIFAR_CONFIGS, **IMAGENET_CONFIGS}
    assert sorted(row.config for row in NONLOCAL_ROWS) == sorted(counts)
    for row in NONLOCAL_ROWS:
        assert (CONFIGS / row.config).is_file()
        measured = round(counts[row.config] / 1e6, row.params_digits)
        assert (measured == row.paper_params) == row.claimed_match, row
        assert row.note and row.paper_flops is None and row.params_digits == 2
        expected_size = (32, 32) if row.table == 'T-NLC' else (224, 224)
        assert row.input_size == expected_size


# ------------------------------------------------------------------------------------------
def _degree(block, shape, max_degree=5, seed=1):
    block = random_double(block, std=0.5, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(shape, generator=gen, dtype=torch.float64)
    d = torch.randn(shape, generator=gen, dtype=torch.float64)
    return numerical_degree(block, x0, d, max_degree)


@pytest.mark.parametrize('block,degree', [
    (NonLocalBlock(8, reduction=2, use_softmax=False), 3),
    (NonLocalBlock(8, reduction=2, use_activation=False), 3),  # activation-free = no softmax
    (DisentangledNonLocalBlock(8, reduction=2, use_softmax=False), 3),
    (PDCNonLocal3(8, (4, 4), reduction=2, use_softmax=False), 3),
    (PDCNonLocal4(8, (4, 4), reduction=2, use_softmax=False), 4),
    (PDCNonLocal4(8, (4, 4), reduction=2, use_activation=False), 4),
])
def test_without_softmax_the_block_is_a_polynomial_of_its_degree(block, degree):
    assert block.degree == degree
    assert _degree(block, (1, 8, 4, 4)) == degree


@pytest.mark.parametrize('block', [NonLocalBlock(8, reduction=2),
                                   PDCNonLocal4(8, (4, 4), reduction=2)])
def test_with_softmax_the_block_is_not_a_low_degree_polynomial(block):
    assert _degree(block, (1, 8, 4, 4)) is None


def test_numerical_degree_helper():
    x0, d = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    assert numerical_degree(lambda x: x.sum() ** 2 * x + 1, x0, d, 4) == 3
    assert numerical_degree(lambda x: torch.ones(3, dtype=torch.float64), x0, d, 2) == 0
    assert numerical_degree(torch.exp, x0, d, 3) is None


# ------------------------------------------------------------------------------------------
def test_default_init_is_identity_and_survives_the_backbone_init():
    net = PolyResNetCIFAR(depth=None, stage_blocks=[1, 1, 1, 1], plugins=[
        dict(cfg=dict(type='NonLocalBlock', reduction=4), stages=(False, True, False, False)),
        dict(cfg=dict(type='PDCNonLocal4', reduction=4), stages=(False, False, False, True),
             stage_cfgs=[None, None, None, dict(spatial_size=(4, 4))])
    ])
    net.init_weights()  # Kaiming for every conv first, then each plugin's own init
    nl, pdc = net.layer2[-1], net.layer4[-1]
    assert isinstance(nl, NonLocalBlock) and isinstance(pdc, PDCNonLocal4)
    with torch.no_grad():
        for block in (nl, pdc):  # default: conv_out -> BN, whose γ is zero
            assert block.conv_out.conv.bias is None
            assert float(block.conv_out.norm.weight.abs().sum()) == 0
            assert float(block.conv_out.conv.weight.abs().sum()) > 0
            for factor in block.input_factors():
                assert 0.005 < float(factor.conv.weight.std()) < 0.015
                assert float(factor.conv.bias.abs().sum()) == 0
        x = torch.randn(2, 128, 16, 16)
        torch.testing.assert_close(nl(x), x)
        block = NonLocalBlock(16, norm_cfg=None)  # mmcv's layout: a zero conv with a bias
        assert not block.conv_out.with_norm
        assert float(block.conv_out.conv.weight.abs().sum()) == 0


def test_own_init_cfg_applies_over_the_default_init(tmp_path):
    """mmengine runs a module's init_cfg before its ConvModules' own init_weights (Kaiming,
    norm weight 1), which overwrote it; the block applies it over its default init."""
    block = NonLocalBlock(8, reduction=2, init_cfg=dict(type='Normal', std=0.02, layer='Conv2d'))
    block.init_weights()
    with torch.no_grad():
        for factor in block.input_factors():  # 32 weights each: std 0.02 within a factor 2
            assert 0.01 < float(factor.conv.weight.std()) < 0.04
        assert float(block.conv_out.norm.weight.abs().sum()) == 0  # not covered: still the gate
        x = torch.randn(2, 8, 4, 4)
        assert torch.equal(block(x), x)
    block = PDCNonLocal3(8, reduction=2, spatial_size=(4, 4),
                         init_cfg=dict(type='Constant', val=0.5, layer='BatchNorm2d'))
    block.init_weights()
    assert torch.equal(block.conv_out.norm.weight.detach(), torch.full((8, ), 0.5))
    torch.save(block.state_dict(), tmp_path / 'block.pth')
    loaded = PDCNonLocal3(8, reduction=2, spatial_size=(4, 4), init_cfg=[
        dict(type='Pretrained', checkpoint=str(tmp_path / 'block.pth')),
        dict(type='Normal', std=3.0, layer='Conv2d')])  # Pretrained wins, as in mmengine
    loaded.init_weights()
    for key, value in block.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


@pytest.mark.parametrize('config', list(CIFAR_CONFIGS))
def test_cifar_forward_backward(config):
    model = build_cached(config)
    model.train()
    x = torch.randn(2, 3, 32, 32)
    samples = [DataSample().set_gt_label(i) for i in (3, 7)]
    loss = model(x, samples, mode='loss')['loss']
    assert torch.isfinite(loss)
    model.zero_grad()
    loss.backward()
    plugins = [m for m in model.modules() if hasattr(m, 'conv_out')]
    assert len(plugins) == 4 and [p.in_channels for p in plugins] == [64, 128, 256, 512]
    for plugin in plugins:  # the zero BN γ gets the gradient first (the conv's is zero)
        grad = plugin.conv_out.norm.weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


@pytest.mark.parametrize('config,stages', [
    ('nl_resnet18_8xb32_in1k.py', (2, 3)),
    ('pdc-nl3_pdc-resnet18_8xb32_in1k.py', (1, 2, 3)),
    ('pdc-nl4_pdc-resnet18_8xb32_in1k.py', (1, 2, 3)),
])
def test_imagenet_backbone_forward_backward(config, stages):
    backbone = build_cached(config).backbone
    backbone.train()
    for module in (backbone.conv1, backbone.norm1, backbone.layer1):  # no plugin: keep it fast
        module.requires_grad_(False)
    found = [i for i, name in enumerate(backbone.res_layers)
             if hasattr(getattr(backbone, name)[-1], 'conv_out')]
    assert tuple(found) == stages
    (out, ) = backbone(torch.randn(1, 3, 224, 224))
    assert out.shape[2:] == (7, 7)
    out.square().mean().backward()
    last = getattr(backbone, backbone.res_layers[-1])[-1]
    assert last.conv_out.norm.weight.grad.abs().sum() > 0


def test_plugins_in_an_mmdet_backbone():
    import mmpoly.models  # noqa: F401
    from mmdet.registry import MODELS as DET_MODELS
    backbone = DET_MODELS.build(
        dict(type='mmpretrain.PDCResNet', depth=18, hidden_channels=8, out_indices=(0, 1, 2, 3),
             plugins=[
                 dict(cfg=dict(type='NonLocalBlock', reduction=4),
                      stages=(False, False, True, False)),
                 dict(cfg=dict(type='PDCNonLocal4', reduction=4),
                      stages=(False, False, False, True),
                      stage_cfgs=[None, None, None, dict(spatial_size=(4, 4))]),
             ]))
    backbone.init_weights()
    outs = backbone(torch.randn(1, 3, 128, 128))
    assert [tuple(o.shape) for o in outs] == [(1, 64, 32, 32), (1, 128, 16, 16),
                                              (1, 256, 8, 8), (1, 512, 4, 4)]
    assert isinstance(backbone.layer3[-1], NonLocalBlock)
    assert isinstance(backbone.layer4[-1], PDCNonLocal4)


# ------------------------------------------------------------------------------------------
def test_wrong_feature_map_size_names_expected_and_actual():
    block = PDCNonLocal3(16, spatial_size=(8, 8))
    with pytest.raises(ValueError, match=r'PDCNonLocal3 was built for spatial_size \(8, 8\) '
                       r'\(C4 maps to 64 positions\) but got a 16x16 feature map'):
        block(torch.randn(1, 16, 16, 16))
    with pytest.raises(ValueError, match=r'PDCNonLocal4 .*\(7, 7\).*8x8'):
        PDCNonLocal4(16, spatial_size=(7, 7))(torch.randn(1, 16, 8, 8))


def test_imagenet_pdc_nl_rejects_another_resolution():
    backbone = build_cached('pdc-nl3_pdc-resnet18_8xb32_in1k.py').backbone
    with pytest.raises(ValueError, match=r'spatial_size \(28, 28\).*32x32 feature map'):
        backbone(torch.randn(1, 3, 256, 256))


def test_reduction_must_divide_the_channels():
    with pytest.raises(ValueError, match='reduction 3 must divide in_channels 64'):
        NonLocalBlock(64, reduction=3)
    with pytest.raises(ValueError, match='reduction 8 must divide in_channels 60'):
        MODELS.build(dict(type='PDCResNet', depth=18, stage_channels=[60, 120, 240, 480],
                          hidden_channels=8, plugins=[
                              dict(cfg=dict(type='NonLocalBlock', reduction=8))]))


@pytest.mark.parametrize('cls,kwargs,field', [
    (NonLocalBlock, dict(reduction=0), 'reduction'),
    (NonLocalBlock, dict(in_channels=0), 'in_channels'),
    (NonLocalBlock, dict(use_softmax='yes'), 'use_softmax'),
    (NonLocalBlock, dict(use_scale=1), 'use_scale'),
    (NonLocalBlock, dict(use_activation=None), 'use_activation'),
    (NonLocalBlock, dict(norm_cfg='NoSuchNorm'), 'norm_cfg'),
    (DisentangledNonLocalBlock, dict(temperature=0), 'temperature'),
    (PDCNonLocal3, dict(spatial_size=(8, )), 'spatial_size'),
    (PDCNonLocal4, dict(spatial_size=(8, 0)), r'spatial_size\[1\]'),
])
def test_invalid_options_name_the_option(cls, kwargs, field):
    args = dict(in_channels=16)
    if cls in (PDCNonLocal3, PDCNonLocal4):
        args['spatial_size'] = (4, 4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        cls(**args)


def test_wrong_channels_raise():
    with pytest.raises(ValueError, match=r'expects a \(B, 16, H, W\) feature map'):
        NonLocalBlock(16)(torch.randn(1, 8, 4, 4))


@pytest.mark.parametrize('use_softmax', [True, False])
@pytest.mark.parametrize('positions,d,d_v', [(64, 4, 6), (4, 8, 8)])  # re-associated or not
def test_pairwise_product_equals_the_explicit_map(use_softmax, positions, d, d_v):
    """(Z C1)(Z C2)ᵀ (Z C3) through the fused / re-associated paths equals the explicit HW × HW
    map (softmaxed with the scale, or divided by HW), values and gradients, in float64."""
    from mmpoly.models.nonlocal_family import pairwise_product
    q, k, v = (torch.randn(3, positions, width, dtype=torch.float64, requires_grad=True)
               for width in (d, d, d_v))
    scale = 0.37
    scores = torch.bmm(q, k.transpose(1, 2))
    weights = (scores * scale).softmax(-1) if use_softmax else scores / positions
    expected = torch.bmm(weights, v)
    actual = pairwise_product(q, k, v, use_softmax, scale)
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-12)
    grad = torch.randn_like(expected)
    torch.testing.assert_close(torch.autograd.grad(actual, (q, k, v), grad),
                               torch.autograd.grad(expected, (q, k, v), grad),
                               rtol=1e-9, atol=1e-12)


def test_fused_attention_flops_count_as_the_explicit_map():
    """mmpoly's FLOP count of scaled_dot_product_attention equals mmengine's count of the same
    product written as bmm → softmax → bmm, so NL FLOPs did not change with the fused kernel."""
    import torch.nn.functional as F
    from mmengine.analysis import FlopAnalyzer

    from mmpoly.utils.complexity import attention_flops

    class Explicit(torch.nn.Module):
        def forward(self, q):
            return torch.bmm(torch.bmm(q, q.transpose(1, 2)).softmax(-1), q[..., :3])

    class Fused(torch.nn.Module):
        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q[..., :3])

    q = torch.randn(2, 10, 5)
    explicit = FlopAnalyzer(Explicit(), (q, )).total()
    fused = FlopAnalyzer(Fused(), (q, ))
    fused.set_op_handle('aten::scaled_dot_product_attention', attention_flops)
    assert explicit == fused.total() == 2 * 10 * 10 * (5 + 3)


def _profiled_ops(fn) -> set:
    """Names of the operators ``fn`` runs."""
    from torch.profiler import profile
    with profile() as prof:
        fn()
    return {event.key for event in prof.key_averages()}


def _copied_shapes(fn) -> list:
    """Input shapes of every ``aten::copy_`` that ``fn`` runs."""
    from torch.profiler import profile
    with profile(record_shapes=True) as prof:
        fn()
    return [event.input_shapes for event in prof.key_averages(group_by_input_shape=True)
            if event.key == 'aten::copy_']


def test_pairwise_product_of_nchw_views_runs_the_fused_kernel():
    """to_positions of an NCHW map is a transposed view; pairwise_product must still reach
    PyTorch's fused attention kernel (its unfused math fallback holds the HW × HW map and
    trained NL about 4× slower per block at 32×32) and equal the explicit map."""
    from mmpoly.models.nonlocal_family import pairwise_product, to_positions
    q, k, v = (to_positions(torch.randn(2, 6, 8, 8, requires_grad=True)) for _ in range(3))
    assert q.stride(-1) != 1  # the case the kernel's fast path does not take as given
    ops = _profiled_ops(lambda: pairwise_product(q, k, v, True, 0.5).sum().backward())
    assert any('flash_attention' in op for op in ops), sorted(ops)
    assert not any('attention_math' in op for op in ops), sorted(ops)
    expected = torch.bmm((torch.bmm(q, k.transpose(1, 2)) * 0.5).softmax(-1), v)
    torch.testing.assert_close(pairwise_product(q, k, v, True, 0.5), expected)


@pytest.mark.parametrize('use_softmax', [True, False])
def test_mix_positions_of_a_transposed_map(use_softmax):
    """The second-degree contraction of a map stored transposed (an NCHW conv output whose
    channels index the key positions, as in PDC-NL) equals the explicit M V, values and
    gradients (float64); it is laid out as an NCHW map and its backward never copies the map."""
    from mmpoly.models.nonlocal_family import mix_positions, to_positions
    keys, width, hw = 16, 3, 4
    scores_map = torch.randn(2, keys, hw, hw, dtype=torch.float64, requires_grad=True)
    value_map = torch.randn(2, width, hw, hw, dtype=torch.float64, requires_grad=True)
    scores, value = to_positions(scores_map), to_positions(value_map)  # (2, 16, 16), (2, 16, 3)
    weights = scores.softmax(-1) if use_softmax else scores / keys
    expected = torch.bmm(weights.contiguous(), value.contiguous())
    actual = mix_positions(scores, value, use_softmax)
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)
    assert actual.transpose(1, 2).is_contiguous()  # (B, d, HW): to_map needs no copy
    grad = torch.randn_like(expected)
    torch.testing.assert_close(torch.autograd.grad(actual, (scores_map, value_map), grad),
                               torch.autograd.grad(expected, (scores_map, value_map), grad),
                               rtol=1e-10, atol=1e-12)
    copied = _copied_shapes(lambda: mix_positions(scores, value, use_softmax).backward(grad))
    assert not any([2, keys, hw * hw] in shapes or [2, hw * hw, keys] in shapes
                   for shapes in copied), copied


def test_factor_positions_equals_the_conv_and_counts_its_flops():
    """PDC-NL's wide factor C4 as one batched matrix product equals the 1×1 conv (values and
    gradients, float64), and its FLOPs are counted as the conv's (the model FLOPs are
    unchanged); a factor it cannot compute is refused."""
    from mmengine.analysis import FlopAnalyzer

    from mmpoly.models.nonlocal_family import factor_positions
    from mmpoly.utils.complexity import baddbmm_flops
    block = random_double(PDCNonLocal3(8, spatial_size=(4, 4), reduction=2))
    x = torch.randn(3, 8, 4, 4, dtype=torch.float64, requires_grad=True)
    expected = block.c4(x).flatten(2)
    actual = factor_positions(block.c4, x)
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(expected)
    wrt = (x, block.c4.conv.weight, block.c4.conv.bias)
    torch.testing.assert_close(torch.autograd.grad(actual, wrt, grad),
                               torch.autograd.grad(expected, wrt, grad))

    class Product(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.factor = block.c4

        def forward(self, x):
            return factor_positions(self.factor, x)

    counted = FlopAnalyzer(Product(), (x.detach(), ))
    counted.set_op_handle('aten::baddbmm', baddbmm_flops)
    conv_flops = FlopAnalyzer(block.c4, (x.detach(), )).total()
    assert counted.total() == conv_flops == 3 * 16 * 8 * 16
    with pytest.raises(ValueError, match='1×1 factor conv with bias'):
        factor_positions(block.conv_out, x)


@pytest.mark.parametrize('use_softmax', [True, False])
@pytest.mark.parametrize('recompute', [True, False])
def test_factor_mix_in_chunks_equals_the_whole_map(monkeypatch, use_softmax, recompute):
    """PDC-NL's second-degree term computed chunk by chunk (5 images, chunks of 2) equals the
    explicit softmax(Z C4) (Z C5) over the whole batch, values and every gradient (float64),
    with and without autograd; with ``recompute`` it saves no position map for backward, without
    it saves the chunks' maps and nothing as large as the whole batch's map."""
    from mmpoly.models.nonlocal_family import attention, factor_mix, to_positions
    block = random_double(PDCNonLocal3(8, spatial_size=(4, 4), reduction=2))
    x = torch.randn(5, 8, 4, 4, dtype=torch.float64, requires_grad=True)
    value = to_positions(block.c5(x))
    scores = block.c4(x).flatten(2).transpose(1, 2).contiguous()  # (5, 16 queries, 16 keys)
    weights = scores.softmax(-1) if use_softmax else scores / 16
    expected = torch.bmm(weights, value)
    monkeypatch.setattr(attention, 'CHUNK_ELEMENTS', 2 * 16 * 16)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t,
                                                  lambda t: t):
        actual = factor_mix(block.c4, x, value, use_softmax, recompute)
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)
    maps = [shape for shape in saved if shape[-2:] == (16, 16)]
    assert all(shape.numel() <= 2 * 256 for shape in maps), saved
    assert (len(maps) == 0) == recompute, saved
    grad = torch.randn_like(expected)
    wrt = (x, block.c4.conv.weight, block.c4.conv.bias, block.c5.conv.weight)
    torch.testing.assert_close(torch.autograd.grad(actual, wrt, grad, retain_graph=True),
                               torch.autograd.grad(expected, wrt, grad, retain_graph=True),
                               rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(factor_mix(block.c4, x, value, use_softmax, recompute),
                                   expected)


def test_mix_chunk_size_chunks_on_cpu_only(monkeypatch):
    """factor_mix chunks the batch on CPU (CHUNK_ELEMENTS per chunk, at least one image) and,
    on any other device, takes the whole batch in one product unless it recomputes."""
    from mmpoly.models.nonlocal_family import attention, mix_chunk_size
    monkeypatch.setattr(attention, 'CHUNK_ELEMENTS', 3 * 16 * 16)
    cpu = torch.empty(7, 8, 4, 4)
    meta = torch.empty(7, 8, 4, 4, device='meta')  # stands for a GPU tensor: not a CPU one
    assert mix_chunk_size(cpu, 16, recompute=False) == 3
    assert mix_chunk_size(cpu, 16, recompute=True) == 3
    assert mix_chunk_size(cpu, 1024, recompute=False) == 1  # a map larger than a chunk
    assert mix_chunk_size(meta, 16, recompute=False) == 7
    assert mix_chunk_size(meta, 16, recompute=True) == 3
    calls = []
    real_mix = attention.mix_positions
    monkeypatch.setattr(attention, 'mix_positions',
                        lambda s, v, u: calls.append(s.shape[0]) or real_mix(s, v, u))
    block = PDCNonLocal3(8, spatial_size=(4, 4), reduction=2)
    attention.factor_mix(block.c4, torch.randn(7, 8, 4, 4), torch.randn(7, 16, 4), True)
    assert calls == [3, 3, 1]
    calls.clear()
    value = torch.empty(7, 16, 4, device='meta')
    assert attention.factor_mix(block.c4.to('meta'), meta, value, True).shape == (7, 16, 4)
    assert calls == [7]
    calls.clear()
    with torch.no_grad():  # nothing to recompute without autograd: one product again
        attention.factor_mix(block.c4, meta, value, True, recompute=True)
    assert calls == [7]


def test_pdc_nl_with_cp_equals_without():
    """PDCNonLocal3/4(with_cp=True) give the same outputs and gradients as with_cp=False."""
    for cls in (PDCNonLocal3, PDCNonLocal4):
        block = random_double(cls(8, spatial_size=(4, 4), reduction=2))
        x = torch.randn(3, 8, 4, 4, dtype=torch.float64, requires_grad=True)
        outputs = []
        for with_cp in (False, True):
            block.with_cp = with_cp
            out = block(x)
            outputs.append((out, torch.autograd.grad(out.square().sum(), x)[0]))
        torch.testing.assert_close(outputs[0], outputs[1])
    with pytest.raises(ValueError, match='with_cp'):
        PDCNonLocal3(8, spatial_size=(4, 4), with_cp='yes')
