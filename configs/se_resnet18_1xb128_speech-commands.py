# SE-ResNet18 (arXiv:2104.07916, table "Speech Commands", 11.5M): SE reduction 4, 1 input
# channel, 37 outputs.
_base_ = [
    '_base_/models/se_resnet18_cifar.py', '_base_/datasets/speech-commands_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
model = dict(backbone=dict(in_channels=1), head=dict(num_classes=37))
