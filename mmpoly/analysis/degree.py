"""The polynomial degree of blocks and backbones, measured numerically (arXiv:2104.07916).

Without activations, every block of the paper's taxonomy is a polynomial of its input: the
ResNet block has degree 1, SE degree 2 (eq. (3)), NL degree 3 (eq. (6), without the softmax;
DNL eq. (7)), Π-net and PDC blocks degree N (eqs. (8), (10)), PDC-NL[3] / PDC-NL[4] degree 3 / 4
(eqs. (11), (12)), and a stack of blocks has (generically) the product of their degrees.

Method. Along a line t -> x0 + t·d, a polynomial map of degree n in x is a polynomial of degree
<= n in t (exactly n for a generic direction d): over equally spaced t its (n+1)-th finite
difference vanishes and its n-th does not. Everything runs in float64 with random weights (a
degree is a property of the architecture; α = 0 or a zero-initialised γ would hide terms).

What is not a polynomial, and what the analysis does about it:

* activations and softmax: switched off with the options that exist (``use_activation``,
  ``use_softmax``, see :func:`polynomial_config`); any that remain are named in the notes and
  the measurement reports the block as not a polynomial;
* BatchNorm: eval mode with random running statistics, an affine map (degree 1);
* InstanceNorm / GroupNorm / LayerNorm divide by a data-dependent std: their statistics are
  frozen at the reference input (:class:`FrozenStatsNorm`), which makes them affine as BN in
  eval mode (``freeze=False`` keeps them, and the blocks that hold them measure as non-polynomial);
* max-pooling (ImageNet stem): not a polynomial; each block is measured on its own input and the
  backbone from the stem output when the stem is not a polynomial.

Finite differences of order n amplify rounding by ~2^n, so degrees above
:data:`MAX_MEASURABLE_DEGREE` cannot be measured in float64; a higher degree is reported as a
lower bound next to the product of the block degrees.
"""
import copy
import inspect
import math
import numbers
import os.path as osp
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm
from torch.nn.modules.pooling import _AdaptiveMaxPoolNd, _MaxPoolNd

from mmpoly.registry import MODELS
from mmpoly.utils.complexity import build_model, default_input_shape
from mmpoly.utils.startup import check_cfg_options

#: Highest degree finite differences can resolve in float64 (rounding grows ~2^n with order n).
MAX_MEASURABLE_DEGREE = 20
#: Options set to False to make a module a polynomial, where its class accepts them.
SWITCH_OFF_OPTIONS = ('use_activation', 'use_softmax')
#: What :func:`analyse_backbone` can measure (the stem is measured with the backbone).
PARTS = ('blocks', 'stages', 'backbone')
#: Modules that are not polynomials (activations, softmax, max-pooling).
NON_POLYNOMIAL_MODULES = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.SELU,
                          nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Sigmoid, nn.Tanh, nn.Hardtanh,
                          nn.Hardswish, nn.Hardsigmoid, nn.Softplus, nn.Softsign, nn.Softmax,
                          nn.LogSoftmax, nn.Threshold, _MaxPoolNd, _AdaptiveMaxPoolNd)

Rows = List['DegreeRow']


def finite_differences(values: Tensor, order: int) -> Tensor:
    """The ``order``-th forward difference along dim 0: (K, ...) -> (K - order, ...)."""
    for _ in range(order):
        values = values[1:] - values[:-1]
    return values


def _flat(out: Union[Tensor, Sequence[Tensor]]) -> Tensor:
    """A module output (a tensor or a tuple / list of tensors) as one flat tensor."""
    if isinstance(out, (tuple, list)):
        return torch.cat([torch.as_tensor(o).reshape(-1) for o in out])
    return torch.as_tensor(out).reshape(-1)


@torch.no_grad()
def numerical_degree(fn: Callable[[Tensor], Union[Tensor, Sequence[Tensor]]],
                     x0: Tensor,
                     d: Tensor,
                     max_degree: int,
                     step: float = 0.5,
                     rtol: float = 1e-9) -> Optional[int]:
    """Smallest n such that the (n+1)-th finite difference of t -> fn(x0 + t·d) is ~0.

    ``fn`` is sampled at ``max_degree + 3`` equally spaced t (spacing ``step``, centred on 0),
    so n up to ``max_degree + 1`` can be recognised. A difference is ~0 when every entry is at
    most ``rtol`` times the largest |fn| over the samples. Use float64 (x0, d and fn's
    parameters): float32 rounding makes high differences non-zero at ~1e-7. ``fn`` may return
    a tensor of any shape or a tuple of tensors (a backbone's outputs).

    Returns:
        n in [0, max_degree + 1], or None if no difference up to order max_degree + 2
        vanishes (a degree above max_degree + 1, or not a polynomial, e.g. with a softmax).
    """
    if isinstance(max_degree, bool) or not isinstance(max_degree, int) or max_degree < 0:
        raise ValueError(f'max_degree must be an int >= 0, got {max_degree!r}')
    if x0.shape != d.shape:
        raise ValueError(f'x0 {tuple(x0.shape)} and d {tuple(d.shape)} must have one shape')
    # a zero step or direction samples one point: every function would read as degree 0
    for name, value in (('step', step), ('rtol', rtol)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value) or value <= 0:
            raise ValueError(f'{name} must be a finite number > 0, got {value!r}')
    if not bool(torch.any(d != 0)):
        raise ValueError('d must be a non-zero direction: along d = 0 every function is '
                         'constant (degree 0)')
    num = max_degree + 3
    ts = (torch.arange(num, dtype=torch.float64) - (num - 1) / 2) * step
    samples = []
    for t in ts:
        out = _flat(fn(x0 + float(t) * d))
        if out.dtype != torch.float64:
            raise ValueError(f'numerical_degree needs float64 outputs, got {out.dtype}')
        samples.append(out)
    values = torch.stack(samples)
    scale = values.abs().max().clamp_min(torch.finfo(torch.float64).tiny)
    for n in range(0, max_degree + 2):
        if finite_differences(values, n + 1).abs().max() <= rtol * scale:
            return n
    return None


@torch.no_grad()
def randomise_parameters(module: nn.Module, seed: int = 0) -> nn.Module:
    """Draw every parameter and BN running statistic at random (seeded), in place.

    Conv / linear weights ~ N(0, 1/fan_in) (activations stay O(1) through deep stacks), biases
    ~ N(0, 0.1²), every other parameter (norm γ, the scales α of the higher-degree terms)
    ~ U(0.5, 1.5), so that no term is switched off; BN running mean ~ N(0, 0.1²), running
    variance ~ U(0.5, 1.5).
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(p: Tensor, std: float) -> Tensor:
        return (torch.randn(p.shape, generator=gen, dtype=torch.float64) * std).to(p)

    def uniform(p: Tensor) -> Tensor:
        return (torch.rand(p.shape, generator=gen, dtype=torch.float64) + 0.5).to(p)

    for m in module.modules():
        for name, p in m.named_parameters(recurse=False):
            if p.dim() >= 2:
                p.copy_(normal(p, 1.0 / math.sqrt(max(p[0].numel(), 1))))
            elif name == 'bias':
                p.copy_(normal(p, 0.1))
            else:
                p.copy_(uniform(p))
        if isinstance(m, _BatchNorm) and m.running_mean is not None:
            m.running_mean.copy_(normal(m.running_mean, 0.1))
            m.running_var.copy_(uniform(m.running_var))
    return module


class FrozenStatsNorm(nn.Module):
    """InstanceNorm / GroupNorm / LayerNorm with the statistics of the first input it sees.

    The first forward computes the norm's mean and std of its input and keeps them; from then on
    the module is ``γ (x - mean) / std + β`` with those constants, an affine map (degree 1) like
    BatchNorm in eval mode. Shapes: x (B, C, ...) -> (B, C, ...), B and the normalised sizes as
    at the first forward.
    """

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        if not is_data_dependent_norm(norm):
            raise ValueError(f'FrozenStatsNorm takes nn.InstanceNorm*, nn.GroupNorm or '
                             f'nn.LayerNorm (data-dependent statistics), got {type(norm)}')
        self.norm = norm
        self.mean: Optional[Tensor] = None
        self.std: Optional[Tensor] = None

    def _grouped(self, x: Tensor) -> Tuple[Tensor, Tuple[int, ...]]:
        """x reshaped as the norm groups it, and the dims it reduces over."""
        if isinstance(self.norm, nn.GroupNorm):
            return x.reshape(x.shape[0], self.norm.num_groups, -1), (-1, )
        if isinstance(self.norm, nn.LayerNorm):
            return x, tuple(range(-len(self.norm.normalized_shape), 0))
        return x, tuple(range(2, x.dim()))  # instance norm: per sample and channel

    def forward(self, x: Tensor) -> Tensor:
        grouped, dims = self._grouped(x)
        if self.mean is None:
            self.mean = grouped.mean(dims, keepdim=True).detach()
            self.std = (grouped.var(dims, unbiased=False, keepdim=True) +
                        self.norm.eps).sqrt().detach()
        out = ((grouped - self.mean) / self.std).reshape(x.shape)
        weight, bias = getattr(self.norm, 'weight', None), getattr(self.norm, 'bias', None)
        if not isinstance(self.norm, nn.LayerNorm):  # per-channel γ, β
            shape = (1, x.shape[1]) + (1, ) * (x.dim() - 2)
            weight = None if weight is None else weight.view(shape)
            bias = None if bias is None else bias.view(shape)
        if weight is not None:
            out = out * weight
        return out if bias is None else out + bias


def is_data_dependent_norm(module: nn.Module) -> bool:
    """InstanceNorm without running statistics, GroupNorm or LayerNorm (exact torch types)."""
    if isinstance(module, _InstanceNorm):
        return not module.track_running_stats
    return type(module) in (nn.GroupNorm, nn.LayerNorm)


def freeze_norms(module: nn.Module) -> List[str]:
    """Wrap every data-dependent norm of ``module`` in :class:`FrozenStatsNorm`, in place.

    Returns the names of the wrapped modules.
    """
    targets = [(name, m) for name, m in module.named_modules()
               if name and is_data_dependent_norm(m)]
    for name, norm in targets:
        parent_name, _, child = name.rpartition('.')
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, child, FrozenStatsNorm(norm))
    return [name for name, _ in targets]


def non_polynomial_parts(module: nn.Module) -> List[str]:
    """Type names of the non-polynomial modules left in ``module`` (activations, softmax,
    max-pooling, norms with data-dependent statistics), sorted."""
    found = set()
    frozen = {id(n) for m in module.modules() if isinstance(m, FrozenStatsNorm)
              for n in m.modules()}
    for m in module.modules():
        if id(m) in frozen:
            continue
        if isinstance(m, NON_POLYNOMIAL_MODULES) or is_data_dependent_norm(m):
            found.add(type(m).__name__)
        elif 'Norm' in type(m).__name__ and not isinstance(m, (_BatchNorm, _InstanceNorm)):
            found.add(f'{type(m).__name__} (norm of unknown statistics)')
    return sorted(found)


# -- config: switch off what can be switched off --------------------------------------------

def _accepts(cls: type, option: str) -> bool:
    """Whether ``cls(...)`` takes keyword ``option`` (following ``**kwargs`` up the MRO)."""
    for klass in cls.__mro__:
        if '__init__' not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters
        if option in params:
            return True
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return False
    return False


def _switch_off(module_cfg: dict, field_name: str, skip: Iterable[str] = ()) -> List[str]:
    """Set every option of :data:`SWITCH_OFF_OPTIONS` the module type accepts to False."""
    module_type = module_cfg.get('type')
    cls = MODELS.get(module_type) if isinstance(module_type, str) else module_type
    if not inspect.isclass(cls):
        return []
    switched = []
    for option in SWITCH_OFF_OPTIONS:
        if option in skip or not _accepts(cls, option):
            continue
        if module_cfg.get(option, True) is not False:
            switched.append(f'{field_name}.{option}=False')
        module_cfg[option] = False
    return switched


def polynomial_config(cfg: Config) -> Tuple[Config, List[str]]:
    """A copy of ``cfg`` with its backbone's activations (and softmax) off, and what was switched.

    Sets ``use_activation=False`` / ``use_softmax=False`` where the backbone, its ``block_cfg``
    (``use_softmax`` only: the backbone passes ``use_activation`` to its blocks) and each
    ``plugins[k].cfg`` accept them. A backbone without a ``use_activation`` option is named in
    the returned notes: its activations stay on.
    """
    cfg = copy.deepcopy(cfg)
    model = cfg.get('model')
    if model is None:
        raise ValueError('the config has no "model" field to analyse')
    backbone = model.get('backbone', model)
    notes = []
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmpretrain')):
        switched = _switch_off(backbone, 'backbone')
        cls = MODELS.get(backbone['type']) if isinstance(backbone.get('type'), str) else None
        if cls is None or not _accepts(cls, 'use_activation'):
            notes.append(f'backbone {backbone.get("type")!r} has no use_activation option: its '
                         'activations stay on')
        if isinstance(backbone.get('block_cfg'), dict):
            switched += _switch_off(backbone['block_cfg'], 'backbone.block_cfg',
                                    skip=('use_activation', ))
        for k, plugin in enumerate(backbone.get('plugins') or []):
            if isinstance(plugin, dict) and isinstance(plugin.get('cfg'), dict):
                switched += _switch_off(plugin['cfg'], f'backbone.plugins[{k}].cfg')
    return cfg, switched + notes


# -- measurement ----------------------------------------------------------------------------

@dataclass
class DegreeRow:
    """One measured part: the stem, a block, a stage or the whole backbone.

    ``measured`` is None when no finite difference up to order ``max_degree + 2`` vanished;
    ``expected`` is the degree the block declares (its ``degree`` attribute) or, for a stage or
    the backbone, the product of its blocks' declared degrees.
    """
    part: str  # 'stem', 'block', 'stage' or 'backbone'
    name: str
    type: str
    input: str  # what the degree is a function of
    input_shape: Tuple[int, ...]
    measured: Optional[int]
    expected: Optional[int]
    status: str = ''
    notes: List[str] = field(default_factory=list)


def _status(measured: Optional[int], expected: Optional[int], max_degree: int) -> str:
    if measured is None:
        if expected is None:
            return f'no degree <= {max_degree + 1}'
        return 'beyond max' if expected > max_degree + 1 else 'not a polynomial'
    if expected is None:
        return 'measured'
    if measured == expected:
        return 'match'
    return 'below expected' if measured < expected else 'MISMATCH'


def _product(degrees: Iterable[Optional[int]]) -> Optional[int]:
    total = 1
    for n in degrees:
        if n is None:
            return None
        total *= n
    return total


def _declared(module: nn.Module) -> Optional[int]:
    degree = getattr(module, 'degree', None)
    return degree if isinstance(degree, int) and not isinstance(degree, bool) else None


def _stages(backbone: nn.Module) -> List[Tuple[str, nn.Module]]:
    """(name, module) of the backbone's stages (``res_layers``, as mmpoly / mmpretrain ResNets)."""
    names = getattr(backbone, 'res_layers', None)
    if isinstance(names, (list, tuple)) and names and all(isinstance(n, str) for n in names):
        return [(n, getattr(backbone, n)) for n in names]
    return []


def _blocks(backbone: nn.Module, stages: List[Tuple[str, nn.Module]]
            ) -> List[Tuple[str, nn.Module]]:
    """The children of each stage; without stages, the outermost modules declaring a degree."""
    if stages:
        return [(f'{s}.{c}', child) for s, stage in stages for c, child in stage.named_children()]
    found: List[Tuple[str, nn.Module]] = []
    for name, m in backbone.named_modules():
        if name and _declared(m) is not None and \
                not any(name.startswith(f'{outer}.') for outer, _ in found):
            found.append((name, m))
    return found


def _same(a: object, b: Tensor) -> bool:
    return isinstance(a, Tensor) and a.shape == b.shape and torch.equal(a, b)


def _compose(modules: Sequence[nn.Module]) -> Callable[[Tensor], Tensor]:
    def run(x: Tensor) -> Tensor:
        for m in modules:
            x = m(x)
        return x
    return run


@dataclass
class DegreeReport:
    """Degrees of the stem, blocks, stages and backbone of one model, and how they were got."""
    source: str
    input_shape: Tuple[int, ...]
    max_degree: int
    seed: int
    switched_off: List[str]
    frozen_norms: List[str]
    rows: Rows

    def to_dict(self) -> dict:
        return asdict(self)

    def row(self, name: str) -> DegreeRow:
        """The row of part ``name`` (e.g. 'layer1.0', 'layer2', 'backbone')."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f'no row {name!r}; rows: {[r.name for r in self.rows]}')

    def format_table(self) -> str:
        """Plain-text report: settings, then one aligned line per part."""
        limit = self.max_degree + 1
        header = ['part', 'type', 'input', 'measured', 'expected', 'status', 'notes']
        body = []
        for r in self.rows:
            measured = f'> {limit}' if r.measured is None else str(r.measured)
            expected = '—' if r.expected is None else str(r.expected)
            body.append([r.name, r.type, f'{r.input} {"×".join(map(str, r.input_shape))}',
                         measured, expected, r.status, '; '.join(r.notes)])
        widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header) - 1)]
        lines = [
            f'model: {self.source}',
            f'input: {"×".join(map(str, self.input_shape))} float64, random weights '
            f'(seed {self.seed}), BN in eval mode; measurable degrees: 0..{limit}',
            'switched off: ' + (', '.join(self.switched_off) or 'nothing'),
            'norms with frozen statistics: ' + _abridged(self.frozen_norms), ''
        ]
        for row in [header] + body:
            cells = [c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]
            lines.append('  '.join(cells).rstrip())
        return '\n'.join(lines)


def _abridged(names: Sequence[str], shown: int = 2) -> str:
    """'none', the names, or 'N: first, …, last' for a long list."""
    if len(names) <= shown + 1:
        return ', '.join(names) or 'none'
    return f'{len(names)}: {names[0]}, …, {names[-1]}'


def check_parts(parts: Sequence[str]) -> None:
    """``parts`` must be a non-empty selection of :data:`PARTS`."""
    if isinstance(parts, str) or not parts or any(p not in PARTS for p in parts):
        raise ValueError(f'parts must be a non-empty list of {list(PARTS)}, got {parts!r}')


def check_max_degree(max_degree: int) -> int:
    """``max_degree`` must be an int in [1, MAX_MEASURABLE_DEGREE]."""
    if not isinstance(max_degree, int) or isinstance(max_degree, bool) \
            or not 1 <= max_degree <= MAX_MEASURABLE_DEGREE:
        raise ValueError(f'max_degree must be an int in [1, {MAX_MEASURABLE_DEGREE}] (finite '
                         f'differences of higher order lose float64 precision), got '
                         f'{max_degree!r}')
    return max_degree


@torch.no_grad()
def analyse_backbone(backbone: nn.Module,
                     input_shape: Sequence[int],
                     max_degree: int = 10,
                     seed: int = 0,
                     freeze: bool = True,
                     source: Optional[str] = None,
                     switched_off: Sequence[str] = (),
                     parts: Sequence[str] = PARTS) -> DegreeReport:
    """Measure the degree of every block, stage and of the whole ``backbone``.

    The backbone is copied, its weights drawn at random, data-dependent norms frozen (unless
    ``freeze=False``), put in eval mode and float64. One forward of a random (1, C, H, W) image
    records each block's and stage's input; each is then measured on its own input along a
    random direction. Blocks are the children of each stage (``res_layers``) or, for a module
    without stages, its outermost submodules with a ``degree`` attribute; any ``nn.Module``
    works, the whole module being the 'backbone' row.

    Args:
        backbone: the model part, with its activations already off (see
            :func:`polynomial_config`).
        input_shape: (C, H, W) of one input image.
        max_degree: highest degree to resolve, in [1, MAX_MEASURABLE_DEGREE].
        seed: seed of the weights, the input and the directions.
        freeze: wrap InstanceNorm / GroupNorm / LayerNorm in :class:`FrozenStatsNorm`.
        parts: which of :data:`PARTS` to measure (stages and the backbone cost a forward of
            the stages per sample; blocks only is the cheapest).
    """
    check_max_degree(max_degree)
    check_parts(parts)
    if len(input_shape) != 3 or not all(isinstance(s, int) and s > 0 for s in input_shape):
        raise ValueError(f'input_shape must be (C, H, W), three positive ints, got '
                         f'{tuple(input_shape)!r}')
    model = randomise_parameters(copy.deepcopy(backbone), seed)
    frozen = freeze_norms(model) if freeze else []
    model = model.double().eval()
    stages = _stages(model)
    blocks = _blocks(model, stages)
    gen = torch.Generator().manual_seed(seed)
    image = torch.randn((1, *input_shape), generator=gen, dtype=torch.float64)

    inputs: Dict[str, Tensor] = {}
    recorded = blocks + stages

    def recorder(name: str):
        def hook(_module: nn.Module, args: tuple) -> None:
            if name not in inputs and args and isinstance(args[0], Tensor):
                inputs[name] = args[0].detach().clone()
        return hook

    handles = [m.register_forward_pre_hook(recorder(n)) for n, m in recorded]
    try:
        model(image)  # also fixes the statistics of the frozen norms
    finally:
        for h in handles:
            h.remove()

    def measure(fn: Callable[[Tensor], Tensor], x0: Tensor) -> Optional[int]:
        spread = float(x0.std()) if x0.numel() > 1 else 1.0
        d = torch.randn(x0.shape, generator=gen, dtype=torch.float64) * (spread or 1.0)
        return numerical_degree(fn, x0, d, max_degree)

    def make_row(part: str, name: str, module: nn.Module, fn: Callable, x0: Tensor,
                 input_name: str, expected: Optional[int], notes: List[str]) -> DegreeRow:
        measured = measure(fn, x0)
        left = non_polynomial_parts(module)
        status = _status(measured, expected, max_degree)
        if left:
            notes = notes + ['still holds ' + ', '.join(left)]
            status = 'not a polynomial' if measured is None else status
        return DegreeRow(part, name, type(module).__name__, input_name, tuple(x0.shape),
                         measured, expected, status, notes)

    rows: Rows = []
    stem_degree: Optional[int] = None
    stem = getattr(model, 'stem', None)
    first = inputs.get(stages[0][0]) if stages else None
    # the stem is what maps the image to the first stage's input (mmpoly's ``stem()``)
    if 'backbone' in parts and first is not None and callable(stem) and \
            _same(stem(image), first):
        outside = nn.ModuleList(m for n, m in model.named_children()
                                if n not in dict(stages))
        rows.append(make_row('stem', 'stem', outside, stem, image, 'image', None, []))
        rows[-1].type = 'stem'
        stem_degree = rows[-1].measured
    block_degrees: Dict[str, Optional[int]] = {}
    for name, block in blocks:
        if name not in inputs:  # not called by the forward
            continue
        block_degrees[name] = expected = _declared(block)
        if 'blocks' in parts:
            rows.append(make_row('block', name, block, block, inputs[name], 'block input',
                                 expected, [] if expected is not None else ['declares no degree']))
    for name, stage in stages:
        if name in inputs and 'stages' in parts:
            expected = _product(d for b, d in block_degrees.items() if b.startswith(f'{name}.'))
            rows.append(make_row('stage', name, stage, stage, inputs[name], 'stage input',
                                 expected, ['∏ block degrees'] if expected is not None else []))
    if 'backbone' not in parts:
        return DegreeReport(source or type(backbone).__name__, tuple(image.shape), max_degree,
                            seed, list(switched_off), frozen, rows)

    expected = _product(block_degrees.values()) if stages else _declared(model)
    notes = ['∏ block degrees'] if stages and expected is not None else []
    if first is not None and stem_degree is None:
        notes.append('stem is not a polynomial: measured from the stem output' if rows and
                     rows[0].part == 'stem' else 'measured from the input of the first stage')
        row = make_row('backbone', 'backbone', nn.ModuleList(m for _, m in stages),
                       _compose([m for _, m in stages]), first, 'stem output', expected, notes)
    elif first is not None:
        row = make_row('backbone', 'backbone', model, _compose([stem] + [m for _, m in stages]),
                       image, 'image', None if expected is None else expected * stem_degree,
                       notes)
    else:
        row = make_row('backbone', 'backbone', model, model, image, 'image', expected, notes)
    row.type = type(model).__name__
    if row.measured is None and row.status == 'beyond max':
        row.notes.append(f'degree > {max_degree + 1}: a lower bound (max_degree)')
    rows.append(row)
    return DegreeReport(source or type(backbone).__name__, tuple(image.shape), max_degree, seed,
                        list(switched_off), frozen, rows)


def analyse_config(config: Union[str, Config],
                   input_size: Optional[Tuple[int, int]] = None,
                   max_degree: int = 10,
                   seed: int = 0,
                   freeze: bool = True,
                   cfg_options: Optional[dict] = None,
                   parts: Sequence[str] = PARTS) -> DegreeReport:
    """Build a config's backbone with activations off (:func:`polynomial_config`) and measure
    its degrees (:func:`analyse_backbone`).

    Args:
        config: a config file path or a loaded Config.
        input_size: (H, W); default the config's test images
            (:func:`mmpoly.utils.complexity.default_input_shape`).
        cfg_options: overrides merged into the config first (``--cfg-options``), after
            :func:`mmpoly.utils.startup.check_cfg_options` has checked their keys.
        Other args: see :func:`analyse_backbone`.

    Raises:
        mmpoly.utils.startup.StartupError: a ``cfg_options`` key that is a mistake (an argument
            its module does not take, a typo); the message names the key and close matches,
            as the tools' ``--cfg-options`` do. Only the backbone is built, so without this
            check a typo elsewhere (``model.neck.dimm``) would pass unnoticed.
    """
    check_max_degree(max_degree)
    check_parts(parts)
    if input_size is not None and (len(input_size) != 2 or not all(
            isinstance(s, int) and s > 0 for s in input_size)):
        raise ValueError(f'input_size must be (H, W), two positive ints, got '
                         f'{tuple(input_size)!r}')
    source = config if isinstance(config, str) else (config.filename or 'config')
    if isinstance(config, str):
        if not osp.isfile(config):
            raise FileNotFoundError(f'config file {config!r} does not exist')
        from mmpoly.utils.startup import check_model_config, load_config
        config = load_config(config)  # a StartupError for a broken file or _base_
        check_model_config(config, source)
    cfg = copy.deepcopy(config)
    if cfg_options:
        check_cfg_options(cfg, cfg_options)
        cfg.merge_from_dict(cfg_options)
    cfg, switched = polynomial_config(cfg)
    channels, height, width = default_input_shape(cfg)
    if input_size is not None:
        height, width = input_size
    backbone = build_model(cfg, 'backbone')
    return analyse_backbone(backbone, (channels, height, width), max_degree, seed, freeze,
                            source=str(source), switched_off=switched, parts=parts)
