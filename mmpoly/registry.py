"""mmpoly's registries.

Every mmpoly module registers in mmpretrain's registries (``MODELS``, ``DATASETS``, ...), where
mmpretrain configs find it. :func:`register_in_mmdet` registers mmpoly's models in mmdet's
``MODELS`` as well, under the same names, so an mmdet config (``default_scope='mmdet'``) writes
``type='PDCResNet'`` as an mmpretrain config does (``type='mmpretrain.PDCResNet'`` works too);
mmpoly's hooks likewise go to mmdet's ``HOOKS``.
mmpoly's detection datasets register in mmdet's ``DATASETS`` only (``DET_DATASETS``).
"""
from mmdet.registry import DATASETS as DET_DATASETS
from mmdet.registry import HOOKS as DET_HOOKS
from mmdet.registry import MODELS as DET_MODELS
from mmengine.registry import Registry
from mmpretrain.registry import DATASETS, HOOKS, METRICS, MODELS, TRANSFORMS

__all__ = ['MODELS', 'DATASETS', 'TRANSFORMS', 'METRICS', 'HOOKS', 'DET_MODELS', 'DET_DATASETS',
           'DET_HOOKS', 'register_in_mmdet']


def register_in_mmdet(source: Registry = MODELS, target: Registry = DET_MODELS) -> None:
    """Register every mmpoly class of ``source`` in ``target`` under the same name.

    Idempotent; a name that ``target`` already holds for another class raises a KeyError.
    """
    for name, cls in list(source.module_dict.items()):
        if not getattr(cls, '__module__', '').startswith('mmpoly.'):
            continue
        if target.module_dict.get(name) is not cls:
            target.register_module(name=name, module=cls)
