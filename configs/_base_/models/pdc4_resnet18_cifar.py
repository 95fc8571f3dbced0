# PDC^[4] (T-C100 28.0M; guessed layout): the PDC network with degree-4 blocks.
_base_ = ['./pdc_resnet18_cifar.py']
model = dict(backbone=dict(block_cfg=dict(degree=4)))
