# A small degree-2 PDC-ResNet for 28×28 grey images: 3×3 stem, one PDC block in each of three
# stages (32-64-128 channels, stride 2 each: 28 → 14 → 7 → 4), factor width half the stage width.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='PDCResNetCIFAR',
        depth=None,
        in_channels=1,
        stage_blocks=[1, 1, 1],
        stage_channels=[32, 64, 128],
        strides=[2, 2, 2],
        hidden_channels=[16, 32, 64],
        block_cfg=dict(type='PDCBlock', degree=2),
        out_indices=(2, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=128,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, ),
    ))
