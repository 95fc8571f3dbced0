# CIFAR10-LT with imbalance factor 200 (arXiv:2104.07916 §4.4); see cifar10-lt-if100_bs128.py.
_base_ = ['./cifar10-lt-if100_bs128.py']
train_dataloader = dict(dataset=dict(imbalance_factor=200))
