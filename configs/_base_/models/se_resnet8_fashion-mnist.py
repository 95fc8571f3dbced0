# SE-ResNet8 (degree 2): the zoo's ResNet8 with an SE gate (reduction 4, as the CIFAR SENet of
# T-C10, Table 3 of arXiv:2104.07916) on every block's branch.
_base_ = ['./resnet8_fashion-mnist.py']
model = dict(backbone=dict(block_cfg=dict(type='SEBlock', reduction=4)))
