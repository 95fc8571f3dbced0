# PDC-cmp (T-IN 7.51M / 1.30G): PDC-ResNet18 at base width 52 (52-104-208-416).
# Known misfit (see mmpoly/zoo/): 8.15M / 1.28G with this literal reading of "stem channel 52".
_base_ = ['./pdc_resnet18_in1k.py']
model = dict(
    backbone=dict(stage_channels=[52, 104, 208, 416], hidden_channels=[13, 26, 52, 104]),
    head=dict(in_channels=416))
