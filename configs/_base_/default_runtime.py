# Runtime shared by every mmpoly config: mmpretrain's defaults plus mmpoly's modules.
default_scope = 'mmpretrain'
custom_imports = dict(imports=['mmpoly.models', 'mmpoly.datasets'], allow_failed_imports=False)

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
custom_hooks = [dict(type='NonFiniteCheckHook'), dict(type='ModelCheckHook')]
