# ResNet8 for 28×28 grey images (degree 1), the Fashion-MNIST zoo's baseline: the zoo's trunk
# (3×3 stem, one block per stage at 32-64-128, stride 2 each: 28 → 14 → 7 → 4) with
# ResNet blocks instead of PDC blocks.
_base_ = ['./pdc_resnet8_fashion-mnist.py']
model = dict(
    backbone=dict(
        type='PolyResNetCIFAR', hidden_channels=None,
        block_cfg=dict(_delete_=True, type='ResNetBlock')))
