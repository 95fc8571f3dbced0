# CIFAR ResNet18 (degree 1): 3×3 stem, [2, 2, 2, 2] ResNet blocks of 64-128-256-512.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='PolyResNetCIFAR', depth=18, block_cfg=dict(type='ResNetBlock'), out_indices=(3, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels=512,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, ),
    ))
