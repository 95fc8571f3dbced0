# arXiv:2104.07916 Table "CIFAR10-LT", IF 50: the T-C10 model, unchanged, on long-tailed CIFAR-10.
_base_ = [
    '_base_/models/pdc-param_resnet18_cifar.py', '_base_/datasets/cifar10-lt-if50_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
