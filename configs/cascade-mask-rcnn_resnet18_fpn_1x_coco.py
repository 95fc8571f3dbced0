# Cascade Mask R-CNN 1× on COCO (arXiv:2104.07916, appendix, COCO table: ResNet18 row) with the
# backbone of the ImageNet classifier configs/resnet18_8xb32_in1k.py, initialised from its
# checkpoint.
# Set the checkpoint with --cfg-options model.backbone.init_cfg.checkpoint=PATH.
_base_ = ['./_base_/detection/cascade-mask-rcnn_fpn_1x_coco.py']
from mmpoly.utils import classifier_backbone  # noqa: E402  (after _base_: an mmengine rule)

model = dict(
    backbone=classifier_backbone('resnet18_8xb32_in1k.py'),
    neck=dict(in_channels=[64, 128, 256, 512]))
