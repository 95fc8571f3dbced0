# Π-net without activations (T-NA*, 11.9M; fitted): ResNet18 with degree-2 Π-net blocks,
# BN on the shared factor and one 1×1 conv + BN on the product.
_base_ = ['./noact_resnet18_cifar.py']
model = dict(
    backbone=dict(
        type='PolyResNetCIFAR',
        block_cfg=dict(
            _delete_=True,
            type='PiNetBlock',
            degree=2,
            num_projection_convs=1,
            projection_kernel_size=1,
            input_norm='BN',
            projection_norm='BN')))
