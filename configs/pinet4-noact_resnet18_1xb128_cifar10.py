_base_ = [
    '_base_/models/pinet4-noact_resnet18_cifar.py', '_base_/datasets/cifar10_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
