"""mmpoly models, registered in mmpretrain's MODELS registry (and mmdet's) on import; importing
them changes nothing else (no mmengine loader or backend, see :mod:`mmpoly.engine`).

Layout (the paper's taxonomy): ``polynomial/`` the shared core (factors, Hadamard product,
projection, terms); ``blocks/`` blocks by degree; ``backbones/`` ResNet-style backbones that
take a block type; ``nonlocal_family/`` non-local blocks (degree 3, 4) plugged in after stages.
"""
from .backbones import *  # noqa: F401,F403
from .blocks import *  # noqa: F401,F403
from .nonlocal_family import *  # noqa: F401,F403
from .polynomial import *  # noqa: F401,F403
from mmpoly.registry import register_in_mmdet  # noqa: E402

register_in_mmdet()  # the same classes under the same names in mmdet's MODELS (new names only)
