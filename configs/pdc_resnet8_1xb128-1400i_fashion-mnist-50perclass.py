# Fashion-MNIST model zoo: PDC-ResNet8 (degree 2, 32-64-128 channels), trained on 50 training
# images per class (limited data, as Figure 4 of arXiv:2104.07916) with the zoo's schedule (the same
# for every config).
_base_ = [
    '_base_/models/pdc_resnet8_fashion-mnist.py',
    '_base_/datasets/fashion-mnist-50perclass_bs128.py',
    '_base_/schedules/fashion-mnist_bs128_1400i.py'
]
