"""Write a small COCO-format instance-segmentation set offline, and detector configs that use it.

Photographs bundled with scikit-image as backgrounds, Fashion-MNIST items pasted as instances
(exact polygon masks; see ``mmpoly.datasets.fashion_coco``), in mmdet's COCO layout. For each
COCO detection config it also writes ``OUT/<config>_fashion-coco.py`` (the same detector,
reading this set relative to the config's own folder, so the folder can be moved), which
``tools/train.py`` and ``tools/test.py`` take as they are::

    python tools/dataset_converters/make_fashion_coco.py data/fashion_coco
    python tools/train.py data/fashion_coco/mask-rcnn_pdc-resnet18_fpn_1x_fashion-coco.py \\
        --cfg-options \\
        model.backbone.init_cfg.checkpoint=work_dirs/pdc_resnet18_8xb32_in1k/epoch_100.pth
"""
import argparse
import os.path as osp
import sys
from typing import List, Optional, Sequence

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DETECTION_CONFIGS = ['mask-rcnn_resnet18_fpn_1x_coco.py', 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py',
                     'cascade-mask-rcnn_resnet18_fpn_1x_coco.py',
                     'cascade-mask-rcnn_pdc-resnet18_fpn_1x_coco.py']


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('out_dir', help='where the set (and the configs) are written')
    parser.add_argument('--train', type=int, default=64, help='training images (default 64)')
    parser.add_argument('--val', type=int, default=16, help='validation images (default 16)')
    parser.add_argument('--image-size', type=int, nargs=2, default=(256, 320),
                        metavar=('H', 'W'), help='image size (default 256 320)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--fashion-mnist-root', default='/usr/share/datasets/fashion-mnist',
                        help="Fashion-MNIST's idx-ubyte(.gz) files "
                             "(Debian's dataset-fashion-mnist)")
    parser.add_argument('--configs', nargs='*', default=[osp.join(REPO, 'configs', name)
                                                         for name in DETECTION_CONFIGS],
                        help='COCO detection configs to write a Fashion-COCO version of '
                        '(default: the four in configs/; none with an empty list)')
    args = parser.parse_args(argv)
    for flag in ('train', 'val'):
        if getattr(args, flag) < 1:
            parser.error(f'--{flag} must be a positive number of images, got '
                         f'{getattr(args, flag)}')
    for config in args.configs:  # before the set is written
        if not osp.isfile(config):
            parser.error(f'--configs: {config} is not a file')
        if not osp.splitext(osp.basename(config))[0].endswith('_coco'):
            parser.error(f'--configs: {config} is not a COCO config (*_coco.py)')
    from mmpoly.datasets.fashion_coco import DEFAULT_ITEM_SIZES, MIN_IMAGE_SIDE

    # the items keep write_fashion_coco's default sizes (no option sets them): the smallest
    # must fit into the image, which write_fashion_coco would report as its item_sizes
    low, high = DEFAULT_ITEM_SIZES
    smallest = max(MIN_IMAGE_SIDE, low)
    if min(args.image_size) < smallest:
        parser.error(f'--image-size {args.image_size[0]} {args.image_size[1]}: both sides must '
                     f'be >= {smallest} (the items pasted into the images are {low} to {high} '
                     f'pixels square, and the smallest must fit)')
    return args


def main(argv: Optional[Sequence[str]] = None) -> List[str]:
    """Write the set and the configs; return the configs' paths."""
    args = parse_args(argv)
    from mmpoly.datasets.fashion_coco import (CONFIG_DIR, fashion_coco_detector_config,
                                              write_fashion_coco)
    from mmpoly.fileio import atomic_write
    from mmpoly.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    write_fashion_coco(args.out_dir, dict(train=args.train, val=args.val),
                       image_size=tuple(args.image_size),
                       fashion_mnist_root=args.fashion_mnist_root, seed=args.seed)
    written = []
    for config in args.configs:
        stem = osp.splitext(osp.basename(config))[0]
        # the config lies in the set's folder and reads it relative to itself
        cfg = fashion_coco_detector_config(config, CONFIG_DIR,
                                           image_scale=(args.image_size[1], args.image_size[0]))
        path = osp.join(args.out_dir, stem[:-len('coco')] + 'fashion-coco.py')
        atomic_write(cfg.pretty_text, path)  # what cfg.dump(path) writes, complete or not at all
        written.append(path)
    print(f'wrote {args.train} + {args.val} images to {args.out_dir}'
          + ''.join(f'\nconfig: {path}' for path in written))
    return written


if __name__ == '__main__':
    sys.exit(main() and 0)
