# PDC-NL[4]-ResNet8 (degree 4): the zoo's ResNet8 with one PDC-NL[4] block (PDC-NL[3]
# times a linear SE-like channel gate) after the last stage (4×4 feature maps).
_base_ = ['./resnet8_fashion-mnist.py']
model = dict(backbone=dict(plugins=[
    dict(
        cfg=dict(type='PDCNonLocal4', reduction=4),
        stages=(False, False, True),
        stage_cfgs=[None, None, dict(spatial_size=(4, 4))])
]))
