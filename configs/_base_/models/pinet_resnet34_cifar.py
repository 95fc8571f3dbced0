# Π-net-ResNet34 (T-C10 13.0M; guessed layout): blocks [1, 2, 3, 2], one 1×1 conv + BN on the
# product. T-C100-34's 14.7M row uses [2, 3, 4, 2] (set in its leaf config).
_base_ = ['./pinet_resnet18_cifar.py']
model = dict(
    backbone=dict(stage_blocks=[1, 2, 3, 2], block_cfg=dict(num_projection_convs=1)))
