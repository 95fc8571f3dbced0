# NL-ResNet8 (degree 3): the zoo's ResNet8 with one non-local block (embedded Gaussian, reduction
# 4) after the last stage only (4×4 feature maps).
_base_ = ['./resnet8_fashion-mnist.py']
model = dict(
    backbone=dict(plugins=[
        dict(cfg=dict(type='NonLocalBlock', reduction=4), stages=(False, False, True))
    ]))
