# PDC7 (arXiv:2104.07916, table "Speech Commands", 3.9M): the compressed PDC (64-128-192-256,
# hidden widths 64-64-128-128) with one degree-2 block per stage and both convs in the
# first-degree branch; 1 input channel, 37 outputs.
_base_ = [
    '_base_/models/pdc-comp_resnet18_cifar.py', '_base_/datasets/speech-commands_bs128.py',
    '_base_/schedules/cifar_bs128_120e.py', '_base_/default_runtime.py'
]
model = dict(
    backbone=dict(stage_blocks=[1, 1, 1, 1], in_channels=1,
                  block_cfg=dict(first_degree_convs=2)),
    head=dict(num_classes=37))
