# The main job's degree-2 PDC-ResNet8, a quarter of pdc_resnet8_fashion-mnist.py's compute: half
# its widths (16-32-64 channels, factor width half the stage width) and a stride-2 3×3 stem, so
# that every block runs on the maps the first block of the 32-64-128 trunk first reaches:
# 28 → 14 (stem) → 14 → 7 → 4.
_base_ = ['./pdc_resnet8_fashion-mnist.py']
model = dict(
    backbone=dict(
        stem_stride=2,
        stage_channels=[16, 32, 64],
        strides=[1, 2, 2],
        hidden_channels=[8, 16, 32]),
    head=dict(in_channels=64))
