"""Datasets that mmpoly registers in mmpretrain's DATASETS registry."""
from .local import LocalCIFAR10, LocalCIFAR100, LocalFashionMNIST

__all__ = ['LocalCIFAR10', 'LocalCIFAR100', 'LocalFashionMNIST']
