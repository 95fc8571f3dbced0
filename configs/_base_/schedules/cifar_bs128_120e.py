# The paper's CIFAR / Speech recipe (arXiv:2104.07916 §4): SGD lr 0.1, momentum 0.9, wd 5e-4,
# batch 128, 120 epochs, lr ×0.1 at epochs 40, 60, 80, 100.
optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=False))
param_scheduler = dict(
    type='MultiStepLR', by_epoch=True, milestones=[40, 60, 80, 100], gamma=0.1)
train_cfg = dict(by_epoch=True, max_epochs=120, val_interval=1)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)
