"""A small instance-segmentation set in the exact COCO format, made offline from real data.

Backgrounds are crops of the photographs bundled with scikit-image (astronaut, coffee, chelsea,
rocket, ...); instances are Fashion-MNIST items (Debian's ``dataset-fashion-mnist``), scaled and
tinted, pasted without overlap. Each instance's segmentation is one polygon (the outer contour of
the item) and the pasted pixels are exactly that polygon's rasterisation by pycocotools, so the
annotations are exact: bbox and area are computed from the same mask, and evaluating the ground
truth against itself gives AP 1.0.

Layout (mmdet's COCO layout, so a COCO config only needs ``data_root`` and the classes)::

    out_dir/train2017/000000000001.jpg ...
    out_dir/val2017/000000001001.jpg ...
    out_dir/annotations/instances_train2017.json
    out_dir/annotations/instances_val2017.json

Training instances come from Fashion-MNIST's training images, validation instances from its
test images.
"""
import json
import os
import os.path as osp
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import cv2
import numpy as np
from mmengine.config import Config
from pycocotools import mask as mask_utils

from ..fileio import atomic_write
from .local import LocalFashionMNIST, is_int

__all__ = ['FASHION_MNIST_CLASSES', 'BACKGROUND_PHOTOS', 'CONFIG_DIR', 'MIN_IMAGE_SIDE',
           'DEFAULT_ITEM_SIZES', 'write_fashion_coco', 'fashion_coco_detector_config']

#: Fashion-MNIST's classes, COCO category ids 1..10 in this order.
FASHION_MNIST_CLASSES: Tuple[str, ...] = ('T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat',
                                          'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot')
#: ``skimage.data`` photographs that ship inside scikit-image (no download).
BACKGROUND_PHOTOS: Tuple[str, ...] = ('astronaut', 'coffee', 'chelsea', 'rocket', 'camera',
                                      'coins', 'hubble_deep_field', 'immunohistochemistry')
SPLITS = {'train': ('train2017', 1), 'val': ('val2017', 1001)}  # folder, first image id
#: mmengine replaces this in a config file by the file's folder when it loads the file.
CONFIG_DIR = '{{ fileDirname }}'
ITEM_THRESHOLD = 32  # grey level above which a Fashion-MNIST pixel belongs to the item
#: The smallest image side :func:`write_fashion_coco` takes.
MIN_IMAGE_SIDE = 32
#: (min, max) side in pixels of a pasted item, :func:`write_fashion_coco`'s ``item_sizes``.
DEFAULT_ITEM_SIZES = (56, 120)
#: JPEG quality of the written images.
JPEG_QUALITY = 95


def _load_photos(names: Sequence[str]) -> List[np.ndarray]:
    """The named ``skimage.data`` photographs as H×W×3 uint8 BGR arrays."""
    try:
        import skimage.data
    except ImportError as error:
        raise ImportError('write_fashion_coco needs scikit-image for its bundled photographs '
                          '(pip install scikit-image; tools/setup_env.sh installs it)') from error
    photos = []
    for name in names:
        loader = getattr(skimage.data, name, None)
        if loader is None:
            raise ValueError(f'background {name!r} is not in skimage.data; '
                             f'choose from {list(BACKGROUND_PHOTOS)}')
        image = np.asarray(loader())
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        photos.append(cv2.cvtColor(image[..., :3].astype(np.uint8), cv2.COLOR_RGB2BGR))
    return photos


def _crop(photo: np.ndarray, size: Tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A random crop of ``size`` (H, W), scaling the photo up first if it is smaller."""
    h, w = size
    scale = max(h / photo.shape[0], w / photo.shape[1], 1.0)
    if scale > 1:
        photo = cv2.resize(photo, (int(np.ceil(photo.shape[1] * scale)),
                                   int(np.ceil(photo.shape[0] * scale))))
    y = int(rng.integers(0, photo.shape[0] - h + 1))
    x = int(rng.integers(0, photo.shape[1] - w + 1))
    return photo[y:y + h, x:x + w].copy()


def _item_polygon(item: np.ndarray, side: int) -> Optional[np.ndarray]:
    """The outer contour of a 28×28 item scaled to ``side`` pixels, as an N×2 float array.

    None if the item has no contour of at least 3 points (an empty or tiny silhouette).
    """
    scaled = cv2.resize(item, (side, side), interpolation=cv2.INTER_LINEAR)
    silhouette = (scaled > ITEM_THRESHOLD).astype(np.uint8)
    contours, _ = cv2.findContours(silhouette, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    if not contours:
        return None
    contour = max(contours, key=cv2.contourArea)
    contour = cv2.approxPolyDP(contour, 0.75, closed=True).reshape(-1, 2)
    if len(contour) < 3 or cv2.contourArea(contour.astype(np.float32)) < 16:
        return None
    return contour.astype(np.float64)


def _rasterise(polygon: np.ndarray, height: int, width: int) -> Tuple[dict, np.ndarray]:
    """The RLE and the H×W uint8 mask of one polygon, as pycocotools (and mmdet) decode it."""
    rle = mask_utils.merge(mask_utils.frPyObjects([polygon.ravel().tolist()], height, width))
    return rle, mask_utils.decode(rle)


def _compose_image(background: np.ndarray, items: List[Tuple[np.ndarray, int]],
                   instances: Tuple[int, int], item_sizes: Tuple[int, int],
                   rng: np.random.Generator) -> Tuple[np.ndarray, List[dict]]:
    """Paste items (28×28 grey, label) onto ``background`` without overlap.

    Returns the image and, per instance, ``dict(polygon, rle, mask, label)``.
    """
    image = background.copy()
    height, width = image.shape[:2]
    occupied = np.zeros((height, width), dtype=bool)
    placed: List[dict] = []
    wanted = int(rng.integers(instances[0], instances[1] + 1))
    for item, label in items:
        if len(placed) == wanted:
            break
        side = int(rng.integers(item_sizes[0], min(item_sizes[1], height, width) + 1))
        polygon = _item_polygon(item, side)
        if polygon is None:
            continue
        for _ in range(30):  # rejection sampling of a free position
            offset = np.array([rng.integers(0, width - side + 1),
                               rng.integers(0, height - side + 1)])
            shifted = polygon + offset
            rle, mask = _rasterise(shifted, height, width)
            grown = cv2.dilate(mask, np.ones((5, 5), np.uint8)).astype(bool)
            if mask.any() and not (grown & occupied).any():
                break
        else:
            continue
        inside = mask.astype(bool)
        # the item's own shading inside the polygon, tinted with a random colour
        shading = np.zeros((height, width), dtype=np.float64)
        x0, y0 = offset
        scaled = cv2.resize(item, (side, side), interpolation=cv2.INTER_LINEAR)
        shading[y0:y0 + side, x0:x0 + side] = scaled / 255.0
        colour = rng.integers(60, 256, size=3).astype(np.float64)
        painted = (0.35 + 0.65 * shading[..., None]) * colour
        image[inside] = np.clip(painted[inside], 0, 255).astype(np.uint8)
        occupied |= inside
        placed.append(dict(polygon=shifted, rle=rle, mask=mask, label=label))
    return image, placed


def _write_jpeg_atomic(path: str, image: np.ndarray) -> None:
    """Encode ``image`` as JPEG (quality :data:`JPEG_QUALITY`, the bytes ``cv2.imwrite`` would
    write) and write it atomically (:func:`mmpoly.fileio.atomic_write`)."""
    ok, encoded = cv2.imencode('.jpg', image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise OSError(f'could not encode the image of {path} as JPEG')
    atomic_write(encoded.tobytes(), path)


def _write_json_atomic(path: str, obj: dict) -> None:
    """Write JSON atomically (:func:`mmpoly.fileio.atomic_write`)."""
    atomic_write(json.dumps(obj), path)


def _is_int_pair(value: Any) -> bool:
    """Whether ``value`` is a pair of ints (a tuple or list)."""
    return isinstance(value, (tuple, list)) and len(value) == 2 and all(map(is_int, value))


def write_fashion_coco(out_dir: str,
                       num_images: Dict[str, int] = dict(train=8, val=4),
                       image_size: Tuple[int, int] = (256, 320),
                       instances: Tuple[int, int] = (2, 4),
                       item_sizes: Tuple[int, int] = DEFAULT_ITEM_SIZES,
                       backgrounds: Sequence[str] = BACKGROUND_PHOTOS,
                       fashion_mnist_root: str = LocalFashionMNIST.DEBIAN_ROOT,
                       seed: int = 0) -> Dict[str, str]:
    """Write the set described in the module docstring to ``out_dir``.

    Args:
        num_images: images per split, e.g. ``dict(train=8, val=4)``.
        image_size: (H, W) of every image.
        instances: (min, max) instances per image.
        item_sizes: (min, max) side in pixels of a pasted (square-scaled) item.
        backgrounds: ``skimage.data`` photo names to crop backgrounds from.
        fashion_mnist_root: folder with Fashion-MNIST's idx-ubyte(.gz) files.
        seed: the whole set is a function of the seed and the arguments.

    Every file is written atomically (:func:`mmpoly.fileio.atomic_write`): it appears under its
    name complete or not at all. Rewriting an existing set first removes each split's old
    annotation file, so that a run interrupted while rewriting its images leaves no annotation
    file that points at a mix of old and new images.

    Returns:
        split -> path of its annotation file.
    """
    if not isinstance(num_images, Mapping) or not num_images:
        raise ValueError(f'num_images must be a dict of images per split, e.g. dict(train=8, '
                         f'val=4), got {num_images!r}')
    for split, count in num_images.items():
        if split not in SPLITS:
            raise ValueError(f'num_images has unknown split {split!r}; allowed: {list(SPLITS)}')
        if not is_int(count) or count < 1:
            raise ValueError(f'num_images[{split!r}] must be a positive int, got {count!r}')
    if not _is_int_pair(image_size) or min(image_size) < MIN_IMAGE_SIDE:
        raise ValueError(f'image_size must be (H, W), two ints both >= {MIN_IMAGE_SIDE}, got '
                         f'{image_size!r}')
    if not _is_int_pair(instances) or not 1 <= instances[0] <= instances[1]:
        raise ValueError(f'instances must be (min, max), two ints with 1 <= min <= max, got '
                         f'{instances!r}')
    if not _is_int_pair(item_sizes) or not 16 <= item_sizes[0] <= item_sizes[1] \
            or item_sizes[0] > min(image_size):
        raise ValueError(f'item_sizes must be (min, max), two ints with 16 <= min <= max and '
                         f'min <= the image side {min(image_size)}, got {item_sizes!r}')
    if isinstance(backgrounds, str) or not isinstance(backgrounds, Sequence) or not backgrounds:
        raise ValueError(f'backgrounds must be a non-empty list of skimage.data photo names, '
                         f'e.g. {list(BACKGROUND_PHOTOS[:2])}, got {backgrounds!r}')
    if not is_int(seed):
        raise ValueError(f'seed must be an int, got {seed!r}')
    rng = np.random.default_rng(seed)
    photos = _load_photos(backgrounds)
    categories = [dict(id=i + 1, name=name, supercategory='fashion')
                  for i, name in enumerate(FASHION_MNIST_CLASSES)]
    os.makedirs(osp.join(out_dir, 'annotations'), exist_ok=True)
    written = {}
    for split, count in num_images.items():
        folder, first_id = SPLITS[split]
        source = LocalFashionMNIST(data_root=fashion_mnist_root,
                                   split='train' if split == 'train' else 'test')
        os.makedirs(osp.join(out_dir, folder), exist_ok=True)
        path = osp.join(out_dir, 'annotations', f'instances_{folder}.json')
        if osp.lexists(path):  # it would describe the images about to be replaced
            os.remove(path)
        images, annotations = [], []
        for k in range(count):
            image_id = first_id + k
            background = _crop(photos[k % len(photos)], tuple(image_size), rng)
            picks = rng.choice(len(source), size=4 * instances[1], replace=False)
            infos = [source.get_data_info(int(i)) for i in picks]
            items = [(info['img'], info['gt_label']) for info in infos]
            image, placed = _compose_image(background, items, tuple(instances), tuple(item_sizes),
                                           rng)
            file_name = f'{image_id:012d}.jpg'
            _write_jpeg_atomic(osp.join(out_dir, folder, file_name), image)
            images.append(dict(id=image_id, file_name=file_name, height=image_size[0],
                               width=image_size[1]))
            for instance in placed:
                x, y, w, h = (float(v) for v in mask_utils.toBbox(instance['rle']))
                annotations.append(dict(
                    id=len(annotations) + 1 + 100000 * (first_id // 1000), image_id=image_id,
                    category_id=instance['label'] + 1,
                    segmentation=[[round(float(v), 2) for v in instance['polygon'].ravel()]],
                    area=float(mask_utils.area(instance['rle'])), bbox=[x, y, w, h], iscrowd=0))
        _write_json_atomic(path, dict(
            info=dict(description='mmpoly Fashion-MNIST-on-photos instance segmentation set',
                      version='1.0', contributor='mmpoly tools/dataset_converters/'
                      'make_fashion_coco.py'),
            licenses=[dict(id=1, name='scikit-image data (public domain / CC0) and '
                           'Fashion-MNIST (MIT)', url='')],
            images=images, annotations=annotations, categories=categories))
        written[split] = path
    return written


def _set_num_classes(heads, num_classes: int) -> None:
    """Set ``num_classes`` of one head config or of each of a list (Cascade's three stages)."""
    for head in heads if isinstance(heads, list) else [heads]:
        head.num_classes = num_classes


def fashion_coco_detector_config(detector_config: str,
                                 data_root: str,
                                 image_scale: Tuple[int, int] = (320, 256),
                                 warmup_iters: int = 50) -> Config:
    """A COCO detection config, reading the set of :func:`write_fashion_coco` instead.

    ``data_root`` is made absolute, unless it starts with :data:`CONFIG_DIR`: then it is relative
    to the folder of the file the config is dumped to, and moving that folder with the set keeps
    the config working.

    Everything else stays (model, backbone hand-off, optimizer, 1× schedule, evaluation); what
    changes: ``data_root`` and the 10 Fashion-MNIST classes (datasets, heads, evaluators), the
    ``Resize`` scale (``image_scale`` as (W, H), for CPU runs), the learning rate scaled to the
    real batch (``auto_scale_lr.enable=True``, as ``--auto-scale-lr``), and a linear warm-up of
    ``warmup_iters`` iterations instead of 500, which a small set would never finish.
    """
    if not isinstance(data_root, str) or not data_root:
        raise ValueError(f'data_root must be the folder of the set (a str), got {data_root!r}')
    if not _is_int_pair(image_scale) or min(image_scale) < 1:
        raise ValueError(f'image_scale must be (W, H), two positive ints, got {image_scale!r}')
    if not is_int(warmup_iters) or warmup_iters < 1:
        raise ValueError(f'warmup_iters must be a positive int, got {warmup_iters!r}')
    cfg = Config.fromfile(detector_config)
    if not data_root.startswith(CONFIG_DIR):
        data_root = osp.abspath(data_root)
    data_root = osp.join(data_root, '')
    cfg.data_root = data_root
    for loader, folder in (('train_dataloader', 'train2017'), ('val_dataloader', 'val2017'),
                           ('test_dataloader', 'val2017')):
        dataset = cfg[loader].dataset
        dataset.update(data_root=data_root, ann_file=f'annotations/instances_{folder}.json',
                       data_prefix=dict(img=f'{folder}/'),
                       metainfo=dict(classes=FASHION_MNIST_CLASSES))
        for transform in dataset.pipeline:
            if transform.type == 'Resize':
                transform.scale = tuple(image_scale)
    for evaluator in ('val_evaluator', 'test_evaluator'):
        cfg[evaluator].ann_file = osp.join(data_root, 'annotations', 'instances_val2017.json')
    _set_num_classes(cfg.model.roi_head.bbox_head, len(FASHION_MNIST_CLASSES))
    _set_num_classes(cfg.model.roi_head.mask_head, len(FASHION_MNIST_CLASSES))
    cfg.auto_scale_lr.enable = True
    warmups = [s for s in cfg.param_scheduler if s.type == 'LinearLR' and not s.by_epoch]
    if len(warmups) != 1:
        raise ValueError(f'{detector_config}: expected one iteration-based LinearLR warm-up in '
                         f'param_scheduler, found {len(warmups)}')
    warmups[0].end = warmup_iters
    return cfg
