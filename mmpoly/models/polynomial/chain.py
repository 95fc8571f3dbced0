"""The element-wise chains of a polynomial term with a memory-lean backward pass.

A term α_n · P_n(F_{n,1}(z) ∘ … ∘ F_{n,n}(z)) (paper eq. (10), arXiv:2104.07916) runs two
element-wise chains around its convolutions:

* the factors and their product, Π_i act(norm_i(c_i)) with c_i = conv_i(z);
* the end of the projection, α · act(norm(p)) with p = the projection's last conv output.

Autograd through the layers keeps two maps per factor for the backward pass, its conv output
(for the norm) and its activated map (for the product), and two for the projection's end.
:class:`NormActProduct` and :class:`NormActScale` compute the same function and the same
gradients but keep only the conv outputs and the norms' statistics; the backward pass recomputes
the activated maps from them (one multiply-add and one activation per map). The forward pass
calls the same ATen kernels as the layers (``native_batch_norm``, ``native_group_norm``,
``leaky_relu_``) and updates the BatchNorm running statistics exactly as ``nn.BatchNorm2d`` does.

:func:`fused_term_supported` says when a term runs this way: on a torch release these private
kernels are tested with (:data:`TESTED_TORCH`; on others the layers run, and one log line says
so), with grad enabled, on CPU, float32/float64 input contiguous in NCHW or channels-last order,
outside ``torch.compile`` (whose own partitioner decides what to keep) and autocast, with
BatchNorm / InstanceNorm / no norm and ReLU / LeakyReLU / no activation, and with nothing that
the layers' own ``forward`` calls would serve: no module hook on the term's layers nor a global
one, no ``torch.fx`` / ``torch.jit`` tracing, no functorch transform. Otherwise the term runs
its layers. The backward passes are once differentiable: a second derivative through them
(``create_graph=True``) raises.
"""
import functools
import logging
from typing import Iterable, List, Optional, Sequence, Tuple

import torch
import torch.nn.modules.module as module_hooks
from mmengine.logging import print_log
from packaging.version import InvalidVersion, Version
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .factor import Factor, InstanceNorm2d, functorch_active, group_norm_in_nchw

aten = torch.ops.aten

#: torch releases whose private ATen kernels (signatures and saved statistics) the fused chains
#: are tested with (``tests/test_chain.py``): ``(lowest, first untested)``.
TESTED_TORCH = ('2.14', '2.15')


@functools.lru_cache(maxsize=None)
def torch_tested(version: str) -> bool:
    """Whether torch ``version`` is in :data:`TESTED_TORCH`; logs once per untested version."""
    try:
        release = Version(version.split('+')[0]).release[:2]
    except InvalidVersion:
        release = ()
    lowest, untested = (Version(v).release for v in TESTED_TORCH)
    tested = lowest <= release < untested
    if not tested:
        print_log(f'mmpoly: the memory-lean polynomial term chains are tested with torch '
                  f'>={TESTED_TORCH[0]},<{TESTED_TORCH[1]}; with torch {version} the terms run '
                  'their layers (the same results, more activation memory).', logger='current',
                  level=logging.WARNING)
    return tested


_BATCH, _INSTANCE, _NONE = 'batch', 'instance', 'none'


class NormAct:
    """How one ``norm → activation`` step of a :class:`Factor` runs forward, recomputes its
    output from its input and statistics, and back-propagates.

    norm: ``nn.BatchNorm2d``, mmpoly's :class:`InstanceNorm2d` without running statistics, or
    None; activation: ``nn.ReLU``, ``nn.LeakyReLU`` with a slope >= 0, or None.
    """

    def __init__(self, factor: Factor) -> None:
        if not _supported_factor(factor):
            raise ValueError(f'NormAct: factor {factor!r} is not conv → BatchNorm2d / '
                             f'InstanceNorm2d / none → ReLU / LeakyReLU (slope >= 0) / none')
        self.norm = factor.norm if factor.with_norm else None
        self.kind = _norm_kind(self.norm)
        self.slope = _activation_slope(factor.activate if factor.with_activation else None)
        self.batch_stats = True  # False after a BatchNorm forward pass with running statistics

    @property
    def params(self) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """(weight, bias) of the norm: autograd inputs of the Functions."""
        if self.norm is None:
            return None, None
        return self.norm.weight, self.norm.bias

    # forward ---------------------------------------------------------------------------------
    def forward(self, x: Tensor, weight: Optional[Tensor],
                bias: Optional[Tensor]) -> Tuple[Tensor, Tuple[Tensor, ...]]:
        """act(norm(x)) and the statistics its backward pass needs. Shapes: (B, C, H, W)."""
        if self.kind == _NONE:
            y, stats = x, ()
        elif self.kind == _BATCH:
            y, stats = self._batch_norm(x, weight, bias)
        else:
            batch, channels, height, width = x.shape
            in_nchw = group_norm_in_nchw(x)  # as InstanceNorm2d.forward computes it
            y, mean, rstd = aten.native_group_norm(x.contiguous() if in_nchw else x, weight,
                                                   bias, batch, channels, height * width,
                                                   channels, self.norm.eps)
            if in_nchw:
                y = y.contiguous(memory_format=torch.channels_last)
            stats = (mean, rstd)  # (B, C) each: one group per channel
        return self._activate(y, fresh=y is not x), stats

    def _batch_norm(self, x: Tensor, weight: Optional[Tensor],
                    bias: Optional[Tensor]) -> Tuple[Tensor, Tuple[Tensor, ...]]:
        bn = self.norm  # the statistics and their update as in nn.BatchNorm2d.forward
        factor = 0.0 if bn.momentum is None else bn.momentum
        if bn.training and bn.track_running_stats:
            bn.num_batches_tracked.add_(1)
            if bn.momentum is None:
                factor = 1.0 / float(bn.num_batches_tracked)
        self.batch_stats = bn.training or (bn.running_mean is None and bn.running_var is None)
        keep = not bn.training or bn.track_running_stats
        running_mean = bn.running_mean if keep else None
        running_var = bn.running_var if keep else None
        y, mean, invstd = aten.native_batch_norm(x, weight, bias, running_mean, running_var,
                                                 self.batch_stats, factor, bn.eps)
        if self.batch_stats:
            return y, (mean, invstd)
        # normalised by the running statistics: copies, in case they change before backward
        return y, (running_mean.clone(), running_var.clone())

    def _activate(self, y: Tensor, fresh: bool) -> Tensor:
        if self.slope is None:
            return y
        if self.slope == 0:
            return torch.relu_(y) if fresh else torch.relu(y)
        return nn.functional.leaky_relu_(y, self.slope) if fresh else \
            nn.functional.leaky_relu(y, self.slope)

    # backward --------------------------------------------------------------------------------
    def recompute(self, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                  stats: Tuple[Tensor, ...]) -> Tensor:
        """act(norm(x)) again, from x and the forward pass's statistics."""
        if self.kind == _NONE:
            return self._activate(x, fresh=False)
        shape = (1, -1, 1, 1)
        if self.kind == _BATCH:
            mean, invstd = stats
            if not self.batch_stats:  # the running mean and variance
                invstd = (stats[1] + self.norm.eps).rsqrt()
            mean, invstd = mean.view(shape), invstd.view(shape)
        else:
            mean, invstd = (t.view(*x.shape[:2], 1, 1) for t in stats)
        scale = invstd if weight is None else invstd * weight.view(shape)
        shift = -mean * scale if bias is None else bias.view(shape) - mean * scale
        return self._activate(torch.addcmul(shift, x, scale), fresh=True)

    def backward(self, grad: Tensor, out: Tensor, x: Tensor, weight: Optional[Tensor],
                 bias: Optional[Tensor], stats: Tuple[Tensor, ...], needs_input: bool,
                 needs_weight: bool, needs_bias: bool) -> Tuple[Optional[Tensor], ...]:
        """Gradients (x, weight, bias) of act(norm(x)) given its output ``out``."""
        if self.slope is not None:  # the activation keeps the sign: its output decides
            grad = aten.threshold_backward(grad, out, 0) if self.slope == 0 else \
                aten.leaky_relu_backward(grad, out, self.slope, True)
        if self.kind == _NONE:
            return grad, None, None
        mask = [needs_input, needs_weight and weight is not None,
                needs_bias and bias is not None]
        if self.kind == _BATCH:
            first, second = stats  # (mean, invstd) of the batch, or the running mean and var
            if self.batch_stats:
                return aten.native_batch_norm_backward(grad, x, weight, None, None, first,
                                                       second, True, self.norm.eps, mask)
            return aten.native_batch_norm_backward(grad, x, weight, first, second, None, None,
                                                   False, self.norm.eps, mask)
        batch, channels, height, width = x.shape
        mean, rstd = stats
        if group_norm_in_nchw(x):  # as the forward pass: the NCHW kernel, channels-last out
            gx, gw, gb = aten.native_group_norm_backward(
                grad.contiguous(), x.contiguous(), mean, rstd, weight, batch, channels,
                height * width, channels, mask)
            if gx is not None:
                gx = gx.contiguous(memory_format=torch.channels_last)
            return gx, gw, gb
        return aten.native_group_norm_backward(grad, x, mean, rstd, weight, batch, channels,
                                               height * width, channels, mask)


def _norm_kind(norm: Optional[nn.Module]) -> Optional[str]:
    if norm is None:
        return _NONE
    if type(norm) is nn.BatchNorm2d:
        return _BATCH
    if type(norm) is InstanceNorm2d and not norm.track_running_stats:
        return _INSTANCE
    return None


def _activation_slope(act: Optional[nn.Module]):
    """None: no activation; 0: ReLU; s > 0: LeakyReLU(s); False: not supported."""
    if act is None:
        return None
    if type(act) is nn.ReLU:
        return 0.0
    if type(act) is nn.LeakyReLU and act.negative_slope >= 0:
        return float(act.negative_slope)
    return False


def _supported_factor(factor: nn.Module) -> bool:
    if not isinstance(factor, Factor) or factor.order != ('conv', 'norm', 'act'):
        return False
    norm = factor.norm if factor.with_norm else None
    act = factor.activate if factor.with_activation else None
    return _norm_kind(norm) is not None and _activation_slope(act) is not False


_GLOBAL_HOOK_DICTS = ('_global_forward_hooks', '_global_forward_pre_hooks',
                      '_global_backward_hooks', '_global_backward_pre_hooks')


def _hooked(modules: Iterable[nn.Module]) -> bool:
    """Whether a forward / forward-pre / backward / backward-pre hook is registered on any of
    ``modules`` or their submodules, or globally (``nn.modules.module.register_module_*``).
    Runs in every term's forward pass: a plain walk over ``_modules``, no ``modules()``."""
    if any(getattr(module_hooks, name, None) for name in _GLOBAL_HOOK_DICTS):
        return True
    stack = list(modules)
    while stack:
        module = stack.pop()
        if module is None:  # a child registered as None
            continue
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks \
                or module._backward_pre_hooks:
            return True
        stack.extend(module._modules.values())
    return False


def fused_term_supported(factors: Sequence[nn.Module], projection: nn.Sequential,
                         z: Tensor) -> bool:
    """Whether :func:`fused_term` can run the term of these factors and projection on ``z``.

    False (the term runs its layers one by one) when any of these holds:

    * ``z`` is a ``torch.fx.Proxy`` (symbolic tracing), ``torch.jit.is_tracing()``, or
      functorch transforms are active (``torch.func.vmap``, ``grad``, ``jacrev``, ...);
    * inside ``torch.compile`` or CPU autocast, or with grad disabled;
    * ``z`` is not a CPU float32 / float64 (B, C, H, W) map contiguous in NCHW or channels-last
      order;
    * the torch release is untested (:func:`torch_tested`);
    * a forward / forward-pre / backward / backward-pre hook is registered on a factor or the
      projection (or any submodule of them) or globally (:func:`_hooked`): the fused path
      bypasses those modules' ``forward`` and with it their hooks;
    * a factor or the projection's last layer has a norm or activation :class:`NormAct` does
      not run.
    """
    # a symbolic trace first: every test on a Proxy (its device, dtype, ...) is a Proxy; the
    # autograd Functions here define neither setup_context nor vmap for functorch
    if isinstance(z, torch.fx.Proxy) or torch.jit.is_tracing() or functorch_active():
        return False
    # compiling before torch_tested: dynamo cannot trace it (packaging, logging), and a graph
    # break in every block of a compiled backbone costs more than the fused term saves
    if torch.compiler.is_compiling() or torch.is_autocast_enabled('cpu'):
        return False
    if not (z.device.type == 'cpu' and z.dtype in (torch.float32, torch.float64)
            and z.dim() == 4 and torch.is_grad_enabled()
            and (z.is_contiguous() or z.is_contiguous(memory_format=torch.channels_last))):
        return False
    if not torch_tested(torch.__version__) or _hooked((*factors, projection)):
        return False
    return all(_supported_factor(f) for f in factors) and _supported_factor(projection[-1])


def _grad_inputs(steps: Sequence[NormAct]) -> List[Optional[Tensor]]:
    inputs: List[Optional[Tensor]] = []
    for step in steps:
        inputs += step.params
    return inputs


class NormActProduct(torch.autograd.Function):
    """Π_i act_i(norm_i(c_i)) keeping only the c_i and the norms' statistics for backward.

    Called as ``NormActProduct.apply(steps, c_1, …, c_n, w_1, b_1, …, w_n, b_n)`` with one
    :class:`NormAct` per factor. Shapes: every c_i (B, C, H, W) -> (B, C, H, W).
    """

    @staticmethod
    def forward(ctx, steps: Sequence[NormAct], *tensors: Optional[Tensor]) -> Tensor:
        n = len(steps)
        maps, params = tensors[:n], tensors[n:]
        stats: List[Tuple[Tensor, ...]] = []
        product = _product(steps, maps, params, stats)
        ctx.steps, ctx.sizes = steps, [len(s) for s in stats]
        ctx.save_for_backward(*maps, *params, *[t for s in stats for t in s])
        return product

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> Tuple[Optional[Tensor], ...]:
        steps = ctx.steps
        n = len(steps)
        saved = ctx.saved_tensors
        maps, params, flat = saved[:n], saved[n:3 * n], saved[3 * n:]
        stats, start = [], 0
        for size in ctx.sizes:
            stats.append(flat[start:start + size])
            start += size
        outs = [step.recompute(x, params[2 * i], params[2 * i + 1], stats[i])
                for i, (step, x) in enumerate(zip(steps, maps))]
        needs = ctx.needs_input_grad[1:]
        grads_outs = _product_grads(grad, outs)
        grads_maps: List[Optional[Tensor]] = []
        grads_params: List[Optional[Tensor]] = []
        for i, step in enumerate(steps):
            weight, bias = params[2 * i], params[2 * i + 1]
            need_w = weight is not None and needs[n + 2 * i]
            need_b = bias is not None and needs[n + 2 * i + 1]
            gx = gw = gb = None
            if needs[i] or need_w or need_b:
                gx, gw, gb = step.backward(grads_outs[i], outs[i], maps[i], weight, bias,
                                           stats[i], needs[i], need_w, need_b)
            grads_outs[i] = None  # free it
            grads_maps.append(gx if needs[i] else None)
            grads_params += [gw if need_w else None, gb if need_b else None]
        return (None, *grads_maps, *grads_params)


def _product_grads(grad: Tensor, outs: Sequence[Tensor]) -> List[Tensor]:
    """∂/∂a_i of Π_i a_i given ``grad``, the product's gradient: the other factors' product
    times ``grad``, by prefix products (3n - 4 multiplications for n >= 2 factors)."""
    n = len(outs)
    prefixes = [outs[0]]  # a_1, a_1 a_2, …, a_1 ⋯ a_{n-1}
    for out in outs[1:-1]:
        prefixes.append(prefixes[-1] * out)
    grads: List[Tensor] = [grad] * n
    suffix_grad = grad  # grad · a_{k+1} ⋯ a_n
    for k in range(n - 1, 0, -1):
        grads[k] = suffix_grad * prefixes[k - 1]
        suffix_grad = suffix_grad * outs[k]
    grads[0] = suffix_grad
    return grads


def _product(steps: Sequence[NormAct], maps: Sequence[Tensor],
             params: Sequence[Optional[Tensor]], stats: list) -> Tensor:
    """Π_i act_i(norm_i(maps[i])), appending each step's statistics to ``stats``."""
    product = None
    for i, (step, x) in enumerate(zip(steps, maps)):
        out, s = step.forward(x, params[2 * i], params[2 * i + 1])
        stats.append(s)
        if product is None:
            product = out
        elif product is maps[0]:  # the first factor is its input (no norm, no activation)
            product = product * out
        else:
            product = product.mul_(out)
    return product


class NormActScale(torch.autograd.Function):
    """α · act(norm(p)) keeping only p and the norm's statistics for backward.

    Called as ``NormActScale.apply(step, p, alpha, weight, bias)``; α is a 0-dim tensor.
    Shapes: p (B, C, H, W) -> (B, C, H, W).
    """

    @staticmethod
    def forward(ctx, step: NormAct, p: Tensor, alpha: Tensor, weight: Optional[Tensor],
                bias: Optional[Tensor]) -> Tensor:
        out, stats = step.forward(p, weight, bias)
        ctx.step = step
        ctx.save_for_backward(p, alpha, weight, bias, *stats)
        return out.mul_(alpha) if out is not p else out * alpha

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> Tuple[Optional[Tensor], ...]:
        p, alpha, weight, bias, *stats = ctx.saved_tensors
        step = ctx.step
        out = step.recompute(p, weight, bias, tuple(stats))
        _, need_p, need_alpha, need_w, need_b = ctx.needs_input_grad
        grad_alpha = None
        if need_alpha:
            grad_alpha = torch.dot(grad.reshape(-1), out.reshape(-1)) if grad.is_contiguous() \
                else (grad * out).sum()
            grad_alpha = grad_alpha.reshape(alpha.shape)
        gp = gw = gb = None
        if need_p or need_w or need_b:
            gp, gw, gb = step.backward(grad * alpha, out, p, weight, bias, tuple(stats),
                                       need_p, need_w, need_b)
        return (None, gp if need_p else None, grad_alpha, gw if need_w else None,
                gb if need_b else None)


def fused_term(factors: Sequence[Factor], projection: nn.Sequential, alpha: Tensor,
               z: Tensor) -> Tensor:
    """α · P(Π_i F_i(z)) through :class:`NormActProduct` and :class:`NormActScale` (check
    :func:`fused_term_supported` first). Shapes: z (B, C, H, W) -> (B, C_out, H, W)."""
    steps = [NormAct(f) for f in factors]
    x = NormActProduct.apply(steps, *[f.conv(z) for f in factors], *_grad_inputs(steps))
    *head, last = projection
    for layer in head:
        x = layer(x)
    step = NormAct(last)
    return NormActScale.apply(step, last.conv(x), alpha, *step.params)
