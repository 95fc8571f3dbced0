# DNL (T-NLC, 11.57M; fitted): CIFAR ResNet18 + one disentangled non-local block
# (whitened pairwise term with temperature 0.05, unary term; reduction 4) after each stage.
_base_ = ['./resnet18_cifar.py']
model = dict(
    backbone=dict(plugins=[
        dict(
            cfg=dict(type='DisentangledNonLocalBlock', reduction=4, temperature=0.05),
            stages=(True, True, True, True))
    ]))
