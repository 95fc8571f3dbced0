# The Fashion-MNIST model zoo's schedule, the same for every model and every data regime: 1,400
# iterations of batch 128 (2.99 epochs of the 60,000 training images, about the 3 of
# pdc_resnet8_1xb128_fashion-mnist.py), a
# fixed number of iterations so that the 500-image and long-tailed training sets get as many
# updates. SGD (Nesterov) as that config, a 100-iteration linear warm-up and per-iteration
# cosine decay to 0. The runtime is the shared one with one final checkpoint (no best-checkpoint
# tracking); tools/model_zoo/run_suite.py trains without validation and evaluates that
# checkpoint on the full 10k test set with tools/test.py.
_base_ = ['../default_runtime.py']
max_iters = 1400
optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=100),
    dict(type='CosineAnnealingLR', T_max=max_iters, by_epoch=False, begin=0, end=max_iters),
]
train_cfg = dict(by_epoch=False, max_iters=max_iters, val_interval=max_iters)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)
log_processor = dict(by_epoch=False)
default_hooks = dict(
    logger=dict(interval=50),
    checkpoint=dict(by_epoch=False, interval=max_iters, max_keep_ckpts=1, save_best=None))
