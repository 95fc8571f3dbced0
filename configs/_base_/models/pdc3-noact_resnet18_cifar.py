# PDC^[3] without activations (T-NA* 11.2M). Known misfit (see mmpoly/zoo/): 11.43M with degree-3
# blocks on the PDC no-activation configuration, the nearest natural fit.
_base_ = ['./pdc-noact_resnet18_cifar.py']
model = dict(backbone=dict(block_cfg=dict(degree=3)))
