# A short schedule for the embedded Fashion-MNIST job: 3 epochs of SGD (Nesterov) with a
# 100-iteration linear warm-up and per-iteration cosine decay.
optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', T_max=3, by_epoch=True, begin=0, end=3,
         convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=3, val_interval=3)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)
