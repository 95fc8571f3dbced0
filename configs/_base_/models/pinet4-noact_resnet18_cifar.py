# Π-net^[4] without activations (T-NA*, 11.2M; SPEC §1.3 GUESS): as Π-net^[3], degree 4.
_base_ = ['./pinet3-noact_resnet18_cifar.py']
model = dict(backbone=dict(block_cfg=dict(degree=4)))
