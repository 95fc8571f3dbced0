# Π-net^[4] without activations (T-NA*, 11.2M; guessed layout): as Π-net^[3], degree 4.
_base_ = ['./pinet3-noact_resnet18_cifar.py']
model = dict(backbone=dict(block_cfg=dict(degree=4)))
