"""``channels_last``: a classifier trained and tested in channels-last memory order.

A config key (``channels_last = True``, or ``tools/train.py`` / ``tools/test.py
--channels-last``). :func:`~mmpoly.engine.launcher.build_runner` builds the Runner inside
:func:`channels_last_before_wrapping`, which stores every 4-d parameter and buffer of the model
channels-last (``nn.Module.to(memory_format=torch.channels_last)``, in place) just before
``Runner.wrap_model`` wraps it: DDP lays out its gradient buckets like the parameters when it is
built (converted later, every step would copy each gradient into its bucket, with torch's
warning "Grad strides do not match bucket view strides"). The first convolution then returns a
channels-last map whatever the layout of its input, and every later layer keeps it. The values
are those of the NCHW model up to float rounding; the state dict has the same keys, shapes and
values, and loads into either layout.

Why: oneDNN's CPU convolutions and their backward pass are faster on channels-last maps on CPUs
with AVX-512 (pdc_resnet8_1xb128_fashion-mnist.py's training step, 2 threads: 0.20–0.24 s NCHW,
0.15–0.19 s channels-last on an Intel Xeon with AVX512-BF16 / AMX; 0.24–0.28 s against
0.22–0.26 s on an AVX2 EPYC), and cuDNN's half-precision convolutions take NHWC maps without
layout copies (not measured here yet: the GPU report's ``-cl`` runs).

Detectors are refused: mmcv 2.1's RoIAlign (CPU and CUDA) indexes its input as NCHW memory and
returns wrong RoI features from channels-last maps, without an error.
"""
import contextlib
from typing import Any, Iterator

import torch
from mmengine.config import Config
from mmengine.model import is_model_wrapper
from mmengine.runner import Runner
from torch import nn

from mmpoly.deploy import is_detector

__all__ = ['channels_last_option', 'check_channels_last', 'to_channels_last',
           'channels_last_before_wrapping', 'apply_channels_last']


def channels_last_option(value: Any) -> bool:
    """The config's ``channels_last`` as a bool: True, False or None (unset, False)."""
    if value is None or value is False:
        return False
    if value is True:
        return True
    raise ValueError(f'channels_last must be True or False, got {value!r}')


_DETECTOR_REFUSAL = ('channels_last=True: {} is a detector, and mmcv\'s RoIAlign reads its '
                     'feature maps as NCHW memory (wrong RoI features from channels-last maps); '
                     'allowed for classifiers only')


def check_channels_last(cfg: Config) -> bool:
    """``cfg.channels_last`` as a bool (:func:`channels_last_option`), checked before anything
    is built: a ValueError for a bad value, or for True with a ``model`` whose ``type`` is an
    mmdet detector."""
    if not channels_last_option(cfg.get('channels_last')):
        return False
    model = cfg.get('model')
    type_ = model.get('type') if isinstance(model, dict) else None
    try:
        from mmdet.models.detectors import BaseDetector
        from mmdet.registry import MODELS
    except ImportError:  # no mmdet: no detector
        return True
    cls = MODELS.get(type_) if isinstance(type_, str) else type_
    if isinstance(cls, type) and issubclass(cls, BaseDetector):
        raise ValueError(_DETECTOR_REFUSAL.format(cls.__name__))
    return True


def to_channels_last(model: nn.Module) -> int:
    """Store ``model``'s 4-d parameters and buffers channels-last, in place; return how many
    tensors are 4-d. ``model`` may be wrapped (DDP, mmengine's wrappers). Raises a ValueError
    for an mmdet detector (see the module's docstring)."""
    inner = model.module if is_model_wrapper(model) else model
    if is_detector(inner):
        raise ValueError(_DETECTOR_REFUSAL.format(type(inner).__name__))
    model.to(memory_format=torch.channels_last)
    return sum(1 for t in (*inner.parameters(), *inner.buffers()) if t.dim() == 4)


@contextlib.contextmanager
def channels_last_before_wrapping(cfg: Config) -> Iterator[None]:
    """While a Runner of ``cfg`` is built inside, ``Runner.wrap_model`` first stores the model
    channels-last if ``cfg.channels_last`` is True (mmengine's ``Runner`` and subclasses that
    call it; restored on exit). Nothing changes otherwise."""
    if not channels_last_option(cfg.get('channels_last')):
        yield
        return
    wrap_model = Runner.wrap_model

    def channels_last_wrap_model(self, model_wrapper_cfg, model):
        if not is_model_wrapper(model):
            to_channels_last(model)
        return wrap_model(self, model_wrapper_cfg, model)

    Runner.wrap_model = channels_last_wrap_model
    try:
        yield
    finally:
        Runner.wrap_model = wrap_model


def apply_channels_last(runner) -> Any:
    """Store ``runner.model`` channels-last if ``runner.cfg.channels_last`` is True (a no-op
    for tensors already stored so by :func:`channels_last_before_wrapping`), with one log line;
    return ``runner``."""
    if not channels_last_option(runner.cfg.get('channels_last')):
        return runner
    tensors = to_channels_last(runner.model)
    runner.logger.info(f'channels_last: {tensors} 4-d parameters and buffers of the model '
                       'stored channels-last; its feature maps follow')
    return runner
