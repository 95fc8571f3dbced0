# SENet18 (T-C10 11.5M, T-C100 11.6M; fitted): CIFAR ResNet18 with an SE gate
# (reduction 4) on every block's branch.
_base_ = ['./resnet18_cifar.py']
model = dict(backbone=dict(block_cfg=dict(type='SEBlock', reduction=4)))
