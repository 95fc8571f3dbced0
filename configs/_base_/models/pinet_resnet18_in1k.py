# Π-net-ResNet18 (T-IN 11.96M / 1.8207G), as the group's mmcls pinet_relu block:
# y = ReLU(C z + I z + BN(C z ∘ I z)). Known misfit (see mmpoly/zoo/): 11.69M; the paper's
# 11.96M may be a digit swap. FLOPs agree.
_base_ = ['./resnet18_in1k.py']
model = dict(
    backbone=dict(
        block_cfg=dict(
            type='PiNetBlock',
            degree=2,
            num_projection_convs=0,
            input_norm='none',
            projection_norm='BN',
            learn_scale=False)))
