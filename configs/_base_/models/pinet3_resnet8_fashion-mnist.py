# Π-net^[3]-ResNet8 (degree 3): the zoo's Π-net-ResNet8 with degree-3 blocks (the factors are
# shared across degrees, so the parameter count is that of degree 2).
_base_ = ['./pinet_resnet8_fashion-mnist.py']
model = dict(backbone=dict(block_cfg=dict(degree=3)))
