"""Degree 1: the ResNet BasicBlock, y = act((I + C) z), the block every family augments."""
import contextlib
from typing import ContextManager, Iterator, Optional, Tuple

import torch
from mmcv.cnn import build_activation_layer, build_conv_layer, build_norm_layer
from mmengine.model import BaseModule
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from mmpoly.registry import MODELS
from ..polynomial.options import (activation_option, check_choice, check_norm_channels,
                                  check_positive_int, conv_cfg_option, required_norm_cfg_option)

#: The block's default activation (``act_cfg``).
RELU = dict(type='ReLU')


@MODELS.register_module()
class ResNetBlock(BaseModule):
    """ResNet BasicBlock: out = act(branch(x) + shortcut(x)), a first-degree polynomial.

    Subclasses augment it with higher-degree terms by overriding :meth:`polynomial_terms`, which
    combines the branch C z and the shortcut I z (the input z as seen by the block).
    Module names (conv1, bn1, conv2, bn2, downsample) are those of mmpretrain's BasicBlock, so
    ResNet checkpoints load unchanged into any block of the family.

    Args:
        in_channels / out_channels: block input and output width.
        stride: stride of conv1 and of the projecting shortcut.
        first_degree_convs: 2 (conv-norm-act-conv-norm, the ResNet branch) or 1 (conv-norm-act,
            the official PDC ``use_only_first_conv``: the activation stays in the branch).
        conv_cfg / norm_cfg / act_cfg: mmcv layer configs of the branch and block output;
            each 'type' must be one mmcv builds (checked here, act_cfg also when
            ``use_activation=False``); act_cfg may also be a type name, 'none' or None.
            ``norm_cfg`` (a 2-d norm; GroupNorm's num_groups must divide the channels) is also
            the norm of every higher-degree norm role a subclass leaves at 'BN'
            (:func:`~mmpoly.models.polynomial.options.block_norm_cfg`).
        use_activation: False removes every activation of the block (no-activation networks);
            an ``act_cfg`` other than its default (or None / 'none') is then an error, as it
            would be unused.
        with_cp: as mmpretrain's ``BasicBlock``: in training, recompute the block's
            intermediate maps in the backward pass (``torch.utils.checkpoint``) instead of
            keeping them, for less memory and a second forward pass of every block. Unlike
            there, the recomputation leaves the block's buffers (BatchNorm running statistics)
            as the forward pass left them: the same outputs, gradients and statistics as
            ``with_cp=False``.

    Shapes: x (B, in_channels, H, W) -> (B, out_channels, H/stride, W/stride).
    """

    degree = 1

    def __init__(self,
                 in_channels: int,
                 out_channels: int,
                 stride: int = 1,
                 first_degree_convs: int = 2,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: Optional[dict] = RELU,
                 use_activation: bool = True,
                 with_cp: bool = False,
                 init_cfg: Optional[dict] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        check_positive_int('in_channels', in_channels)
        check_positive_int('out_channels', out_channels)
        check_positive_int('stride', stride)
        check_choice('first_degree_convs', first_degree_convs, (1, 2))
        check_choice('use_activation', use_activation, (True, False))
        check_choice('with_cp', with_cp, (True, False))
        self.with_cp = with_cp
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.first_degree_convs = first_degree_convs
        self.use_activation = use_activation
        conv_cfg = conv_cfg_option('conv_cfg', conv_cfg)
        norm_cfg = required_norm_cfg_option('norm_cfg', norm_cfg)
        check_norm_channels('norm_cfg', norm_cfg, out_channels)
        self.norm_cfg = norm_cfg  # also the norm of a subclass's roles left at 'BN'
        act_cfg = activation_option('act_cfg', act_cfg, RELU, use_activation, 'the block')
        act_cfg = act_cfg if use_activation else None

        self.conv1 = build_conv_layer(
            conv_cfg, in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm1_name, norm1 = build_norm_layer(norm_cfg, out_channels, postfix=1)
        self.add_module(self.norm1_name, norm1)
        if first_degree_convs == 2:
            self.conv2 = build_conv_layer(
                conv_cfg, out_channels, out_channels, 3, stride=1, padding=1, bias=False)
            self.norm2_name, norm2 = build_norm_layer(norm_cfg, out_channels, postfix=2)
            self.add_module(self.norm2_name, norm2)
        self.downsample: Optional[nn.Sequential] = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                build_conv_layer(conv_cfg, in_channels, out_channels, 1, stride=stride,
                                 bias=False),
                build_norm_layer(norm_cfg, out_channels)[1])
        self.relu = build_activation_layer(act_cfg) if act_cfg is not None else nn.Identity()

    @property
    def last_branch_norm(self) -> nn.Module:
        """The norm that closes the branch (its γ is zeroed by ``zero_init_residual``)."""
        name = self.norm2_name if self.first_degree_convs == 2 else self.norm1_name
        return getattr(self, name)

    def branch(self, x: Tensor) -> Tensor:
        """C z: conv1-norm1-act[-conv2-norm2]."""
        out = self.relu(getattr(self, self.norm1_name)(self.conv1(x)))
        if self.first_degree_convs == 2:
            out = getattr(self, self.norm2_name)(self.conv2(out))
        return out

    def shortcut(self, x: Tensor) -> Tensor:
        """I z: identity, or a strided 1×1 conv + norm when the shape changes."""
        return x if self.downsample is None else self.downsample(x)

    def polynomial_terms(self, branch: Tensor, shortcut: Tensor) -> Tensor:
        """Sum of the block's polynomial terms before its output activation; degree 1: C z + I z.

        Shapes: branch, shortcut (B, out_channels, H', W') -> (B, out_channels, H', W').
        """
        return branch + shortcut

    def forward(self, x: Tensor) -> Tensor:
        # also when only the block's own parameters need gradients (its input comes from frozen
        # stages): the non-reentrant checkpoint back-propagates to them all the same
        if self.with_cp and torch.is_grad_enabled() and (
                x.requires_grad or any(p.requires_grad for p in self.parameters())):
            out = checkpoint(self._terms, x, use_reentrant=False,
                             context_fn=self._recompute_contexts)
        else:
            out = self._terms(x)
        return self.relu(out)

    def _recompute_contexts(self) -> Tuple[ContextManager, ContextManager]:
        """The checkpoint's contexts: none for the forward pass; for the recomputation in the
        backward pass, one that restores the block's buffers (a BatchNorm in training mode would
        update its running statistics a second time with the same batch)."""
        return contextlib.nullcontext(), self._buffers_restored()

    @contextlib.contextmanager
    def _buffers_restored(self) -> Iterator[None]:
        saved = [(buffer, buffer.clone()) for buffer in self.buffers()]
        try:
            yield
        finally:
            with torch.no_grad():
                for buffer, value in saved:
                    buffer.copy_(value)

    def _terms(self, x: Tensor) -> Tensor:
        # The shortcut is computed once per forward (the official PDC code ran it twice).
        return self.polynomial_terms(self.branch(x), self.shortcut(x))
