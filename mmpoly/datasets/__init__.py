"""Datasets that mmpoly registers: classification sets, the long-tailed / limited-data wrappers,
Speech Commands with its audio transforms and class-balanced sampler (mmpretrain's registries),
the COCO loader (mmdet's), the offline COCO-format set writer, and the input check of the
Fashion-MNIST test pipelines (``CheckGreyImage``)."""
from . import audio_transforms  # noqa: F401  (registers the audio transforms)
from .coco import LocalCocoDataset
from .fashion_coco import FASHION_MNIST_CLASSES, write_fashion_coco
from .image_transforms import CheckGreyImage
from .imagenet import LocalImageNet
from .local import LocalCIFAR10, LocalCIFAR100, LocalFashionMNIST
from .samplers import ClassBalancedSampler
from .speech_commands import SPEECH_COMMANDS_WORDS, SpeechCommands
from .subsets import LimitedDataset, LongTailedDataset, long_tailed_counts

__all__ = ['LocalCIFAR10', 'LocalCIFAR100', 'LocalFashionMNIST', 'LocalImageNet',
           'LocalCocoDataset', 'FASHION_MNIST_CLASSES', 'write_fashion_coco', 'LongTailedDataset',
           'LimitedDataset', 'long_tailed_counts', 'SpeechCommands', 'SPEECH_COMMANDS_WORDS',
           'ClassBalancedSampler', 'CheckGreyImage']
