# ResNet7 (arXiv:2104.07916, table "Speech Commands", 4.9M): the CIFAR ResNet with one block
# per stage ([1, 1, 1, 1], 64-512), 1 input channel (log-mel), 37 outputs.
_base_ = [
    '_base_/models/resnet18_cifar.py', '_base_/datasets/speech-commands_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
model = dict(backbone=dict(depth=10, in_channels=1), head=dict(num_classes=37))
