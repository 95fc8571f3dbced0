# PDC-channels, ResNet34 row (T-C100-34 36.3M; guessed layout): ResNet34's blocks and channels,
# one conv in the first-degree branch, factor widths 128-128-192-384.
_base_ = ['./pdc-comp_resnet18_cifar.py']
model = dict(
    backbone=dict(
        stage_blocks=[3, 4, 6, 3],
        stage_channels=[64, 128, 256, 512],
        hidden_channels=[128, 128, 192, 384]),
    head=dict(in_channels=512))
