# ResNet18 (arXiv:2104.07916, table "Speech Commands", 11.2M): CIFAR ResNet18, 1 input channel
# (log-mel), 37 outputs.
_base_ = [
    '_base_/models/resnet18_cifar.py', '_base_/datasets/speech-commands_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
model = dict(backbone=dict(in_channels=1), head=dict(num_classes=37))
