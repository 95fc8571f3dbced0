# ImageNet-1k, 32 images per process: mmpretrain's imagenet_bs32 (RandomResizedCrop 224 + flip;
# resize 256 + center crop 224) read by LocalImageNet, which checks mmpretrain's layout under
# data/imagenet (train/<wnid>/*.JPEG, val/, meta/{train,val}.txt) before the run and says how to
# point data_root elsewhere when it is missing.
_base_ = ['mmpretrain::_base_/datasets/imagenet_bs32.py']
dataset_type = 'LocalImageNet'
train_dataloader = dict(dataset=dict(type=dataset_type))
val_dataloader = dict(dataset=dict(type=dataset_type))
test_dataloader = dict(dataset=dict(type=dataset_type))
