# NL (T-NLI, 12.02M; fitted): ImageNet ResNet18 + a non-local block (reduction 4) after
# c4 and c5 (stages 3 and 4: 14² and 7² feature maps).
_base_ = ['./resnet18_8xb32_in1k.py']
model = dict(
    backbone=dict(plugins=[
        dict(cfg=dict(type='NonLocalBlock', reduction=4), stages=(False, False, True, True))
    ]))
