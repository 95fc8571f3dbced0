# The main job (tools/run_main_job.sh): a degree-2 PDC-ResNet8 of base width 16 with a stride-2
# stem (150,781 parameters) trained for 4 epochs on the 60,000 Fashion-MNIST training images and
# evaluated on the full 10k test set (README: the measured accuracy and time).
_base_ = [
    '_base_/models/pdc_resnet8-w16_fashion-mnist.py', '_base_/datasets/fashion-mnist_bs256.py',
    '_base_/schedules/fashion-mnist_bs256_4e.py', '_base_/default_runtime.py'
]
# The model stored channels-last (mmpoly.engine.memory_format): oneDNN's CPU convolutions and
# their backward pass are faster on channels-last maps.
channels_last = True
