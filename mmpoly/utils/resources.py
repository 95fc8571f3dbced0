"""Where mmpoly's configs, tools and model index are: one place for the lookup.

An installed mmpoly (wheel) carries them in ``<package>/.mim/`` (``setup.py`` copies them
there; an editable install links them); a checkout has them at the repository root.
"""
import os.path as osp
from typing import Tuple

__all__ = ['MIM_ROOT', 'CHECKOUT_ROOT', 'RESOURCE_ROOTS', 'resource_path']

_PACKAGE = osp.dirname(osp.dirname(osp.abspath(__file__)))
#: ``configs/``, ``tools/`` and ``model-index.yml`` of an installed package.
MIM_ROOT = osp.join(_PACKAGE, '.mim')
#: The repository root of a checkout (the directory above the ``mmpoly`` package).
CHECKOUT_ROOT = osp.dirname(_PACKAGE)
#: Looked up in this order.
RESOURCE_ROOTS: Tuple[str, ...] = (MIM_ROOT, CHECKOUT_ROOT)


def resource_path(relpath: str) -> str:
    """The path of ``relpath`` (e.g. ``'configs/pdc_resnet18_8xb32_in1k.py'`` or
    ``'model-index.yml'``) under the first of :data:`RESOURCE_ROOTS` that has it."""
    for root in RESOURCE_ROOTS:
        path = osp.join(root, relpath)
        if osp.exists(path):
            return path
    raise FileNotFoundError(f'mmpoly resource {relpath!r} is in none of {list(RESOURCE_ROOTS)} '
                            '(install mmpoly with pip, or run from a checkout)')
