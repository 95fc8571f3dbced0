# ResNet8 without activation functions (as T-NA10, Table 11 of arXiv:2104.07916): the zoo's
# ResNet8 with every activation removed, a product of first-degree blocks.
_base_ = ['./resnet8_fashion-mnist.py']
model = dict(backbone=dict(use_activation=False))
