_base_ = [
    '_base_/models/pdc_resnet34_cifar.py', '_base_/datasets/cifar100_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
model = dict(head=dict(num_classes=100, topk=(1, 5)))
