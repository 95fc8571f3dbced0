# PDC-NL[4] (T-NLI, 11.51M; guessed layout): ImageNet PDC-ResNet18 + a PDC-NL[4] block
# (PDC-NL[3] times a linear channel gate c -> c/4 -> c; reduction 4) after c3, c4 and c5
# (stages 2-4: 28², 14², 7² feature maps; 224×224 inputs only).
_base_ = ['./pdc_resnet18_8xb32_in1k.py']
model = dict(
    backbone=dict(plugins=[
        dict(
            cfg=dict(type='PDCNonLocal4', reduction=4),
            stages=(False, True, True, True),
            stage_cfgs=[
                None,
                dict(spatial_size=(28, 28)),
                dict(spatial_size=(14, 14)),
                dict(spatial_size=(7, 7))
            ])
    ]))
