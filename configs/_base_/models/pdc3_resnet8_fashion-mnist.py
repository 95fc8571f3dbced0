# PDC^[3]-ResNet8 (degree 3): the zoo's PDC-ResNet8 with degree-3 blocks (each degree has
# its own factors).
_base_ = ['./pdc_resnet8_fashion-mnist.py']
model = dict(backbone=dict(block_cfg=dict(degree=3)))
