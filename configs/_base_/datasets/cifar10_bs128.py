# CIFAR-10 as in the paper's training code: random crop 32 (padding 4) + horizontal flip,
# normalised with mean 0.5 / std 0.5 per channel. Data: the "python version" archive
# (cifar-10-batches-py) extracted under data/cifar10.
dataset_type = 'LocalCIFAR10'
data_preprocessor = dict(
    num_classes=10, mean=[127.5, 127.5, 127.5], std=[127.5, 127.5, 127.5], to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=32, padding=4),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=128,
    num_workers=4,
    dataset=dict(
        type=dataset_type, data_root='data/cifar10', split='train',
        pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True),
)
val_dataloader = dict(
    batch_size=128,
    num_workers=4,
    dataset=dict(
        type=dataset_type, data_root='data/cifar10', split='test',
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
