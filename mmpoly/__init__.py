"""mmpoly: the polynomial networks of arXiv:2104.07916 for mmpretrain and mmdet.

Importing mmpoly checks the installed OpenMMLab stack against the supported ranges
(:mod:`mmpoly.version`) and registers mmpoly's classifiers with mmpretrain's model hub
(:mod:`mmpoly.utils.model_hub`); it changes nothing else. Runner-side changes to mmengine (safe
checkpoint loading, atomic saving) come with ``import mmpoly.engine``.
"""
from .version import __version__, check_requirements

check_requirements()

from .utils.model_hub import register_model_hub  # noqa: E402  (after the version check)

register_model_hub()

__all__ = ['__version__']
