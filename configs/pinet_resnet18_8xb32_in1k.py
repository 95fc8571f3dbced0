_base_ = ['_base_/models/pinet_resnet18_in1k.py', '_base_/imagenet_runtime.py']
