# CIFAR ResNet34 (T-C10, T-C100-34, 21.3M): [3, 4, 6, 3] ResNet blocks of 64-512.
_base_ = ['./resnet18_cifar.py']
model = dict(backbone=dict(depth=34))
