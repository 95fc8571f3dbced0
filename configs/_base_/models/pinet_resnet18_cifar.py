# Π-net-ResNet (T-C10 6.0M, T-C100 6.1M; guessed layout): blocks [2, 2, 1, 1] of 64-512,
# degree-2 Π-net blocks (branch ∘ BN(shortcut)) with two 1×1 convs + BN on the product, α = 0.
_base_ = ['./resnet18_cifar.py']
model = dict(
    backbone=dict(
        type='PolyResNetCIFAR',
        depth=None,
        stage_blocks=[2, 2, 1, 1],
        block_cfg=dict(
            _delete_=True,
            type='PiNetBlock',
            degree=2,
            num_projection_convs=2,
            projection_kernel_size=1,
            input_norm='BN',
            projection_norm='BN')))
