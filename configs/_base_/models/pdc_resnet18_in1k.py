# PDC-ResNet18 (T-IN 10.69M / 1.67G; SPEC §3 GUESS, §6.2): base width 60 (stages 60-120-240-480),
# ResNet18 blocks, degree-2 PDC terms with 1×1 factors C -> C/4 (BN, LeakyReLU) and a 1×1
# projection C/4 -> C (BN, LeakyReLU). Nearest fit: 10.77M (+0.08M); FLOPs match.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='PDCResNet',
        depth=18,
        stage_channels=[60, 120, 240, 480],
        hidden_channels=[15, 30, 60, 120],
        block_cfg=dict(
            type='PDCBlock',
            degree=2,
            first_degree_convs=2,
            factor_kernel_size=1,
            projection_kernel_size=1,
            input_norm='BN',
            factor_norm='BN',
            projection_norm='BN',
            factor_act=dict(type='LeakyReLU', negative_slope=0.01),
            projection_act=dict(type='LeakyReLU', negative_slope=0.01),
            scale_init=0.0),
        out_indices=(3, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=480,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5),
    ))
