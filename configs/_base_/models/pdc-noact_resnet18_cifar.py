# PDC without activations (T-NA100 5.46M, T-NA10 5.4M; fitted): the official compressed
# configuration with factor widths 128-128-256-256, a 1×1 projection, and no activations.
_base_ = ['./pdc-comp_resnet18_cifar.py']
model = dict(
    backbone=dict(
        use_activation=False,
        hidden_channels=[128, 128, 256, 256],
        block_cfg=dict(projection_kernel_size=1)))
