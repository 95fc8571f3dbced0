# Π-net-ResNet (arXiv:2104.07916, table "Speech Commands", 6.0M): the CIFAR Π-net-ResNet
# (blocks [2, 2, 1, 1], degree 2), 1 input channel, 37 outputs.
_base_ = [
    '_base_/models/pinet_resnet18_cifar.py', '_base_/datasets/speech-commands_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
model = dict(backbone=dict(in_channels=1), head=dict(num_classes=37))
