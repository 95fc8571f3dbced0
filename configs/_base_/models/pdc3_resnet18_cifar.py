# PDC^[3] (T-C100 16.8M): the PDC network with degree-3 blocks (each degree its own factors).
# Known misfit (see mmpoly/zoo/): 16.90M, the nearest natural fit; degree >= 3 PDC is unpublished.
_base_ = ['./pdc_resnet18_cifar.py']
model = dict(backbone=dict(block_cfg=dict(degree=3)))
