# Π-net^[3] without activations (T-NA*, 11.2M; guessed layout): degree-3 Π-net blocks whose
# higher degrees reuse the shared factors, adding no conv (BN on the shared factor only).
_base_ = ['./pinet-noact_resnet18_cifar.py']
model = dict(
    backbone=dict(block_cfg=dict(degree=3, num_projection_convs=0, projection_norm='none')))
