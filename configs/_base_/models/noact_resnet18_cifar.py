# ResNet18 without activation functions (T-NA10, T-NA100): a product of first-degree blocks.
_base_ = ['./resnet18_cifar.py']
model = dict(backbone=dict(use_activation=False))
