# PDC-param (T-C100 11.4M; guessed layout): blocks [2, 2, 2, 1] of 64-128-256-512, both convs in
# the first-degree branch, factor width 128 in every stage.
_base_ = ['./pdc-comp_resnet18_cifar.py']
model = dict(
    backbone=dict(
        stage_channels=[64, 128, 256, 512],
        hidden_channels=[128, 128, 128, 128],
        block_cfg=dict(first_degree_convs=2)),
    head=dict(in_channels=512))
