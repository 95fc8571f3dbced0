"""Datasets that mmpoly registers: classification sets in mmpretrain's DATASETS registry, the
COCO loader in mmdet's, and the offline COCO-format set writer."""
from .coco import LocalCocoDataset
from .fashion_coco import FASHION_MNIST_CLASSES, write_fashion_coco
from .local import LocalCIFAR10, LocalCIFAR100, LocalFashionMNIST

__all__ = ['LocalCIFAR10', 'LocalCIFAR100', 'LocalFashionMNIST', 'LocalCocoDataset',
           'FASHION_MNIST_CLASSES', 'write_fashion_coco']
