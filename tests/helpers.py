"""Paths and small utilities shared by the tests (imported as ``from helpers import ...``)."""
import errno
import gzip
import importlib.util
import itertools
import os
import pickle
from pathlib import Path
from types import ModuleType
from typing import Tuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mmengine.config import Config
from torch import Tensor

from mmpoly.datasets.local import LocalFashionMNIST
from mmpoly.utils.complexity import build_model

#: The repository root, and its configs / tools.
REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / 'configs'
TOOLS = REPO / 'tools'
#: Where Debian's fashion-mnist package puts the dataset (mmpoly's LocalFashionMNIST default).
FASHION_MNIST = Path(LocalFashionMNIST.DEBIAN_ROOT)


_EXPERIMENTS = itertools.count()


def experiment_name(prefix: str) -> str:
    """A Runner ``experiment_name`` used once in this process. mmengine keeps one logger and one
    visualizer per name (plus a timestamp of whole seconds): a second Runner of the same name
    within a second wrote its scalars into the first one's work_dir, which pytest removes once
    that test has passed."""
    return f'{prefix}_{next(_EXPERIMENTS)}'


def disk_full_at_fsync(monkeypatch: pytest.MonkeyPatch, min_bytes: int = 1) -> None:
    """From now on (until ``monkeypatch`` undoes it) ``os.fsync`` fails with ENOSPC after
    asserting that the file holds at least ``min_bytes``: an atomic write then fails with all
    its data in the temporary file, just before the rename."""

    def failing_fsync(fd: int) -> None:
        assert os.fstat(fd).st_size >= min_bytes
        raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(os, 'fsync', failing_fsync)


#: Config text of the tiny PDC-ResNet classifier (2 stages of 8 and 16 channels, degree 2, one
#: grey-scale input channel, 10 classes) that the end-to-end tool tests train on Fashion-MNIST.
TINY_PDC_MODEL = """\
model = dict(
    type='ImageClassifier',
    backbone=dict(type='PDCResNetCIFAR', depth=None, stage_blocks=[1, 1],
                  stage_channels=[8, 16], in_channels=1, out_indices=(1, ),
                  block_cfg=dict(type='PDCBlock', degree=2), hidden_channels=8),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=16,
              loss=dict(type='CrossEntropyLoss'), topk=(1, )))
data_preprocessor = dict(num_classes=10, mean=[72.94], std=[90.02], to_rgb=False)
"""


def runtime_tail(checkpoint_interval: str, log_interval: int = 5,
                 dist_backend: str = 'gloo') -> str:
    """The runtime part of the small self-contained configs that end-to-end tests write (hooks,
    env, visualizer, seed). ``checkpoint_interval`` is config text: a number, or a format
    field such as ``'{epochs}'`` that the test fills in later."""
    return f'''\
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval={log_interval}),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', interval={checkpoint_interval}),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='VisualizationHook', enable=False))
env_cfg = dict(cudnn_benchmark=False, mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
               dist_cfg=dict(backend={dist_backend!r}))
visualizer = dict(type='UniversalVisualizer', vis_backends=[dict(type='LocalVisBackend')])
log_level = 'INFO'
load_from = None
resume = False
randomness = dict(seed=0, deterministic=False)
'''


def load_tool(name: str) -> ModuleType:
    """Import ``tools/<name>.py`` (e.g. ``'train'``, ``'analysis_tools/paper_table'``).

    It gets a private module name, ``mmpoly_tools_<file stem>``: ``tools/test.py`` must not
    shadow the stdlib package ``test``.
    """
    path = TOOLS / f'{name}.py'
    spec = importlib.util.spec_from_file_location(f'mmpoly_tools_{path.stem}', path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_from_config(name: str, part: str = 'model') -> torch.nn.Module:
    """The model (or ``part='backbone'``) of ``configs/<name>``, built in the config's scope."""
    return build_model(Config.fromfile(str(CONFIGS / name)), part)


def bn_eval(x: Tensor, bn: torch.nn.BatchNorm2d) -> Tensor:
    """Eval-mode BatchNorm computed by hand: (B, C, H, W) -> (B, C, H, W)."""
    shape = (1, -1, 1, 1)
    return (x - bn.running_mean.view(shape)) / torch.sqrt(bn.running_var.view(shape) + bn.eps) \
        * bn.weight.view(shape) + bn.bias.view(shape)


def write_pickle(path: Path, obj: dict) -> None:
    """Write ``obj`` as CIFAR's files are: protocol-2 pickles (Python 2 era; mmpretrain reads
    them with ``encoding='latin1'``, so str keys such as 'data' and 'labels' come back as str)."""
    path.write_bytes(pickle.dumps(obj, protocol=2))


def randomise(module: torch.nn.Module, scale: float = 0.3) -> torch.nn.Module:
    """Non-trivial weights, α and BN statistics (α = 0 would switch higher degrees off)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * scale)
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn_like(m.running_mean) * 0.1)
                m.running_var.copy_(torch.rand_like(m.running_var) + 0.5)
    return module


def randomise_norms(module: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial affine parameters and running statistics of every norm layer (eval mode
    uses the statistics; the initial 1, 0, 0, 1 would hide a mix-up)."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._NormBase):
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_()
                if m.track_running_stats:
                    m.running_mean.normal_()
                    m.running_var.uniform_(0.5, 2.0)
    return module


def first_degree_terms(block: torch.nn.Module, x: Tensor) -> Tuple[Tensor, Tensor]:
    """The branch C z and the projecting shortcut I z of an eval-mode block with stride 2 and a
    downsample, computed by hand from its weights: x (B, Cin, H, W) -> 2 × (B, C, H/2, W/2)."""
    branch = F.relu(bn_eval(F.conv2d(x, block.conv1.weight, stride=2, padding=1), block.bn1))
    branch = bn_eval(F.conv2d(branch, block.conv2.weight, padding=1), block.bn2)
    shortcut = bn_eval(F.conv2d(x, block.downsample[0].weight, stride=2), block.downsample[1])
    return branch, shortcut


def run_keeping_count(forward, params) -> Tuple[Tensor, Tuple[Tensor, ...], int]:
    """``forward()``'s output, the gradients of its squared sum for ``params``, and the bytes of
    the distinct storages autograd kept for the backward pass (a with_cp check)."""
    saved = {}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    grads = torch.autograd.grad(out.square().sum(), list(params))
    return out, grads, sum(saved.values())


def fashion_mnist_test_images(count: int) -> Tuple[np.ndarray, np.ndarray]:
    """The first ``count`` Fashion-MNIST test images ((count, 28, 28) uint8) and their labels,
    read from the Debian package's idx files."""
    with gzip.open(FASHION_MNIST / 't10k-images-idx3-ubyte.gz') as f:
        images = np.frombuffer(f.read(16 + count * 784), np.uint8, offset=16)
    with gzip.open(FASHION_MNIST / 't10k-labels-idx1-ubyte.gz') as f:
        labels = np.frombuffer(f.read(8 + count), np.uint8, offset=8)
    return images.reshape(count, 28, 28).copy(), labels.copy()


def save_detector_checkpoint(config: Path, path: Path) -> Path:
    """Save the initial weights of ``config``'s detector as a checkpoint that fits it (80
    classes named c0..c79 in its meta), at ``path``."""
    from mmpoly.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    model = build_model(Config.fromfile(str(config)))
    torch.save(dict(state_dict=model.state_dict(),
                    meta=dict(dataset_meta=dict(classes=[f'c{i}' for i in range(80)]))), path)
    return path
