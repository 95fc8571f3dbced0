# PDC (T-C10, T-C100, 8.0M; guessed layout): PDC-comp with hidden widths 128-128-256-384.
_base_ = ['./pdc-comp_resnet18_cifar.py']
model = dict(backbone=dict(hidden_channels=[128, 128, 256, 384]))
