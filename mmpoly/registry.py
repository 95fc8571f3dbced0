"""mmpoly registers everything in mmpretrain's registries (mmdet reaches them as 'mmpretrain.X')."""
from mmpretrain.registry import DATASETS, HOOKS, METRICS, MODELS, TRANSFORMS

__all__ = ['MODELS', 'DATASETS', 'TRANSFORMS', 'METRICS', 'HOOKS']
