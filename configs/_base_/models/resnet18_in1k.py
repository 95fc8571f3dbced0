# ImageNet ResNet18 (T-IN 11.69M / 1.82G): 7×7 stem + max-pool, [2, 2, 2, 2] ResNet blocks.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='PolyResNet', depth=18, block_cfg=dict(type='ResNetBlock'), out_indices=(3, )),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=512,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
        topk=(1, 5),
    ))
