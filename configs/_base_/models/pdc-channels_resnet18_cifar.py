# PDC-channels (T-C100 19.2M; guessed layout): ResNet18's blocks and channels, both convs,
# factor widths 64-96-128-192.
_base_ = ['./pdc-param_resnet18_cifar.py']
model = dict(backbone=dict(stage_blocks=[2, 2, 2, 2], hidden_channels=[64, 96, 128, 192]))
