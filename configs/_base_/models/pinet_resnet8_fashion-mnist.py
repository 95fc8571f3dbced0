# Π-net-ResNet8 (degree 2): the zoo's ResNet8 with the CIFAR Π-net block (branch ∘ BN(shortcut),
# two 1×1 convs + BN on the product, α = 0; the other options are PiNetBlock's defaults), one
# block per stage.
_base_ = ['./resnet8_fashion-mnist.py']
model = dict(backbone=dict(block_cfg=dict(type='PiNetBlock', degree=2, num_projection_convs=2)))
