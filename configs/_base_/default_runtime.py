# Runtime shared by every mmpoly config: mmpretrain's defaults plus mmpoly's modules.
default_scope = 'mmpretrain'
custom_imports = dict(imports=['mmpoly.models', 'mmpoly.datasets', 'mmpoly.engine'],
                      allow_failed_imports=False)

default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=100),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=3, save_best='auto'),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='VisualizationHook', enable=False),
)
env_cfg = dict(
    cudnn_benchmark=False,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    dist_cfg=dict(backend='nccl'),  # mmpoly's launcher uses gloo when there is no GPU
)
vis_backends = [dict(type='LocalVisBackend')]
visualizer = dict(type='UniversalVisualizer', vis_backends=vis_backends)
log_level = 'INFO'
load_from = None
resume = False
randomness = dict(seed=None, deterministic=False)
# mmpoly's checks (mmpoly/engine/hooks.py): stop at the first non-finite gradient, naming the
# iteration and the parameter, before the update and before any checkpoint of that state; and
# compare head.in_channels with the backbone's output width before the run.
# mmpoly/engine/non_finite.py: a validation/test pass with NaN/Inf outputs is an error naming the
# first non-finite layer output (no metric, no "best" checkpoint). mmpoly/engine/lr_scale.py:
# warn when the real batch is not auto_scale_lr.base_batch_size and --auto-scale-lr is not given.
# mmpoly/engine/precise_bn.py: recompute the BN running statistics on 2,048 training images
# before each validation, each checkpoint and the end (docs/en/training.md, "When to recompute
# BN statistics"); the weights train exactly as without it.
custom_hooks = [
    dict(type='NonFiniteCheckHook'), dict(type='ModelCheckHook'),
    dict(type='NonFiniteValidationHook'), dict(type='LrScaleCheckHook'),
    dict(type='RecomputeBNHook', num_samples=2048)
]
