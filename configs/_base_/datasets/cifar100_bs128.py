# CIFAR-100 with the CIFAR-10 recipe; data: cifar-100-python extracted under data/cifar100.
_base_ = ['./cifar10_bs128.py']

dataset_type = 'LocalCIFAR100'
data_preprocessor = dict(num_classes=100)
train_dataloader = dict(dataset=dict(type=dataset_type, data_root='data/cifar100'))
val_dataloader = dict(dataset=dict(type=dataset_type, data_root='data/cifar100'))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_evaluator = val_evaluator
