# CIFAR10-LT (arXiv:2104.07916 §4.4, Table "CIFAR10-LT"): the CIFAR-10 training set made
# long-tailed, class i keeping floor(5000 · IF^(-i/9)) images (IF 100: 5000 2997 1796 1077 645
# 387 232 139 83 50, 12,406 in all), chosen with a fixed seed; the test set stays the balanced
# 10k CIFAR-10 test set. The other imbalance factors override `imbalance_factor` only.
_base_ = ['./cifar10_bs128.py']
train_dataloader = dict(
    dataset=dict(
        _delete_=True,
        type='LongTailedDataset',
        imbalance_factor=100,
        seed=0,
        dataset={{_base_.train_dataloader.dataset}}))
