# PDC-NL[4] (T-NLC, 12.00M; guessed layout): PDC-NL[3] whose output is multiplied by a linear
# SE-like channel gate (c -> c/4 -> c, no sigmoid) in each of the 4 blocks. This layout counts
# 12,045,012 parameters (12.05M, not the paper's 12.00M; see mmpoly/zoo/nonlocal_family.py).
_base_ = ['./resnet18_cifar.py']
model = dict(
    backbone=dict(plugins=[
        dict(
            cfg=dict(type='PDCNonLocal4', reduction=4),
            stages=(True, True, True, True),
            stage_cfgs=[
                dict(spatial_size=(32, 32)),
                dict(spatial_size=(16, 16)),
                dict(spatial_size=(8, 8)),
                dict(spatial_size=(4, 4))
            ])
    ]))
