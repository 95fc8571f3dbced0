# PDC-NL[3] (T-NLI, 11.35M): ImageNet PDC-ResNet18 + a PDC-NL[3] block (reduction 4) after
# c3, c4 and c5 (stages 2-4: 28², 14², 7² feature maps; 224×224 inputs only, C4 is c -> HW).
_base_ = ['./pdc_resnet18_8xb32_in1k.py']
model = dict(
    backbone=dict(plugins=[
        dict(
            cfg=dict(type='PDCNonLocal3', reduction=4),
            stages=(False, True, True, True),
            stage_cfgs=[
                None,
                dict(spatial_size=(28, 28)),
                dict(spatial_size=(14, 14)),
                dict(spatial_size=(7, 7))
            ])
    ]))
