# Fashion-MNIST (the embedded default data): 60,000 train / 10,000 test 28×28 grey images,
# read from Debian's dataset-fashion-mnist files. The test set is the full 10k.
dataset_type = 'LocalFashionMNIST'
data_root = '/usr/share/datasets/fashion-mnist'
data_preprocessor = dict(num_classes=10, mean=[72.94], std=[90.02], to_rgb=False)

train_pipeline = [
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
# The test pipeline (also what mmpretrain's inference API runs) refuses an image unlike the
# dataset's (uint8, 28×28, one channel) with a ValueError instead of predicting garbage; a valid
# image passes unchanged.
test_pipeline = [dict(type='CheckGreyImage', size=(28, 28)), dict(type='PackInputs')]

train_dataloader = dict(
    batch_size=128,
    num_workers=1,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='train', pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True),
)
val_dataloader = dict(
    batch_size=500,
    num_workers=1,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='test', pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False),
)
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
