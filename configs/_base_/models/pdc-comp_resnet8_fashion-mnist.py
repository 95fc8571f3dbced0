# Compressed PDC-ResNet8 (degree 2), 108,445 parameters (35% of the zoo's ResNet8, 309,162; the
# paper's PDC-comp is 38% of ResNet18 in T-C10, Table 3 of arXiv:2104.07916): as the official
# compressed configuration, one conv in the first-degree branch and a narrower last stage;
# widths 32-48-64, factor widths a quarter of the stage width (8-12-16).
_base_ = ['./pdc_resnet8_fashion-mnist.py']
model = dict(
    backbone=dict(
        stage_channels=[32, 48, 64],
        hidden_channels=[8, 12, 16],
        block_cfg=dict(first_degree_convs=1)),
    head=dict(in_channels=64))
