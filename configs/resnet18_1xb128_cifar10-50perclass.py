# arXiv:2104.07916 appendix "Image classification with limited data": the T-C10 model, unchanged,
# trained on 50 CIFAR-10 images per class with the CIFAR recipe.
_base_ = [
    '_base_/models/resnet18_cifar.py', '_base_/datasets/cifar10-50perclass_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
