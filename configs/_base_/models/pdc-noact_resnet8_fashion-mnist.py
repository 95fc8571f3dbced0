# PDC-ResNet8 without activation functions (as T-NA10): the zoo's PDC-ResNet8, no activation in
# the stem, the branches or the factors.
_base_ = ['./pdc_resnet8_fashion-mnist.py']
model = dict(backbone=dict(use_activation=False))
