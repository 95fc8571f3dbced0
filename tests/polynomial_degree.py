"""Numerical polynomial degree of a function along a line, by finite differences.

Along the line t -> x0 + t·d, a polynomial map of degree n in x is a polynomial of degree <= n
in t (exactly n for a generic direction d). Over equally spaced t its (n+1)-th finite difference
vanishes and its n-th does not (it is n!·h^n times the leading coefficient).
"""
from typing import Callable, Optional

import torch


def finite_differences(values: torch.Tensor, order: int) -> torch.Tensor:
    """The ``order``-th forward difference along dim 0: (K, ...) -> (K - order, ...)."""
    for _ in range(order):
        values = values[1:] - values[:-1]
    return values


@torch.no_grad()
def numerical_degree(fn: Callable[[torch.Tensor], torch.Tensor],
                     x0: torch.Tensor,
                     d: torch.Tensor,
                     max_degree: int,
                     step: float = 0.5,
                     rtol: float = 1e-9) -> Optional[int]:
    """Smallest n such that the (n+1)-th finite difference of t -> fn(x0 + t·d) is ~0.

    ``fn`` is sampled at ``max_degree + 3`` equally spaced t (spacing ``step``, centred on 0),
    so n up to ``max_degree + 1`` can be recognised. A difference is ~0 when every entry is at
    most ``rtol`` times the largest |fn| over the samples. Use float64 (x0, d and fn's
    parameters): float32 rounding makes high differences non-zero at ~1e-7.

    Returns:
        n in [0, max_degree + 1], or None if no difference up to order max_degree + 2
        vanishes (a degree above max_degree + 1, or not a polynomial, e.g. with a softmax).
    """
    if max_degree < 0:
        raise ValueError(f'max_degree must be >= 0, got {max_degree}')
    num = max_degree + 3
    ts = (torch.arange(num, dtype=torch.float64) - (num - 1) / 2) * step
    samples = []
    for t in ts:
        out = torch.as_tensor(fn(x0 + float(t) * d))
        if out.dtype != torch.float64:
            raise ValueError(f'numerical_degree needs float64 outputs, got {out.dtype}')
        samples.append(out.reshape(-1))
    values = torch.stack(samples)
    scale = values.abs().max().clamp_min(torch.finfo(torch.float64).tiny)
    for n in range(0, max_degree + 2):
        if finite_differences(values, n + 1).abs().max() <= rtol * scale:
            return n
    return None
