# PDC-comp (T-C10, T-C100, 4.3M): the "compressed version", as in the authors' official
# configuration pdc_so_nosharing.yml.
# Blocks [2, 2, 2, 1] of 64-128-192-256, one conv in the first-degree branch, degree-2 terms
# with hidden widths 64-64-128-128, 3×3 factors (BN, LeakyReLU), one 3×3 projection (IN,
# LeakyReLU), α initialised to 0.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='PDCResNetCIFAR',
        depth=None,
        stage_blocks=[2, 2, 2, 1],
        stage_channels=[64, 128, 192, 256],
        hidden_channels=[64, 64, 128, 128],
        block_cfg=dict(
            type='PDCBlock',
            degree=2,
            first_degree_convs=1,
            factor_kernel_size=3,
            projection_kernel_size=3,
            num_projection_convs=1,
            input_norm='BN',
            factor_norm='BN',
            projection_norm='IN',
            factor_act=dict(type='LeakyReLU', negative_slope=0.01),
            projection_act=dict(type='LeakyReLU', negative_slope=0.01),
            scale_init=0.0),
        out_indices=(3, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=256,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, ),
    ))
