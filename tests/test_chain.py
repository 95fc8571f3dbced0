"""The memory-lean element-wise chains of a polynomial term (mmpoly.models.polynomial.chain):
the same function, gradients and BatchNorm statistics as the term's layers, fewer saved maps."""
import copy
from typing import Dict, List

import pytest
import torch
import torch.nn.modules.module as module_hooks
from helpers import randomise_norms
from torch import Tensor, nn

from mmpoly.models import PDCBlock
from mmpoly.models.polynomial import PolynomialTerm, hadamard_product

LEAKY = dict(type='LeakyReLU', negative_slope=0.01)
MEMORY_FORMATS = {'NCHW': torch.contiguous_format, 'channels_last': torch.channels_last}


def _term(degree: int = 2, **kwargs) -> PolynomialTerm:
    options = dict(factor_act=LEAKY, projection_act=dict(type='LeakyReLU', negative_slope=0.2),
                   scale_init=0.7)
    options.update(kwargs)
    torch.manual_seed(degree)
    return randomise_norms(PolynomialTerm(degree, 6, 5, 7, **options).double())


def _layers(term: PolynomialTerm, z: Tensor) -> Tensor:
    """The term computed by calling its layers one by one (autograd through each)."""
    return term.scale * term.projection(hadamard_product([f(z) for f in term.factors]))


CASES = {
    'pdc default (BN, IN, LeakyReLU)': dict(),
    'degree 3': dict(degree=3),
    'degree 4, two projection convs': dict(degree=4, num_projection_convs=2),
    'ReLU factors, no projection activation': dict(factor_act='ReLU', projection_act='none'),
    'no factor norm, BN projection': dict(factor_norm='none', projection_norm='BN'),
    'no norms, no activations': dict(degree=3, factor_norm='none', factor_act='none',
                                     projection_norm='none', projection_act='none'),
    'affine IN, three 1x1 projection convs': dict(
        projection_norm=dict(type='IN', affine=True), num_projection_convs=3,
        projection_kernel_size=1),
    'BN cumulative average (momentum None)': dict(factor_norm=dict(type='BN', momentum=None)),
    'BN without running statistics': dict(
        factor_norm=dict(type='BN', track_running_stats=False)),
    'BN without affine parameters': dict(factor_norm=dict(type='BN', affine=False),
                                         projection_norm=dict(type='BN', affine=False)),
}


@pytest.mark.parametrize('layout', ['NCHW', 'channels_last'])
@pytest.mark.parametrize('mode', ['train', 'eval', 'one factor norm in eval'])
@pytest.mark.parametrize('case', list(CASES))
def test_fused_term_equals_its_layers(case, mode, layout):
    options = dict(CASES[case])
    term = _term(options.pop('degree', 2), **options)
    if mode == 'eval':
        term.eval()
    elif mode == 'one factor norm in eval' and term.factors[1].with_norm:
        term.factors[1].norm.eval()  # e.g. norm_eval: a frozen BN inside a training model
    z = torch.randn(3, 6, 5, 4, dtype=torch.float64)
    if layout == 'channels_last':  # the model too, as channels_last=True stores it
        term.to(memory_format=torch.channels_last)
        z = z.contiguous(memory_format=torch.channels_last)
    reference = copy.deepcopy(term)
    z.requires_grad_()
    for _ in range(2):  # two steps: the running statistics feed the second one
        out, expected = term(z), _layers(reference, z)
        assert type(out.grad_fn).__name__ == 'NormActScaleBackward'  # the fused path ran
        assert out.is_contiguous(memory_format=MEMORY_FORMATS[layout])
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        grad = torch.randn_like(out)
        got = torch.autograd.grad(out, [z, *term.parameters()], grad)
        want = torch.autograd.grad(expected, [z, *reference.parameters()], grad)
        for name, g, w in zip(['z'] + [n for n, _ in term.named_parameters()], got, want):
            torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=f'gradient of {name}')
        for (name, a), b in zip(term.state_dict().items(), reference.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f'state {name}')


@pytest.mark.parametrize('size', [(5, 4), (31, 33), (32, 32)])
def test_fused_term_on_channels_last_maps_of_every_instance_norm_kernel(size):
    """The projection's instance norm runs on an NCHW copy of a channels-last map under 1,024
    pixels and on the channels-last kernel from there on (factor.group_norm_in_nchw), in the
    fused term's forward and backward passes as in the layers: the same values and gradients."""
    from mmpoly.models.polynomial.factor import group_norm_in_nchw
    term = _term(2).to(memory_format=torch.channels_last)
    reference = copy.deepcopy(term)
    z = torch.randn(2, 6, *size, dtype=torch.float64).contiguous(
        memory_format=torch.channels_last).requires_grad_()
    assert group_norm_in_nchw(z) == (size[0] * size[1] < 1024)
    out, expected = term(z), _layers(reference, z)
    assert type(out.grad_fn).__name__ == 'NormActScaleBackward'
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, [z, *term.parameters()], grad)
    want = torch.autograd.grad(expected, [z, *reference.parameters()], grad)
    assert got[0].is_contiguous(memory_format=torch.channels_last)
    for name, g, w in zip(['z'] + [n for n, _ in term.named_parameters()], got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=f'gradient of {name}')


def _saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd saves while running ``fn`` (not parameters)."""
    storages: Dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        if not isinstance(tensor, nn.Parameter):
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return sum(storages.values())


@pytest.mark.parametrize('layout', ['NCHW', 'channels_last'])
@pytest.mark.parametrize('degree', [2, 3, 4])
def test_fused_term_saves_neither_activated_factors_nor_activated_projection(degree, layout):
    term = _term(degree).float()
    z = torch.randn(4, 6, 8, 8)
    if layout == 'channels_last':
        term.to(memory_format=torch.channels_last)
        z = z.contiguous(memory_format=torch.channels_last)
    z.requires_grad_()
    hidden_map, out_map = 4 * 5 * 8 * 8 * 4, 4 * 7 * 8 * 8 * 4  # bytes of one float32 map
    fused, layers = _saved_bytes(lambda: term(z)), _saved_bytes(lambda: _layers(term, z))
    # the layers keep each activated factor, the degree - 2 partial products and the
    # activated projection on top of what the fused term keeps
    assert layers - fused >= (2 * degree - 2) * hidden_map + out_map - 4096
    # the fused term keeps z, the n factor conv outputs, the product and the projection conv
    # output (and small statistics)
    assert fused <= (6 * 8 * 8 * 4 * 4) + (degree + 1) * hidden_map + out_map + 4096


def test_layers_run_where_the_fused_chain_does_not():
    term = _term().float()
    z = torch.randn(2, 6, 5, 5)

    def grad_fn(x: Tensor, module: nn.Module = term) -> str:
        return type(module(x).grad_fn).__name__

    assert grad_fn(z) == 'NormActScaleBackward'
    assert grad_fn(z.contiguous(memory_format=torch.channels_last)) == 'NormActScaleBackward'
    assert grad_fn(z.transpose(2, 3)) == 'MulBackward0'  # neither NCHW nor channels-last
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert grad_fn(z) == 'MulBackward0'
    with torch.no_grad():
        assert term(z).grad_fn is None
    group_norm = _term(factor_norm=dict(type='GN', num_groups=5)).float()
    gelu = _term(projection_act='GELU').float()
    negative = _term(factor_act=dict(type='LeakyReLU', negative_slope=-0.5)).float()
    for other in (group_norm, gelu, negative):
        assert grad_fn(z, other) == 'MulBackward0'


def test_block_with_cp_and_fused_terms_gives_the_layers_gradients():
    torch.manual_seed(0)
    block = PDCBlock(6, 6, degree=3, hidden_channels=4, scale_init=0.5, with_cp=True).double()
    plain = copy.deepcopy(block)
    plain.with_cp = False
    for term in plain.terms:  # the reference calls the layers
        term.forward = lambda z, term=term: _layers(term, z)
    x = torch.randn(2, 6, 5, 5, dtype=torch.float64, requires_grad=True)
    out, expected = block(x), plain(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    got = torch.autograd.grad(out.sum(), [x, *block.parameters()])
    want = torch.autograd.grad(expected.sum(), [x, *plain.parameters()])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def _block() -> PDCBlock:
    """A PDC block of degree 3 (two fused terms) with non-trivial α, in float64."""
    torch.manual_seed(0)
    return PDCBlock(6, 6, degree=3, hidden_channels=4, scale_init=0.5).double()


def _term_grad_fns(block: PDCBlock, x: Tensor) -> List[str]:
    z = block.input_norm(block.shortcut(x))
    return [type(term(z).grad_fn).__name__ for term in block.terms]


def test_hooks_on_a_terms_layers_run_with_the_layers():
    """The fused chain bypasses the forward of the factors, their norms and activations and the
    projection: with a module hook on any of them, or a global one, the terms run their layers
    (every hook is called) and give the fused chain's outputs and gradients."""
    block = _block()
    x = torch.randn(2, 6, 5, 5, dtype=torch.float64, requires_grad=True)
    assert _term_grad_fns(block, x) == ['NormActScaleBackward'] * 2
    expected = block(x)  # the fused chains
    want = torch.autograd.grad(expected.sum(), [x, *block.parameters()])
    term = block.terms[1]
    seen: List[nn.Module] = []
    hooks = [
        term.factors[0].conv.register_forward_hook(lambda m, i, o: seen.append(m)),
        term.factors[1].norm.register_forward_hook(lambda m, i, o: seen.append(m)),
        term.projection[-1].register_full_backward_hook(lambda m, gi, go: seen.append(m)),
    ]
    try:
        assert _term_grad_fns(block, x) == ['NormActScaleBackward', 'MulBackward0']
        seen.clear()
        out = block(x)
        got = torch.autograd.grad(out.sum(), [x, *block.parameters()])
    finally:
        for hook in hooks:
            hook.remove()
    assert seen == [term.factors[0].conv, term.factors[1].norm, term.projection[-1]]
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)

    called: List[nn.Module] = []
    hook = module_hooks.register_module_forward_hook(lambda m, i, o: called.append(m))
    try:
        assert _term_grad_fns(block, x) == ['MulBackward0'] * 2
        called.clear()
        out = block(x)
    finally:
        hook.remove()
    for term in block.terms:  # the modules the fused chain bypasses
        for module in [*term.factors, term.factors[0].norm, term.factors[0].activate,
                       term.projection, term.projection[-1].norm]:
            assert any(m is module for m in called), module
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert _term_grad_fns(block, x) == ['NormActScaleBackward'] * 2  # hooks gone: fused again


@pytest.mark.filterwarnings('ignore::torch.jit.TracerWarning', 'ignore:.*torch.jit.trace')
def test_traced_and_transformed_terms_run_their_layers():
    """``torch.jit.trace`` records the layers (not the fused chain's Python autograd
    Functions), and functorch transforms (``torch.func.vmap``, ``jacrev``), which the
    Functions do not support, run the layers: the same values as eager."""
    block = _block().eval()  # BatchNorm on running statistics: no in-place update to transform
    x = torch.randn(2, 6, 5, 5, dtype=torch.float64, requires_grad=True)
    assert _term_grad_fns(block, x) == ['NormActScaleBackward'] * 2
    traced = torch.jit.trace(block, x)
    assert 'PythonOp' not in str(traced.inlined_graph)
    other = torch.randn(3, 6, 5, 5, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(traced(other), block(other), rtol=0, atol=0)

    params = dict(block.named_parameters())
    buffers = dict(block.named_buffers())

    def one(sample: Tensor) -> Tensor:  # one (C, H, W) sample as a batch of one
        return torch.func.functional_call(block, (params, buffers), (sample[None], ))[0]

    torch.testing.assert_close(torch.func.vmap(one)(other), block(other))
    tiny = torch.randn(1, 6, 3, 3, dtype=torch.float64)
    jacobian = torch.func.jacrev(block)(tiny)
    torch.testing.assert_close(jacobian, torch.autograd.functional.jacobian(block, tiny))


@pytest.mark.parametrize('case', ['pdc default (BN, IN, LeakyReLU)', 'degree 3',
                                  'affine IN, three 1x1 projection convs'])
def test_fused_term_passes_gradcheck(case):
    """Gradients of z, the norms' affine parameters and α against finite differences."""
    options = dict(CASES[case])
    term = _term(options.pop('degree', 2), **options)
    for module in term.modules():  # keep the running statistics fixed between evaluations
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = 0.0
    names = [n for n, _ in term.named_parameters() if not n.endswith('conv.weight')]
    values = [term.get_parameter(n).detach().clone().requires_grad_() for n in names]
    z = torch.randn(2, 6, 3, 3, dtype=torch.float64, requires_grad=True)

    def fn(z: Tensor, *values: Tensor) -> Tensor:
        out = torch.func.functional_call(term, dict(zip(names, values)), (z, ))
        assert type(out.grad_fn).__name__ == 'NormActScaleBackward'
        return out

    assert torch.autograd.gradcheck(fn, (z, *values))


def test_second_derivative_through_the_fused_term_is_refused():
    term = _term()
    z = torch.randn(2, 6, 4, 4, dtype=torch.float64, requires_grad=True)
    (grad, ) = torch.autograd.grad(term(z).sum(), z, create_graph=True)
    with pytest.raises(RuntimeError, match='once_differentiable|differentiate'):
        grad.sum().backward()


@pytest.fixture
def torch_version(monkeypatch: pytest.MonkeyPatch):
    """Set ``torch.__version__`` for the chains' version gate (its cache cleared around)."""
    from mmpoly.models.polynomial import chain
    chain.torch_tested.cache_clear()
    yield lambda version: monkeypatch.setattr(chain.torch, '__version__', version)
    chain.torch_tested.cache_clear()


@pytest.mark.parametrize('version', ['2.14.0', '2.14.1+cpu', '2.14.3'])
def test_tested_torch_runs_the_fused_chains(torch_version, version):
    from mmpoly.models.polynomial.chain import TESTED_TORCH, torch_tested
    torch_version(version)
    assert TESTED_TORCH == ('2.14', '2.15') and torch_tested(version)
    assert type(_term().float()(torch.randn(2, 6, 5, 5)).grad_fn).__name__ == \
        'NormActScaleBackward'


@pytest.mark.parametrize('version', ['2.11.0', '2.13.1', '2.15.0', '3.0.0.dev1', 'garbage'])
def test_untested_torch_runs_the_layers_and_says_so_once(torch_version, version):
    import logging

    from mmengine.logging import MMLogger
    torch_version(version)
    term, reference = _term(), _term()
    z = torch.randn(2, 6, 5, 5, dtype=torch.float64)
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    MMLogger.get_current_instance().addHandler(handler)
    try:
        out = term(z)
        assert type(out.grad_fn).__name__ == 'MulBackward0'
        torch.testing.assert_close(out, _layers(reference, z))
        term(z)
    finally:
        MMLogger.get_current_instance().removeHandler(handler)
    messages = [m for m in messages if 'term chains' in m]
    assert len(messages) == 1, messages
    assert f'with torch {version} the terms run their layers' in messages[0]
    assert 'tested with torch >=2.14,<2.15' in messages[0]
