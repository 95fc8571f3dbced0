# Π-net-ResNet8 without activation functions (as T-NA10): the zoo's Π-net-ResNet8, no activation.
_base_ = ['./pinet_resnet8_fashion-mnist.py']
model = dict(backbone=dict(use_activation=False))
