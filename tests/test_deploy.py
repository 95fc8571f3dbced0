"""mmpoly.deploy.inference_copy: the BN- and α-folded copy computes the same function."""
import copy

import pytest
import torch
from mmengine.config import Config
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from mmpoly.deploy import fuse_for_inference, inference_copy
from mmpoly.utils.classifier_backbone import mmpoly_config_path
from mmpoly.utils.complexity import build_model, default_input_shape

FAMILIES = [
    'resnet18_1xb128_cifar10.py',
    'se_resnet18_1xb128_cifar10.py',
    'pinet_resnet18_1xb128_cifar10.py',
    'pinet-noact_resnet18_1xb128_cifar10.py',
    'pdc_resnet18_1xb128_cifar10.py',
    'pdc-comp_resnet18_1xb128_cifar10.py',
    'pdc-noact_resnet18_1xb128_cifar10.py',
    'pdc3_resnet18_1xb128_cifar100.py',
    'nl_resnet18_1xb128_cifar100.py',
    'dnl_resnet18_1xb128_cifar100.py',
    'pdc-nl3_resnet18_1xb128_cifar100.py',
    'pdc-nl4_resnet18_1xb128_cifar100.py',
    'pdc_resnet18_8xb32_in1k.py',
    'pdc_resnet8_1xb128_fashion-mnist.py',
]


def _randomise(model: nn.Module, seed: int = 0) -> None:
    """Random BN statistics/affine, norms and α scales, so that every fold is non-trivial."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(shape, low, high):
        return torch.rand(shape, generator=gen, dtype=torch.float64) * (high - low) + low

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (_BatchNorm, nn.GroupNorm, nn.InstanceNorm2d)):
                if getattr(module, 'running_mean', None) is not None:
                    n = module.running_mean.numel()
                    module.running_mean.copy_(uniform(n, -0.2, 0.2))
                    module.running_var.copy_(uniform(n, 0.5, 2.0))
                if module.weight is not None:
                    module.weight.copy_(uniform(module.weight.shape, 0.5, 1.5))
                    module.bias.copy_(uniform(module.bias.shape, -0.2, 0.2))
        for name, param in model.named_parameters():
            if param.dim() == 0:  # the α of every higher-degree term
                sign = 1.0 if torch.rand(1, generator=gen).item() < 0.5 else -1.0
                param.fill_(sign * uniform(1, 0.5, 1.5).item())


def _num_bn(model: nn.Module) -> int:
    return sum(isinstance(m, _BatchNorm) for m in model.modules())


def _classifier(name: str) -> nn.Module:
    model = build_model(Config.fromfile(mmpoly_config_path(name)))
    _randomise(model)
    return model.double().eval()


@pytest.mark.parametrize('name', FAMILIES)
def test_inference_copy_matches_original(name):
    cfg = Config.fromfile(mmpoly_config_path(name))
    model = _classifier(name)
    channels, size, _ = default_input_shape(cfg)
    size = min(size, 64)  # CIFAR 32×32; ImageNet stem at 64×64 keeps a 2×2 last stage
    x = torch.randn(2, channels, size, size, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(1))
    state_before = copy.deepcopy(model.state_dict())

    fused = inference_copy(model)

    with torch.no_grad():
        expected = model(x, mode='tensor')
        actual = fused(x, mode='tensor')
    scale = expected.abs().max().item()
    assert scale > 0
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-9 * scale)
    # the original is untouched: same tensors, same modules, same mode
    for key, value in model.state_dict().items():
        assert torch.equal(value, state_before[key]), key
    assert _num_bn(fused) < _num_bn(model), 'no BatchNorm was folded'
    assert not fused.training


def test_fold_counts_scales_per_family():
    # Π-net: 1×1 projection convs + BN, no activation → every α folds into the fused conv.
    model = _classifier('pinet_resnet18_1xb128_cifar10.py')
    num_alphas = sum(p.dim() == 0 for p in model.parameters())
    assert num_alphas == 6  # blocks [2, 2, 1, 1], one α each
    report = fuse_for_inference(model)
    assert report.folded_scales == num_alphas and report.kept_scales == 0
    assert report.fused_norms > 0
    # PDC-comp: the projection ends in LeakyReLU → α is kept (folding would not be exact).
    model = _classifier('pdc-comp_resnet18_1xb128_cifar10.py')
    alphas = [p.item() for p in model.parameters() if p.dim() == 0]
    report = fuse_for_inference(model)
    assert report.folded_scales == 0 and report.kept_scales == len(alphas) == 7
    assert [p.item() for p in model.parameters() if p.dim() == 0] == alphas


def test_folded_scale_is_one_and_output_matches_in_float32():
    model = build_model(Config.fromfile(mmpoly_config_path('pinet_resnet18_1xb128_cifar10.py')))
    _randomise(model, seed=3)
    model.eval()
    fused = inference_copy(model)
    assert all(p.item() == 1.0 for p in fused.parameters() if p.dim() == 0)
    assert any(p.item() != 1.0 for p in model.parameters() if p.dim() == 0)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected, actual = model(x, mode='tensor'), fused(x, mode='tensor')
    torch.testing.assert_close(actual, expected, rtol=1e-4,
                               atol=1e-4 * expected.abs().max().item())


def test_weight_standardised_conv_is_not_folded():
    # only plain Conv2d is folded: a subclass may transform its weight in forward
    class ScaledConv(nn.Conv2d):
        def forward(self, x):
            return super().forward(x) * 2

    model = nn.Sequential(ScaledConv(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 4, 1),
                          nn.BatchNorm2d(4))
    _randomise(model)
    model.eval()
    report = fuse_for_inference(copy.deepcopy(model))
    assert report.fused_norms == 1


def test_inference_copy_rejects_non_module():
    with pytest.raises(TypeError, match='torch.nn.Module'):
        inference_copy({'model': 1})


def test_detector_features_match():
    # the Mask R-CNN backbone + FPN of the PDC-ResNet18 detector (mmdet ConvModules included)
    model = build_model(Config.fromfile(mmpoly_config_path(
        'mask-rcnn_pdc-resnet18_fpn_1x_coco.py')))
    _randomise(model)
    model.double().eval()
    fused = inference_copy(model)
    x = torch.randn(1, 3, 64, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected, actual = model.extract_feat(x), fused.extract_feat(x)
    assert len(expected) == len(actual) == 5
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9 * e.abs().max().item())
    assert _num_bn(fused) < _num_bn(model)
