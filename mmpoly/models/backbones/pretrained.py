"""Strict ``init_cfg=dict(type='Pretrained')`` for mmpoly backbones.

mmengine's ``PretrainedInit`` loads with ``strict=False``: a checkpoint of another model (other
widths, another block type, a missing prefix) only logs warnings and leaves the backbone partly
random. mmpoly backbones load their ``Pretrained`` init_cfg here instead, where every backbone
tensor must come from the checkpoint with its shape, and nothing else may be left over.

Accepted key layouts:

* an mmpretrain / mmpoly classifier (``backbone.conv1.weight``, ...) with ``prefix='backbone.'``
  (what ``tools/train.py`` writes for the ImageNet classifier configs);
* a bare backbone or torchvision's ResNet (``conv1.weight``, ``bn1.*``, ``layer1.0.*``) with
  ``prefix=None``; torchvision's classifier ``fc.*`` is dropped (a backbone has none), and logged.

:func:`pretrained_init` finds the ``Pretrained`` entry in every form mmengine accepts, so that
each of them takes the strict path.
"""
import os.path as osp
from collections import OrderedDict
from typing import Any, Dict, List, Optional

import torch
from mmengine.logging import print_log
from mmengine.model.weight_init import PretrainedInit
from mmengine.registry import WEIGHT_INITIALIZERS
from mmengine.runner.checkpoint import CheckpointLoader
from torch import nn

from mmpoly.fileio import compare_state_dicts, load_checkpoint_file
from mmpoly.fileio.state_dict import ignored_key

__all__ = [
    'PRETRAINED_OPTIONS', 'PretrainedMismatchError', 'load_pretrained', 'pretrained_init',
    'pretrained_options'
]

#: Keys of a ``Pretrained`` init_cfg of an mmpoly backbone (mmengine's plus ``classifier_config``).
PRETRAINED_OPTIONS = ('type', 'checkpoint', 'prefix', 'map_location', 'classifier_config')
#: torchvision's ResNet classifier, not part of any backbone.
TORCHVISION_HEAD = 'fc.'


class PretrainedMismatchError(ValueError):
    """A checkpoint does not hold exactly the backbone's tensors."""


def _is_pretrained_type(init_type: Any) -> bool:
    """Whether mmengine builds ``init_type`` as its ``PretrainedInit``: 'Pretrained', a
    scoped name such as 'mmengine.Pretrained', or the class itself."""
    if isinstance(init_type, type):
        return issubclass(init_type, PretrainedInit)
    if not isinstance(init_type, str):
        return False
    if init_type == 'Pretrained':
        return True
    with WEIGHT_INITIALIZERS.switch_scope_and_registry(None) as registry:
        try:
            found = registry.get(init_type)
        except KeyError:  # an unknown scope prefix
            found = None
    return isinstance(found, type) and issubclass(found, PretrainedInit)


def pretrained_init(init_cfg: Any, field: str = 'init_cfg') -> Optional[dict]:
    """The ``Pretrained`` entry of ``init_cfg`` (a dict, or a dict in a list), or None.

    Every spelling mmengine accepts counts (see :func:`_is_pretrained_type`), so none of them
    escapes the strict load. Two entries raise a ValueError naming ``field``.
    """
    entries = init_cfg if isinstance(init_cfg, (list, tuple)) else [init_cfg]
    found = [(i, e) for i, e in enumerate(entries)
             if isinstance(e, dict) and _is_pretrained_type(e.get('type'))]
    if len(found) > 1:
        where = [f'{field}[{i}]' for i, _ in found]
        raise ValueError(f'{field} has {len(found)} Pretrained inits ({", ".join(where)}); one '
                         'checkpoint initialises the backbone: keep one of them')
    return found[0][1] if found else None


def pretrained_options(cfg: dict, field: str = 'backbone init_cfg') -> dict:
    """The keyword arguments of :func:`load_pretrained` from a ``Pretrained`` init_cfg."""
    options = dict(cfg)
    unknown = set(options) - set(PRETRAINED_OPTIONS)
    if unknown:
        raise ValueError(f'{field} (Pretrained) has unknown keys {sorted(unknown)}; allowed: '
                         f'{list(PRETRAINED_OPTIONS)}')
    if not options.get('checkpoint'):
        raise ValueError(f'{field} (Pretrained) needs checkpoint=PATH')
    options.pop('type')
    return options


def _describe(keys: List[str], limit: int = 6) -> str:
    shown = ', '.join(keys[:limit])
    return f'{len(keys)} ({shown}{", ..." if len(keys) > limit else ""})'


def _select(state: Dict[str, torch.Tensor], prefix: Optional[str], checkpoint: str,
            ) -> Dict[str, torch.Tensor]:
    if prefix:
        if not prefix.endswith('.'):
            prefix += '.'
        selected = OrderedDict((k[len(prefix):], v) for k, v in state.items()
                               if k.startswith(prefix))
        if not selected:
            roots = sorted({k.split('.')[0] + '.' for k in state})
            raise PretrainedMismatchError(
                f'init_cfg.prefix={prefix!r}: no key of {checkpoint} starts with it; its keys '
                f'start with {roots[:8]}. Use prefix=None for a bare backbone or torchvision file.')
        return selected
    dropped = [k for k in state if k.startswith(TORCHVISION_HEAD)]
    if dropped:
        print_log(f'Pretrained {checkpoint}: dropped the classifier {_describe(dropped)}; a '
                  'backbone has no classifier', logger='current')
    return OrderedDict((k, v) for k, v in state.items() if not k.startswith(TORCHVISION_HEAD))


def load_pretrained(module: nn.Module,
                    checkpoint: str,
                    prefix: Optional[str] = None,
                    map_location: str = 'cpu',
                    classifier_config: Optional[str] = None) -> None:
    """Load ``checkpoint`` into ``module``; every tensor must match by name and shape.

    Args:
        module: the backbone.
        checkpoint: a local path or any mmengine checkpoint URL (``torchvision://``, ...).
        prefix: keep only keys starting with it, stripped (``'backbone.'`` for a classifier).
        map_location: where the tensors are loaded.
        classifier_config: the config that trains this checkpoint, named in the error raised
            when a local file is missing.

    Raises:
        FileNotFoundError: a local ``checkpoint`` that does not exist.
        PretrainedMismatchError: missing, unexpected or differently shaped tensors.
    """
    if '://' not in checkpoint and not osp.isfile(osp.expanduser(checkpoint)):  # as loaded
        how = (f'It is written by training the classifier config {classifier_config} (e.g. '
               f'tools/dist_train.sh {classifier_config} 8); ' if classifier_config else '')
        raise FileNotFoundError(
            f'backbone init_cfg.checkpoint {checkpoint!r} does not exist. {how}set '
            '--cfg-options model.backbone.init_cfg.checkpoint=PATH to use another file.')
    loaded = CheckpointLoader.load_checkpoint(checkpoint, map_location=map_location,
                                              logger='current') if '://' in checkpoint else \
        load_checkpoint_file(checkpoint, map_location=map_location)
    state = loaded.get('state_dict', loaded) if isinstance(loaded, dict) else None
    if not isinstance(state, dict):
        raise PretrainedMismatchError(f'{checkpoint} holds no state dict '
                                      f'(got {type(loaded).__name__})')
    state = _select(state, prefix, checkpoint)
    own = module.state_dict()
    missing, unexpected, shapes = compare_state_dicts(own, state)
    mismatched = [f'{k} {c} vs {m}' for k, c, m in shapes]
    if missing or unexpected or mismatched:
        parts = [f'{name} {_describe(keys)}' for name, keys in
                 (('missing', missing), ('unexpected', unexpected),
                  ('shape mismatches (checkpoint vs backbone)', mismatched)) if keys]
        expected = (f', as {classifier_config} trains it' if classifier_config else '')
        raise PretrainedMismatchError(
            f'{checkpoint} does not fit this {type(module).__name__} (prefix={prefix!r}): '
            f'{"; ".join(parts)}. The checkpoint must come from a model with the same backbone '
            f'(depth, widths, block type and degree, plugins){expected}.')
    module.load_state_dict(state, strict=False)  # strictness checked above
    # counted as a mismatch counts them: BatchNorm step counters aside (absent from older files)
    counted = [key for key in own if not ignored_key(key)]
    print_log(f'Pretrained: loaded all {len(counted)} backbone tensors of '
              f'{type(module).__name__} from {checkpoint} (prefix={prefix!r}; BatchNorm '
              'num_batches_tracked counters not counted)', logger='current')
