# NL (T-NLC, 11.57M; fitted): CIFAR ResNet18 + one non-local block (embedded Gaussian,
# reduction 4) after each of the 4 stages (32², 16², 8², 4² feature maps).
_base_ = ['./resnet18_cifar.py']
model = dict(
    backbone=dict(plugins=[
        dict(cfg=dict(type='NonLocalBlock', reduction=4), stages=(True, True, True, True))
    ]))
