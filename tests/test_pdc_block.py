"""The PDC block: structure, parameter formula, and numerics against an independent computation."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from mmcv.cnn.bricks.activation import Clamp
from helpers import bn_eval, first_degree_terms, randomise
from mmengine.registry import MODELS as MMENGINE_MODELS

from mmpoly.models import PDCBlock, ResNetBlock
from mmpoly.models.polynomial import Factor, hadamard_product
from mmpoly.models.polynomial.factor import InstanceNorm2d as FactorInstanceNorm2d
from mmpoly.registry import MODELS
from mmpoly.utils.complexity import count_params


def formula_block_params(cin: int, p: int, h: int, degree: int, both_convs: bool, k_so: int = 3,
                         k_loc: int = 3) -> int:
    """One PDC block's parameters counted by hand (BN input/factor norms, IN projection)."""
    count = 9 * cin * p + 2 * p  # conv1 + bn1
    if both_convs:
        count += 9 * p * p + 2 * p  # conv2 + bn2
    if cin != p:
        count += cin * p + 2 * p  # projecting shortcut
    if degree >= 2:
        count += 2 * p  # input_norm (normx)
    for n in range(2, degree + 1):
        count += n * (k_so * k_so * p * h + 2 * h)  # n factors: conv + BN
        count += k_loc * k_loc * h * p  # projection conv (IN has no parameters)
        count += 1  # α_n
    return count


@pytest.mark.parametrize('cin,p,h,degree,first_degree_convs,k_so,k_loc', [
    (64, 64, 64, 2, 1, 3, 3),
    (64, 128, 64, 2, 2, 3, 3),
    (128, 128, 32, 3, 2, 1, 1),
    (32, 64, 16, 4, 1, 3, 5),
])
def test_block_parameter_formula(cin, p, h, degree, first_degree_convs, k_so, k_loc):
    block = PDCBlock(cin, p, stride=2 if cin != p else 1, degree=degree, hidden_channels=h,
                     first_degree_convs=first_degree_convs, factor_kernel_size=k_so,
                     projection_kernel_size=k_loc)
    assert count_params(block) == formula_block_params(cin, p, h, degree, first_degree_convs == 2,
                                                       k_so, k_loc)
    # every degree has its own factors: n factor layers for degree n, nothing shared
    assert [len(t.factors) for t in block.terms] == list(range(2, degree + 1))
    factor_ids = [id(f) for t in block.terms for f in t.factors]
    assert len(set(factor_ids)) == len(factor_ids)


def test_degree_one_is_exactly_a_resnet_block():
    pdc = PDCBlock(32, 64, stride=2, degree=1)
    resnet = ResNetBlock(32, 64, stride=2)
    assert len(pdc.terms) == 0
    assert list(pdc.state_dict()) == list(resnet.state_dict())
    resnet.load_state_dict(pdc.state_dict())
    x = torch.randn(2, 32, 8, 8)
    pdc.eval(), resnet.eval()
    torch.testing.assert_close(pdc(x), resnet(x), rtol=0, atol=0)


@pytest.mark.parametrize('kernel', [1, 3, 5, 7])
def test_any_odd_kernel_keeps_the_size(kernel):
    block = PDCBlock(8, 8, degree=3, hidden_channels=4, factor_kernel_size=kernel,
                     projection_kernel_size=kernel, num_projection_convs=2, scale_init=1.0)
    out = block(torch.randn(2, 8, 9, 9))
    assert out.shape == (2, 8, 9, 9)


def test_several_projection_convs_with_hidden_not_equal_width():
    block = PDCBlock(16, 16, degree=2, hidden_channels=8, num_projection_convs=3)
    convs = [m.conv for m in block.terms[0].projection]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(8, 16), (16, 16), (16, 16)]
    assert block(torch.randn(1, 16, 6, 6)).shape == (1, 16, 6, 6)


def test_shortcut_is_computed_once_per_forward():
    block = PDCBlock(8, 16, stride=2, degree=3, hidden_channels=4)
    calls = []
    block.downsample.register_forward_hook(lambda *args: calls.append(1))
    block(torch.randn(2, 8, 8, 8))
    assert len(calls) == 1
    # the shortcut BN's running statistics move by exactly one momentum step
    bn = block.downsample[1]
    assert int(bn.num_batches_tracked) == 1


def test_no_unbounded_state_across_forwards():
    block = PDCBlock(8, 8, degree=2, hidden_channels=4)
    before = {k: v.shape for k, v in block.state_dict().items()}
    for _ in range(5):
        block(torch.randn(1, 8, 4, 4))
    assert {k: v.shape for k, v in block.state_dict().items()} == before
    assert not any(isinstance(v, list) for v in vars(block).values())


def _instance_norm(x, eps):
    mean = x.mean(dim=(2, 3), keepdim=True)
    var = x.var(dim=(2, 3), unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def _leaky(x, slope=0.01):
    return torch.where(x > 0, x, slope * x)


def test_degree_three_block_matches_independent_formula():
    torch.manual_seed(0)
    cin, p, h = 6, 8, 5
    block = PDCBlock(cin, p, stride=2, degree=3, hidden_channels=h, first_degree_convs=2,
                     factor_kernel_size=3, projection_kernel_size=1, scale_init=0.0)
    block = randomise(block).double().eval()
    x = torch.randn(3, cin, 10, 10, dtype=torch.float64)

    # first-degree term: ResNet branch + projecting shortcut
    branch, shortcut = first_degree_terms(block, x)
    z = bn_eval(shortcut, block.input_norm)
    expected = branch + shortcut
    for n, term in zip((2, 3), block.terms):
        product = torch.ones(3, h, 5, 5, dtype=torch.float64)
        for factor in term.factors:  # degree n: n own factors, multiplied element-wise
            product = product * _leaky(bn_eval(F.conv2d(z, factor.conv.weight, padding=1),
                                               factor.norm))
        proj = term.projection[0]
        projected = _leaky(_instance_norm(F.conv2d(product, proj.conv.weight), proj.norm.eps))
        expected = expected + term.scale * projected
    expected = F.relu(expected)
    torch.testing.assert_close(block(x), expected, rtol=1e-10, atol=1e-10)


def test_scale_init_zero_means_first_degree_output_at_start():
    block = PDCBlock(8, 8, degree=4, hidden_channels=4).eval()
    resnet = ResNetBlock(8, 8).eval()
    resnet.load_state_dict(block.state_dict(), strict=False)
    x = torch.randn(2, 8, 5, 5)
    torch.testing.assert_close(block(x), resnet(x))


def test_hadamard_product():
    a, b, c = torch.randn(3, 2, 4).unbind(0)
    torch.testing.assert_close(hadamard_product([a, b, c]), a * b * c)
    with pytest.raises(ValueError, match='at least one factor'):
        hadamard_product([])


def test_no_activation_block_has_no_activation_modules():
    block = PDCBlock(8, 8, degree=3, hidden_channels=4, use_activation=False)
    acts = (torch.nn.ReLU, torch.nn.LeakyReLU)
    assert not any(isinstance(m, acts) for m in block.modules())


@pytest.mark.parametrize('kwargs,field', [
    (dict(degree=0), 'degree'),
    (dict(degree=1.5), 'degree'),
    (dict(hidden_channels=0), 'hidden_channels'),
    (dict(hidden_channels=-4), 'hidden_channels'),
    (dict(factor_kernel_size=2), 'factor_kernel_size'),
    (dict(projection_kernel_size=4), 'projection_kernel_size'),
    (dict(num_projection_convs=0), 'num_projection_convs'),
    (dict(first_degree_convs=3), 'first_degree_convs'),
    (dict(input_norm='BM'), 'input_norm'),
    (dict(factor_norm=dict(type='Foo')), 'factor_norm.type'),
    (dict(projection_norm=3), 'projection_norm'),
    (dict(factor_act='Mish2'), 'factor_act'),
    (dict(projection_act=dict(type='Nope', x=1)), 'projection_act.type'),
    (dict(scale_init='zero'), 'scale_init'),
    (dict(use_activation='yes'), 'use_activation'),
    (dict(stride=0), 'stride'),
])
def test_invalid_block_options_name_the_option(kwargs, field):
    with pytest.raises(ValueError, match=field.replace('.', r'\.')):
        PDCBlock(8, 8, **kwargs)


def test_norm_options_by_name():
    block = PDCBlock(8, 8, degree=2, hidden_channels=4, input_norm='none', factor_norm='IN',
                     projection_norm='BN', factor_act='none', projection_act='ReLU')
    assert isinstance(block.input_norm, torch.nn.Identity)
    assert isinstance(block.terms[0].factors[0].norm, torch.nn.InstanceNorm2d)
    assert isinstance(block.terms[0].projection[0].norm, torch.nn.BatchNorm2d)
    assert not block.terms[0].factors[0].with_activation
    assert isinstance(block.terms[0].projection[0].activate, torch.nn.ReLU)


@pytest.mark.parametrize('factor_norm,norm_cls', [
    ('BN2d', torch.nn.BatchNorm2d), ('IN2d', torch.nn.InstanceNorm2d),
    (dict(type='GN', num_groups=2), torch.nn.GroupNorm)])
@pytest.mark.parametrize('factor_act,act_cls', [('RReLU', torch.nn.RReLU), ('Clamp', Clamp)])
def test_every_type_mmcv_builds_is_accepted(factor_norm, norm_cls, factor_act, act_cls):
    block = PDCBlock(8, 8, degree=2, hidden_channels=4, factor_norm=factor_norm,
                     factor_act=factor_act)
    factor = block.terms[0].factors[0]
    # exact types; mmpoly computes IN through group_norm in a subclass of nn.InstanceNorm2d
    assert type(factor.norm) is norm_cls or type(factor.norm) is FactorInstanceNorm2d \
        and norm_cls is torch.nn.InstanceNorm2d
    assert type(factor.activate) is act_cls


@pytest.mark.parametrize('norm', ['GN', dict(type='GN'), dict(type=torch.nn.GroupNorm)])
def test_group_norm_without_num_groups_names_the_option(norm):
    """mmcv's build_norm_layer would stop on a bare ``assert 'num_groups' in cfg``."""
    with pytest.raises(ValueError, match=r"^projection_norm=.*: GroupNorm needs num_groups \(a "
                                         r"divisor of the channels\), e\.g\. dict\(type='GN', "
                                         r"num_groups=4\)$"):
        PDCBlock(8, 8, degree=2, hidden_channels=4, projection_norm=norm)
    with pytest.raises(ValueError, match=r"^norm_cfg=.*: GroupNorm needs num_groups"):
        PDCBlock(8, 8, degree=2, hidden_channels=4,
                 norm_cfg=norm if isinstance(norm, dict) else dict(type=norm))


class TinyNorm(torch.nn.Module):
    """A user's norm layer (mmcv passes ``eps``): x / (eps + RMS over channels), no parameters."""

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (self.eps + x.pow(2).mean(dim=1, keepdim=True).sqrt())


class TinyAct(torch.nn.Module):
    """A user's activation: x³."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x**3


@pytest.mark.parametrize('registry', [MMENGINE_MODELS, MODELS], ids=['mmengine', 'mmpretrain'])
def test_user_registered_norm_and_activation_are_built(registry):
    registry.register_module('MmpolyTestTinyNorm', module=TinyNorm)
    registry.register_module('MmpolyTestTinyAct', module=TinyAct)
    try:
        block = PDCBlock(8, 8, degree=2, hidden_channels=4, input_norm='MmpolyTestTinyNorm',
                         factor_norm=dict(type='MmpolyTestTinyNorm'),
                         projection_act='MmpolyTestTinyAct')
        assert isinstance(block.input_norm, TinyNorm)
        assert isinstance(block.terms[0].factors[1].norm, TinyNorm)
        assert isinstance(block.terms[0].projection[0].activate, TinyAct)
        assert block(torch.randn(2, 8, 4, 4)).shape == (2, 8, 4, 4)
    finally:
        registry.module_dict.pop('MmpolyTestTinyNorm')
        registry.module_dict.pop('MmpolyTestTinyAct')
    with pytest.raises(ValueError, match="input_norm .*got 'MmpolyTestTinyNorm'"):
        PDCBlock(8, 8, input_norm='MmpolyTestTinyNorm')


@pytest.mark.parametrize('kwargs,message', [
    (dict(factor_norm='bn'), r"factor_norm must be 'none' or a norm type registered in the "
     r"MODELS registry .* got 'bn'; close matches: \['BN'"),
    (dict(projection_norm=dict(type='Instance')), r"projection_norm\.type .*got 'Instance'"),
    (dict(factor_act='relu'), r"factor_act must be 'none' or an? activation type .*got 'relu'; "
     r"close matches: \['ReLU'"),
])
def test_unknown_type_is_refused_naming_field_value_and_close_matches(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PDCBlock(8, 8, **kwargs)


@pytest.mark.parametrize('affine', [False, True])
def test_factor_instance_norm_is_instance_norm(affine):
    """Factor computes 'IN' through group_norm (faster on CPU); it is the same function, with the
    same gradients and state dict as nn.InstanceNorm2d."""
    factor = Factor(6, 6, 3, norm_cfg=dict(type='IN', affine=affine), act_cfg=None).double()
    assert type(factor.norm) is FactorInstanceNorm2d
    assert isinstance(factor.norm, nn.InstanceNorm2d)
    reference = nn.InstanceNorm2d(6, affine=affine).double()
    if affine:
        with torch.no_grad():
            factor.norm.weight.uniform_(0.5, 1.5)
            factor.norm.bias.uniform_(-1, 1)
        reference.load_state_dict(factor.norm.state_dict())
    assert factor.norm.state_dict().keys() == reference.state_dict().keys()
    x = torch.randn(3, 6, 7, 5, dtype=torch.float64, requires_grad=True)
    y = factor.conv(x)
    grad = torch.randn_like(y)
    ours = torch.autograd.grad(factor.norm(y), [x], grad, retain_graph=True)[0]
    theirs = torch.autograd.grad(reference(y), [x], grad)[0]
    torch.testing.assert_close(factor.norm(y), reference(y), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('dtype, size', [(torch.bfloat16, (7, 5)), (torch.bfloat16, (32, 32)),
                                         (torch.float32, (7, 5)), (torch.float32, (31, 33)),
                                         (torch.float32, (32, 32))])
def test_factor_instance_norm_channels_last(dtype, size, monkeypatch):
    """A channels-last map keeps its layout through Factor's IN, with the values and gradients
    of the NCHW computation. bfloat16, and float32 maps under 1,024 pixels, are normalised in
    NCHW order (bitwise equal); larger float32 maps by the channels-last kernel."""
    from mmpoly.models.polynomial import factor as factor_module
    torch.manual_seed(0)
    layouts = []
    group_norm = F.group_norm
    monkeypatch.setattr(factor_module.F, 'group_norm',
                        lambda x, *args: layouts.append(x.is_contiguous()) or group_norm(x, *args))
    norm = Factor(6, 6, 3, norm_cfg=dict(type='IN', affine=True), act_cfg=None).norm.to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-1, 1)
    x = torch.randn(3, 6, *size, dtype=dtype)
    x_cl = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    x = x.requires_grad_()
    out, out_cl = norm(x), norm(x_cl)
    in_nchw = dtype == torch.bfloat16 or size[0] * size[1] < 1024
    assert layouts == [True, in_nchw]
    assert out_cl.is_contiguous(memory_format=torch.channels_last) and not out_cl.is_contiguous()
    grad = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, norm.weight, norm.bias], grad)
    grads_cl = torch.autograd.grad(out_cl, [x_cl, norm.weight, norm.bias], grad)
    if in_nchw:
        assert torch.equal(out_cl, out) and all(map(torch.equal, grads_cl, grads))
    else:
        torch.testing.assert_close(out_cl, out)
        torch.testing.assert_close(grads_cl[0], grads[0])
        # γ and β gradients sum 3 × H × W float32 terms in another order: absolute tolerance.
        torch.testing.assert_close(grads_cl[1:], grads[1:], rtol=1e-4, atol=2e-3)
    reference = F.instance_norm(x.detach().double(), weight=norm.weight.detach().double(),
                                bias=norm.bias.detach().double())
    torch.testing.assert_close(out_cl.double(), reference, rtol=0.02, atol=0.05)


def test_factor_instance_norm_with_running_stats_is_torch_own():
    factor = Factor(4, 4, 3, norm_cfg=dict(type='IN', track_running_stats=True), act_cfg=None)
    factor.train()(torch.randn(2, 4, 5, 5))
    assert factor.norm.running_mean.abs().sum() > 0  # nn.InstanceNorm2d's path: stats updated
