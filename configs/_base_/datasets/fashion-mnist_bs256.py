# Fashion-MNIST for the main job: batches of 256, no augmentation, the images read in the
# training process. On a 2-core CPU a loader worker takes its time from the two compute threads:
# its batch of 256 cost 65 ms with mmcv's RandomFlip and 30 ms without, and the whole 4-epoch
# run took 183 s with one worker, 167 s without (2026-11-29, 2-core AMD EPYC; docs/en/changelog.md).
_base_ = ['./fashion-mnist_bs128.py']
train_dataloader = dict(
    batch_size=256,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(pipeline=[dict(type='PackInputs')]),
)
