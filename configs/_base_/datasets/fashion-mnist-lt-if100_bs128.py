# Long-tailed Fashion-MNIST (as CIFAR10-LT, T-LT, Table 8 of arXiv:2104.07916), imbalance factor
# 100: class i keeps floor(6000 · 100^(-i/9)) training images (6000 3596 2156 1292 774 464 278
# 166 100 60, 14,886 in all), chosen with a fixed seed; the test set stays the balanced 10k
# Fashion-MNIST test set.
_base_ = ['./fashion-mnist_bs128.py']
# The zoo trains by iterations: mmengine's InfiniteSampler never ends a pass, whereas with the
# DefaultSampler mmengine 0.10.7's IterBasedTrainLoop sleeps 2 s at every pass over the data
# (12 passes of these 14,886 images in 1,400 iterations: 24 s of sleep).
train_dataloader = dict(dataset=dict(
    _delete_=True, type='LongTailedDataset', imbalance_factor=100, seed=0,
    dataset={{_base_.train_dataloader.dataset}}),
    sampler=dict(type='InfiniteSampler', shuffle=True))
