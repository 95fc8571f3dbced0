"""Image checks for test pipelines: refuse an input the model was not trained on.

The Fashion-MNIST models take the images as the dataset gives them: 28×28 single-channel
``uint8`` arrays, normalised by the data preprocessor (mean 72.94, std 90.02 on the 0..255 scale).
Handed a float image in [0, 1] or an image of another size through mmpretrain's inference API
(``inference_model``, ``ImageClassificationInferencer``), they would predict garbage without a
word (a colour image failed later, in the backbone's channel check); :class:`CheckGreyImage`,
first in their test pipeline, raises one ValueError instead. It never converts: scaling a float
image, turning colour into grey or resizing are the caller's choices, which its message spells
out.
"""
from typing import List, Sequence, Tuple

import numpy as np
from mmcv.transforms import BaseTransform

from mmpoly.registry import TRANSFORMS

__all__ = ['CheckGreyImage']


def _check_size(size: Sequence[int]) -> Tuple[int, int]:
    """``size`` as an (H, W) pair of positive ints; ValueError naming the option otherwise."""
    if isinstance(size, (list, tuple)) and len(size) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
        return int(size[0]), int(size[1])
    raise ValueError(f'CheckGreyImage.size must be (H, W), two positive ints, got {size!r}')


def _describe(img: np.ndarray) -> str:
    """'dtype float32, shape (28, 28), values in [0, 1]' (no range for an empty array or a
    dtype other than bool, integer and float)."""
    text = f'dtype {img.dtype}, shape {tuple(img.shape)}'
    if not img.size:
        return text
    if np.issubdtype(img.dtype, np.floating):
        return text + f', values in [{img.min():g}, {img.max():g}]'
    if np.issubdtype(img.dtype, np.integer) or img.dtype == np.bool_:
        return text + f', values in [{int(img.min())}, {int(img.max())}]'
    return text


@TRANSFORMS.register_module()
class CheckGreyImage(BaseTransform):
    """Check that ``results['img']`` is an H×W grey image on the 0..255 scale; pass it on
    unchanged (the same array object, not a pixel changed).

    Allowed: a numpy array of shape (H, W) or (H, W, 1) whose dtype is ``uint8``, or another
    integer dtype (signed or unsigned, not bool) whose values all lie in 0..255 (the data
    preprocessor turns either into the same float values). Float arrays are refused whatever
    their values: a [0, 1] image and a [0, 255] one cannot be told apart (an all-0/1 mask is
    both), so the caller says which by casting.

    Args:
        size: (H, W) the model takes (Fashion-MNIST: (28, 28)).

    Raises:
        ValueError: (in ``transform``) no 'img' field, or an image that is not such an array;
            the message names the field, what it got (type or dtype, shape, value range), what
            is allowed, and how to convert.
    """

    def __init__(self, size: Sequence[int] = (28, 28)) -> None:
        self.size = _check_size(size)

    def _allowed(self) -> str:
        height, width = self.size
        return (f'a {height}×{width} single-channel numpy array, shape ({height}, {width}) or '
                f'({height}, {width}, 1), of dtype uint8 (or another integer dtype with values '
                f'in 0..255), as the dataset gives its images')

    def _shape_fixes(self, shape: Tuple[int, ...]) -> List[str]:
        """How to turn an image of ``shape`` into one of ``self.size`` (none if it is one)."""
        height, width = self.size
        if shape in (self.size, self.size + (1, )):
            return []
        if shape == (1, ) + self.size:
            return [f'put the channel last or drop it: img[0] (shape ({height}, {width}))']
        if len(shape) == 2 or (len(shape) == 3 and shape[2] in (1, 3, 4)):
            fixes = []
            if len(shape) == 3 and shape[2] != 1:
                fixes.append("convert the colour image to grey (mmcv.bgr2gray(img) for BGR, "
                             "mmcv.rgb2gray(img) for RGB, or read the file with "
                             "mmcv.imread(path, 'grayscale'))")
            if shape[:2] != self.size:
                fixes.append(f'resize it to {height}×{width} grey '
                             f'(mmcv.imresize(img, ({width}, {height})))')
            return fixes
        return [f'give one grey image of shape ({height}, {width}) (a batch: a list of such '
                'images)']

    def transform(self, results: dict) -> dict:
        if 'img' not in results:
            raise ValueError(f"CheckGreyImage: the results have no 'img' field (keys: "
                             f'{sorted(results)}); expected {self._allowed()}')
        img = results['img']
        if not isinstance(img, np.ndarray):
            raise ValueError(f'img: got a {type(img).__name__}, not a numpy array; expected '
                             f'{self._allowed()}. To fix: pass a numpy array (np.asarray(img))')
        fixes = self._shape_fixes(tuple(img.shape))
        if np.issubdtype(img.dtype, np.floating):
            high = img.max() if img.size else 0
            fixes.append('scale a float [0, 1] image by 255 and cast it to uint8 '
                         '(np.round(img * 255).astype(np.uint8))' if high <= 1 else
                         'cast a float image on the 0..255 scale to uint8 '
                         '(np.clip(np.round(img), 0, 255).astype(np.uint8))')
        elif not np.issubdtype(img.dtype, np.integer):  # bool, complex, object, str, ...
            fixes.append('give a uint8 image (0 = black, 255 = white)')
        elif img.dtype != np.uint8 and img.size and (img.min() < 0 or img.max() > 255):
            fixes.append('bring its values into 0..255 and cast it to uint8')
        if fixes:
            raise ValueError(f'img: got an array of {_describe(img)}; expected '
                             f'{self._allowed()}. To fix: ' + '; '.join(fixes))
        return results

    def __repr__(self) -> str:
        return f'{type(self).__name__}(size={self.size})'
