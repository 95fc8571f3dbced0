# Fashion-MNIST model zoo: PDC-ResNet8 (degree 2, 32-64-128 channels), trained on the full
# training set (60,000 images) with the zoo's schedule (the same for every config).
_base_ = [
    '_base_/models/pdc_resnet8_fashion-mnist.py', '_base_/datasets/fashion-mnist_bs128.py',
    '_base_/schedules/fashion-mnist_bs128_1400i.py'
]
