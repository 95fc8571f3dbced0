# mmdet's Mask R-CNN 1× on COCO 2017 (12 epochs, SGD 0.02 for 16 images, linear warm-up of 500
# iterations, lr ×0.1 after epochs 8 and 11; auto_scale_lr base_batch_size=16; bbox + segm COCO
# evaluation), read through mmpoly's LocalCocoDataset (a clear error when data/coco/ is missing).
# The leaf configs set the backbone.
_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
custom_imports = dict(imports=['mmpoly.models', 'mmpoly.datasets', 'mmpoly.engine'],
                      allow_failed_imports=False)
train_dataloader = dict(dataset=dict(type='LocalCocoDataset'))
val_dataloader = dict(dataset=dict(type='LocalCocoDataset'))
test_dataloader = val_dataloader
# mmpoly: stop at the first NaN/Inf gradient; a NaN/Inf validation output is an error naming where
# it starts; every num_classes of the heads must be the data's number of classes; warn when the
# batch is not auto_scale_lr.base_batch_size and the lr is not scaled
custom_hooks = [dict(type='NonFiniteCheckHook'), dict(type='NonFiniteValidationHook'),
                dict(type='ModelCheckHook'), dict(type='LrScaleCheckHook')]
