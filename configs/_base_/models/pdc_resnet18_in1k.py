# PDC-ResNet18 (T-IN 10.69M / 1.67G; guessed layout): base width 60 (stages 60-120-240-480),
# ResNet18 blocks, degree-2 PDC terms with 1×1 factors C -> C/4 (BN, LeakyReLU) and a 1×1
# projection C/4 -> C (BN, LeakyReLU), α initialised to 0. Nearest fit: 10.77M (+0.08M).
_base_ = ['./resnet18_in1k.py']
model = dict(
    backbone=dict(
        type='PDCResNet',
        stage_channels=[60, 120, 240, 480],
        hidden_channels=[15, 30, 60, 120],
        block_cfg=dict(
            type='PDCBlock',
            degree=2,
            factor_kernel_size=1,
            projection_kernel_size=1,
            projection_norm='BN')),
    head=dict(in_channels=480))
