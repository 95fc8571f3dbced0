# PDC-NL[3]-ResNet8 (degree 3): the zoo's ResNet8 with one PDC-NL[3] block (reduction 4) after
# the last stage only. Its C4 factor is a full c -> HW conv, so the block is built for that
# stage's 4×4 feature maps (28×28 inputs only).
_base_ = ['./resnet8_fashion-mnist.py']
model = dict(
    backbone=dict(plugins=[
        dict(
            cfg=dict(type='PDCNonLocal3', reduction=4),
            stages=(False, False, True),
            stage_cfgs=[None, None, dict(spatial_size=(4, 4))])
    ]))
