# ImageNet-1k recipe of the paper (P §4.1): mmpretrain's ResNet18 baseline pipeline
# (RandomResizedCrop 224 + flip; resize 256 + center crop 224), 8 GPUs × 32 images, SGD lr 0.1,
# momentum 0.9, wd 1e-4, 100 epochs with lr ×0.1 at 30/60/90.
_base_ = [
    './datasets/imagenet_bs32.py',
    'mmpretrain::_base_/schedules/imagenet_bs256.py', './default_runtime.py'
]
