# CIFAR-10 with limited data (arXiv:2104.07916 appendix "Image classification with limited
# data"): 50 training images per class (500 in all, a 100x reduction of the 5,000), chosen with a
# fixed seed; for one seed the 50-image subset lies inside every larger one. The test set stays
# the full 10k CIFAR-10 test set. Other sizes: override `images_per_class`.
_base_ = ['./cifar10_bs128.py']
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='LimitedDataset',
        images_per_class=50,
        seed=0,
        dataset={{_base_.train_dataloader.dataset}}))
