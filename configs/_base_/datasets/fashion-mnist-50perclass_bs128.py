# Fashion-MNIST with limited data (as the limited-data study, Figure 4 of arXiv:2104.07916):
# 50 training images per class (500 in all, from 6,000 per class), chosen with a fixed seed. The
# test set stays the full 10k Fashion-MNIST test set.
_base_ = ['./fashion-mnist_bs128.py']
# The zoo trains by iterations: mmengine's InfiniteSampler never ends a pass, whereas with the
# DefaultSampler mmengine 0.10.7's IterBasedTrainLoop sleeps 2 s at every pass over the data
# (350 passes of these 500 images in 1,400 iterations: 700 s of sleep).
train_dataloader = dict(dataset=dict(
    _delete_=True, type='LimitedDataset', images_per_class=50, seed=0,
    dataset={{_base_.train_dataloader.dataset}}),
    sampler=dict(type='InfiniteSampler', shuffle=True))
