"""Detector backbones taken from mmpoly's classifier configs (the classifier → detector hand-off).

A detection config does not restate its backbone: it takes the one of the ImageNet classifier
config whose checkpoint initialises it, so both always agree::

    _base_ = ['./_base_/detection/mask-rcnn_fpn_1x_coco.py']
    from mmpoly.utils import classifier_backbone  # after _base_ (mmengine's config rule)

    model = dict(backbone=classifier_backbone('pdc_resnet18_8xb32_in1k.py'),
                 neck=dict(in_channels=[60, 120, 240, 480]))
"""
import os.path as osp
from typing import Optional, Sequence

from mmengine.config import Config

from .resources import RESOURCE_ROOTS

__all__ = ['mmpoly_config_path', 'classifier_backbone', 'classifier_checkpoint']

#: Where mmpoly's configs are: an installed package's ``.mim/configs``, or the checkout's.
CONFIG_ROOTS = tuple(osp.join(root, 'configs') for root in RESOURCE_ROOTS)


def mmpoly_config_path(name: str) -> str:
    """The path of mmpoly config ``name`` (e.g. ``'pdc_resnet18_8xb32_in1k.py'``)."""
    for root in CONFIG_ROOTS:
        path = osp.join(root, name)
        if osp.isfile(path):
            return path
    raise FileNotFoundError(f'mmpoly config {name!r} is not in {list(CONFIG_ROOTS)}')


def classifier_checkpoint(classifier_config: str) -> str:
    """Where ``tools/train.py`` / ``tools/dist_train.sh`` leave the classifier's final checkpoint.

    ``work_dirs/<config name>/epoch_<max_epochs>.pth``, relative to the directory of the run.
    """
    cfg = Config.fromfile(mmpoly_config_path(classifier_config))
    stem = osp.splitext(osp.basename(classifier_config))[0]
    return osp.join('work_dirs', stem, f'epoch_{cfg.train_cfg.max_epochs}.pth')


def classifier_backbone(classifier_config: str,
                        out_indices: Sequence[int] = (0, 1, 2, 3),
                        frozen_stages: int = 1,
                        norm_eval: bool = True,
                        checkpoint: Optional[str] = None) -> dict:
    """The backbone of an mmpoly classifier config, set up for fine-tuning in a detector.

    Args:
        classifier_config: an mmpoly config name, e.g. ``'pdc_resnet18_8xb32_in1k.py'``.
        out_indices / frozen_stages / norm_eval: the detector's usual backbone settings (all
            four stages to the FPN, stem and first stage frozen, BN statistics kept).
        checkpoint: the classifier checkpoint; default :func:`classifier_checkpoint`. Users
            change it with ``--cfg-options model.backbone.init_cfg.checkpoint=PATH``.

    Returns:
        The backbone dict with ``_delete_=True`` (it replaces the base detector's backbone) and
        ``init_cfg=dict(type='Pretrained', prefix='backbone.', ...)``, whose checkpoint loads
        strictly (every backbone tensor, nothing else).
    """
    path = mmpoly_config_path(classifier_config)
    backbone = Config.fromfile(path).model.backbone.to_dict()
    backbone.update(
        _delete_=True,
        out_indices=tuple(out_indices),
        frozen_stages=frozen_stages,
        norm_eval=norm_eval,
        init_cfg=dict(
            type='Pretrained',
            checkpoint=checkpoint or classifier_checkpoint(classifier_config),
            prefix='backbone.',
            classifier_config=osp.join('configs', classifier_config)))
    return backbone
