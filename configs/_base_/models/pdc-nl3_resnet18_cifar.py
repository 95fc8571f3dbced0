# PDC-NL[3] (T-NLC, 11.87M; fitted): CIFAR ResNet18 + one PDC-NL[3] block
# (reduction 4) after each stage. C4 is a full c -> HW factor, so each block is built for its
# stage's feature-map size (32×32 inputs only).
_base_ = ['./resnet18_cifar.py']
model = dict(
    backbone=dict(plugins=[
        dict(
            cfg=dict(type='PDCNonLocal3', reduction=4),
            stages=(True, True, True, True),
            stage_cfgs=[
                dict(spatial_size=(32, 32)),
                dict(spatial_size=(16, 16)),
                dict(spatial_size=(8, 8)),
                dict(spatial_size=(4, 4))
            ])
    ]))
