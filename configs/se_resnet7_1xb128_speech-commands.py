# SE-ResNet7 (arXiv:2104.07916, table "Speech Commands", 5.1M): ResNet7 with an SE gate
# (reduction 4) on every block, 1 input channel, 37 outputs.
_base_ = [
    '_base_/models/se_resnet18_cifar.py', '_base_/datasets/speech-commands_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
model = dict(backbone=dict(depth=10, in_channels=1), head=dict(num_classes=37))
