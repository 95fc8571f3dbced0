# SE-ResNet18 (T-IN 11.78M; fitted): SE gate with reduction 16 on every block.
_base_ = ['./resnet18_in1k.py']
model = dict(backbone=dict(block_cfg=dict(type='SEBlock', reduction=16)))
