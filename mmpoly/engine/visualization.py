"""Drawing predictions under test-time augmentation.

``tools/test.py --tta --show-dir DIR`` (or ``--show``) switches the config's visualisation hook
to :class:`TTAVisualizationHook`: mmpretrain's ``VisualizationHook`` takes a TestTimeAug batch,
which holds one batch of inputs per view, for the images and fails on its first batch.
"""
from typing import Any, Sequence

from mmpretrain.engine.hooks import VisualizationHook

from mmpoly.registry import HOOKS

__all__ = ['TTAVisualizationHook']


@HOOKS.register_module()
class TTAVisualizationHook(VisualizationHook):
    """mmpretrain's ``VisualizationHook`` for a TTA model: draws each sample's first view of the
    TTA batch (``inputs``: [view][sample]) with the merged prediction; a plain batch is drawn
    as mmpretrain's hook draws it."""

    def _draw_samples(self, batch_idx: int, data_batch: dict, data_samples: Sequence[Any],
                      step: int = 0) -> None:
        views = data_batch['inputs']
        if isinstance(views, (list, tuple)):  # [view][sample]: draw view 0 of each sample
            data_batch = {**data_batch, 'inputs': views[0]}
        super()._draw_samples(batch_idx, data_batch, data_samples, step)
