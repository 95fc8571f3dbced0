"""The taxonomy: ResNet (1), SE (2), Π-net (N, shared factors), PDC (N, own factors), built on
one polynomial core, with and without activations."""
import pytest
import torch
import torch.nn.functional as F
from helpers import bn_eval, first_degree_terms, randomise

from mmpoly.analysis import numerical_degree
from mmpoly.models import PDCBlock, PiNetBlock, PolyResNet, PolyResNetCIFAR, ResNetBlock, SEBlock
from mmpoly.models.backbones import build_block

BLOCKS = [
    ('ResNetBlock', {}),
    ('SEBlock', dict(reduction=4)),
    ('PiNetBlock', dict(degree=2)),
    ('PiNetBlock', dict(degree=3)),
    ('PiNetBlock', dict(degree=4)),
    ('PDCBlock', dict(degree=2, hidden_channels=8)),
    ('PDCBlock', dict(degree=3, hidden_channels=8)),
    ('PDCBlock', dict(degree=4, hidden_channels=8)),
]


@pytest.mark.parametrize('block_type,options', BLOCKS)
@pytest.mark.parametrize('use_activation', [True, False])
@pytest.mark.parametrize('size', [32, 224])
def test_every_block_runs_forward_and_backward(block_type, options, use_activation, size):
    block = build_block(dict(type=block_type, **options), in_channels=8, out_channels=16,
                        stride=2, use_activation=use_activation)
    x = torch.randn(2, 8, size, size, requires_grad=True)
    out = block(x)
    assert out.shape == (2, 16, size // 2, size // 2)
    out.square().mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert all(p.grad is not None for p in block.parameters())
    if not use_activation:
        acts = (torch.nn.ReLU, torch.nn.LeakyReLU, torch.nn.Sigmoid)
        assert not any(isinstance(m, acts) for m in block.modules())


@pytest.mark.parametrize('block_type,options', BLOCKS)
@pytest.mark.parametrize('use_activation', [True, False])
def test_every_block_type_in_both_backbones(block_type, options, use_activation):
    options = {k: v for k, v in options.items() if k != 'hidden_channels'}
    common = dict(depth=None, stage_blocks=[1, 1], stage_channels=[8, 16], out_indices=(1, ),
                  block_cfg=dict(type=block_type, **options), use_activation=use_activation,
                  hidden_channels=4 if block_type == 'PDCBlock' else None)
    (cifar, ) = PolyResNetCIFAR(**common)(torch.randn(1, 3, 32, 32))
    (inet, ) = PolyResNet(**common)(torch.randn(1, 3, 224, 224))
    assert cifar.shape == (1, 16, 16, 16) and inet.shape == (1, 16, 28, 28)


# --- polynomial degree of the no-activation blocks (BN in eval mode is affine) -------------

DEGREE_CASES = [
    (ResNetBlock(6, 6, use_activation=False), 1),
    (SEBlock(6, 6, reduction=2, use_activation=False), 2),
    (PiNetBlock(6, 6, degree=2, use_activation=False), 2),
    (PiNetBlock(6, 6, degree=3, use_activation=False, num_projection_convs=0), 3),
    (PiNetBlock(6, 6, degree=4, use_activation=False, num_input_convs=1), 4),
    (PDCBlock(6, 6, degree=2, hidden_channels=3, projection_norm='BN', use_activation=False), 2),
    (PDCBlock(6, 6, degree=3, hidden_channels=3, projection_norm='none', use_activation=False),
     3),
    (PDCBlock(6, 6, degree=4, hidden_channels=3, projection_norm='BN', use_activation=False), 4),
]


@pytest.mark.parametrize('block,degree', DEGREE_CASES,
                         ids=[f'{type(b).__name__}-{n}' for b, n in DEGREE_CASES])
def test_no_activation_block_is_a_polynomial_of_its_degree(block, degree):
    block = randomise(block).double().eval()
    x0 = torch.randn(1, 6, 5, 5, dtype=torch.float64)
    d = torch.randn(1, 6, 5, 5, dtype=torch.float64)
    assert numerical_degree(block, x0, d, max_degree=degree + 2) == degree


def test_with_activations_a_block_is_not_a_low_degree_polynomial():
    block = randomise(PDCBlock(6, 6, degree=2, hidden_channels=3, projection_norm='BN'))
    block = block.double().eval()
    x0 = torch.randn(1, 6, 5, 5, dtype=torch.float64)
    d = torch.randn(1, 6, 5, 5, dtype=torch.float64)
    assert numerical_degree(block, x0, d, max_degree=4) is None


@pytest.mark.parametrize('block_type,degree,num_blocks', [('PDCBlock', 2, 2),
                                                          ('PiNetBlock', 2, 2),
                                                          ('PDCBlock', 3, 2)])
def test_network_of_blocks_is_a_polynomial_of_degree_at_most_n_to_the_l(
        block_type, degree, num_blocks):
    net = PolyResNetCIFAR(
        depth=None, stage_blocks=[num_blocks], stage_channels=[4], in_channels=2,
        out_indices=(0, ), use_activation=False,
        hidden_channels=2 if block_type == 'PDCBlock' else None,
        block_cfg=dict(type=block_type, degree=degree,
                       **({'projection_norm': 'BN'} if block_type == 'PDCBlock' else {})))
    net = randomise(net, scale=0.5).double().eval()
    with torch.no_grad():  # α = 1: the highest degree must be large enough to be seen
        for name, p in net.named_parameters():
            if name.endswith('scale'):
                p.fill_(1.0)
    x0 = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    d = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    bound = degree**num_blocks
    found = numerical_degree(lambda x: net(x)[0], x0, d, max_degree=bound, step=1.0)
    assert found is not None and degree < found <= bound


# --- Π-net against an independent computation of its recursion ------------------------------

@pytest.mark.parametrize('degree', [2, 3, 4])
def test_pinet_block_matches_the_shared_factor_recursion(degree):
    block = PiNetBlock(4, 6, stride=2, degree=degree, num_input_convs=1, num_projection_convs=1,
                       projection_kernel_size=1)
    block = randomise(block).double().eval()
    x = torch.randn(2, 4, 8, 8, dtype=torch.float64)
    branch, shortcut = first_degree_terms(block, x)
    conv_a = block.input_convs[0]
    a = bn_eval(F.conv2d(bn_eval(shortcut, block.input_norm), conv_a.conv.weight), conv_a.norm)
    term, total = branch, 0
    for _ in range(2, degree + 1):  # t_n = t_{n-1} ∘ a: the same two factors at every degree
        term = term * a
        total = total + term
    proj = block.projection[0]
    expected = F.relu(branch + shortcut +
                      block.scale * bn_eval(F.conv2d(total, proj.conv.weight), proj.norm))
    torch.testing.assert_close(block(x), expected, rtol=1e-10, atol=1e-10)


def test_se_block_matches_its_formula():
    block = randomise(SEBlock(6, 6, reduction=3)).double().eval()
    x = torch.randn(2, 6, 5, 5, dtype=torch.float64)
    u = F.relu(bn_eval(F.conv2d(x, block.conv1.weight, padding=1), block.bn1))
    u = bn_eval(F.conv2d(u, block.conv2.weight, padding=1), block.bn2)
    pooled = u.mean(dim=(2, 3), keepdim=True)
    squeeze, excite = block.gate.squeeze.conv, block.gate.excite.conv
    gate = torch.sigmoid(F.conv2d(F.relu(F.conv2d(pooled, squeeze.weight, squeeze.bias)),
                                  excite.weight, excite.bias))
    torch.testing.assert_close(block(x), F.relu(u * gate + x), rtol=1e-10, atol=1e-10)


def test_pinet_shares_and_pdc_does_not():
    pinet = PiNetBlock(8, 8, degree=4, num_projection_convs=0)
    pdc = PDCBlock(8, 8, degree=4, hidden_channels=4)

    def n(m):
        return sum(p.numel() for p in m.parameters())
    # Π-net: raising the degree adds no parameter; PDC: each degree brings n new factors
    assert n(pinet) == n(PiNetBlock(8, 8, degree=2, num_projection_convs=0))
    assert n(pdc) > n(PDCBlock(8, 8, degree=3, hidden_channels=4)) > \
        n(PDCBlock(8, 8, degree=2, hidden_channels=4))


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize('block_cfg,match', [
    (dict(type='TriangleBlock'), r"block_cfg\.type must be one of \['PDCBlock', 'PiNetBlock', "
     r"'ResNetBlock', 'SEBlock'"),
    (dict(type='PiNetBlock', degree=1), 'degree of a PiNetBlock must be >= 2'),
    (dict(type='SEBlock', degree=3), "unknown option 'degree' for SEBlock"),
    (dict(type='ResNetBlock', degree=2), "unknown option 'degree' for ResNetBlock"),
    (dict(type='SEBlock', reduction=128), r'reduction \(128\) must not exceed the block width '
     r'\(64 channels\)'),
    (dict(type='SEBlock', reduction=0), 'reduction must be a positive integer'),
    (dict(type='PiNetBlock', num_projection_convs=-1), 'num_projection_convs'),
    (dict(type='PiNetBlock', learn_scale=1), 'learn_scale'),
    (dict(type='PiNetBlock', use_scale=False),
     r"unknown option 'use_scale' for PiNetBlock; allowed options: \[.*'learn_scale'"),
])
def test_bad_block_options(block_cfg, match):
    with pytest.raises(ValueError, match=match):
        PolyResNetCIFAR(depth=18, block_cfg=block_cfg)
