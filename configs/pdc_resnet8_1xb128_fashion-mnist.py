# The main job: a degree-2 PDC-ResNet trained for 3 epochs on Fashion-MNIST, evaluated on the
# full 10k test set (README: the measured accuracy and time).
_base_ = [
    '_base_/models/pdc_resnet8_fashion-mnist.py', '_base_/datasets/fashion-mnist_bs128.py',
    '_base_/schedules/fashion-mnist_bs128_3e.py', '_base_/default_runtime.py'
]
# The model stored channels-last (mmpoly.engine.memory_format): oneDNN's CPU convolutions and
# their backward pass are faster on channels-last maps where the CPU has AVX-512.
channels_last = True
