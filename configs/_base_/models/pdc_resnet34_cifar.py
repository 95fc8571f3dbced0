# PDC, ResNet34 row (T-C10, T-C100-34, 10.5M; guessed layout): blocks [2, 3, 4, 1] of
# 64-128-192-384, both convs, factor widths of the official config (64-64-128-128).
_base_ = ['./pdc-comp_resnet18_cifar.py']
model = dict(
    backbone=dict(
        stage_blocks=[2, 3, 4, 1],
        stage_channels=[64, 128, 192, 384],
        block_cfg=dict(first_degree_convs=2)),
    head=dict(in_channels=384))
