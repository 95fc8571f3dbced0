# PDC^[4] without activations (T-NA* 18.8M). Known misfit (see mmpoly/zoo/): 19.32M with degree-4
# blocks on the PDC no-activation configuration, the nearest natural fit.
_base_ = ['./pdc-noact_resnet18_cifar.py']
model = dict(backbone=dict(block_cfg=dict(degree=4)))
