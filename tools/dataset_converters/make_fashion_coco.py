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

The generated configs' top-level ``train_pipeline`` and ``test_pipeline`` are those of their
dataloaders (the ``--image-size`` resize), not the COCO config's 1333×800.

Checked before anything is written (a usage error, exit status 2, and nothing created): OUT (a
folder, or one that can be created), ``--train``, ``--val``, ``--image-size``, ``--seed``,
``--fashion-mnist-root`` (the four idx-ubyte files) and each ``--configs`` entry (a ``*_coco.py``
config that loads, with the ``roi_head.bbox_head`` and ``roi_head.mask_head`` of an instance
segmentation detector, from which the Fashion-COCO config is made up front).
"""
import argparse
import copy
import os
import os.path as osp
import sys
import tempfile
from typing import Any, List, Optional, Sequence

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
DETECTION_CONFIGS = ['mask-rcnn_resnet18_fpn_1x_coco.py', 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py',
                     'cascade-mask-rcnn_resnet18_fpn_1x_coco.py',
                     'cascade-mask-rcnn_pdc-resnet18_fpn_1x_coco.py']
#: numpy's ``default_rng`` takes seeds >= 0; this keeps them to what a 32-bit seed holds.
MAX_SEED = 2**32 - 1


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('out_dir', help='where the set (and the configs) are written')
    parser.add_argument('--train', type=int, default=64, help='training images (default 64)')
    parser.add_argument('--val', type=int, default=16, help='validation images (default 16)')
    parser.add_argument('--image-size', type=int, nargs=2, default=(256, 320),
                        metavar=('H', 'W'), help='image size (default 256 320)')
    parser.add_argument('--seed', type=int, default=0,
                        help=f'the set is a function of the seed and the options; 0 to '
                        f'{MAX_SEED} (default 0)')
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
    if not 0 <= args.seed <= MAX_SEED:
        parser.error(f'--seed must be a whole number from 0 to {MAX_SEED}, got {args.seed}')
    problem = out_dir_problem(args.out_dir)
    if problem:
        parser.error(f'OUT {args.out_dir!r} {problem}; choose another folder')
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
    missing = missing_fashion_mnist(args.fashion_mnist_root)
    if missing:
        parser.error(f'--fashion-mnist-root {args.fashion_mnist_root!r} {missing}; on '
                     'Debian/Ubuntu: apt-get install dataset-fashion-mnist (files in '
                     '/usr/share/datasets/fashion-mnist), or give the folder holding the four '
                     '*-ubyte(.gz) files of https://github.com/zalandoresearch/fashion-mnist')
    # every config becomes its Fashion-COCO version now: one that cannot (no mask head, ...)
    # is refused before the set is written
    args.fashion_configs = []
    for config in args.configs:
        try:
            args.fashion_configs.append(fashion_config(config, args.image_size))
        except ValueError as error:
            parser.error(f'--configs: {config}: {error}')
    return args


def out_dir_problem(out_dir: str) -> Optional[str]:
    """Why the set cannot be written into ``out_dir`` (None if it can, as far as can be told
    before writing). Creates nothing: a missing folder is judged by its nearest existing
    ancestor, which must be a folder that a folder can be created in."""
    if osp.exists(out_dir) and not osp.isdir(out_dir):
        return 'is a file, not a folder'
    existing = osp.abspath(out_dir)
    while not osp.lexists(existing):
        existing = osp.dirname(existing)
    if not osp.isdir(existing):
        return f'cannot be created: {existing} is a file, not a folder'
    try:  # os.access says yes to root even on a read-only file system
        os.rmdir(tempfile.mkdtemp(prefix='.make_fashion_coco-probe-', dir=existing))
    except OSError as error:
        return f'cannot be written: {existing} is not writable ({error.strerror})'
    return None


def missing_fashion_mnist(root: str) -> Optional[str]:
    """What of Fashion-MNIST's four idx-ubyte files (``*.gz`` or extracted) ``root`` lacks, in
    words (None if it holds them all)."""
    from mmpoly.datasets.local import LocalFashionMNIST
    if not osp.exists(root):
        return 'does not exist'
    if not osp.isdir(root):
        return 'is not a folder'
    names = [name for name, _ in LocalFashionMNIST.train_list + LocalFashionMNIST.test_list]
    missing = [name for name in names
               if not any(osp.isfile(osp.join(root, n)) for n in (name, name[:-3]))]
    return f'lacks {", ".join(missing)}' if missing else None


def fashion_config(config: str, image_size: Sequence[int]) -> Any:
    """The Fashion-COCO version of the COCO detection ``config`` (reading the set relative to
    its own folder, images of ``image_size`` (H, W)), its top-level ``train_pipeline`` and
    ``test_pipeline`` made those of its dataloaders.

    Raises:
        ValueError: the config does not load, or is not an instance segmentation detector
            (``model.roi_head`` with ``bbox_head`` and ``mask_head``), or
            :func:`mmpoly.datasets.fashion_coco.fashion_coco_detector_config` cannot convert
            it; the message says which.
    """
    from mmengine.config import Config

    from mmpoly.datasets.fashion_coco import CONFIG_DIR, fashion_coco_detector_config
    try:
        cfg = Config.fromfile(config)
    except Exception as error:  # a syntax error, a missing _base_, ...
        raise ValueError(f'does not load ({type(error).__name__}: {error})') from error
    roi_head = (cfg.get('model') or {}).get('roi_head') or {}
    lacking = [head for head in ('bbox_head', 'mask_head') if not roi_head.get(head)]
    if lacking:
        raise ValueError(f'its model has no roi_head.{" and no roi_head.".join(lacking)}: '
                         'Fashion-COCO configs are made for instance segmentation detectors '
                         '(e.g. Mask R-CNN, Cascade Mask R-CNN), whose box and mask heads get '
                         "the set's 10 classes")
    try:
        fashion = fashion_coco_detector_config(config, CONFIG_DIR,
                                               image_scale=(image_size[1], image_size[0]))
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f'cannot be made into a Fashion-COCO config ({type(error).__name__}: '
                         f'{error})') from error
    # the COCO config's top-level pipelines (Resize 1333×800) would mislead a reader: they are
    # not what the dataloaders run
    for name, loader in (('train_pipeline', 'train_dataloader'),
                         ('test_pipeline', 'test_dataloader')):
        if name in fashion:
            fashion[name] = copy.deepcopy(fashion[loader].dataset.pipeline)
    return fashion


def main(argv: Optional[Sequence[str]] = None) -> List[str]:
    """Write the set and the configs; return the configs' paths."""
    args = parse_args(argv)
    from mmpoly.datasets.fashion_coco import write_fashion_coco
    from mmpoly.fileio import atomic_write
    from mmpoly.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    write_fashion_coco(args.out_dir, dict(train=args.train, val=args.val),
                       image_size=tuple(args.image_size),
                       fashion_mnist_root=args.fashion_mnist_root, seed=args.seed)
    written = []
    for config, cfg in zip(args.configs, args.fashion_configs):
        stem = osp.splitext(osp.basename(config))[0]
        # the config lies in the set's folder and reads it relative to itself
        path = osp.join(args.out_dir, stem[:-len('coco')] + 'fashion-coco.py')
        atomic_write(cfg.pretty_text, path)  # what cfg.dump(path) writes, complete or not at all
        written.append(path)
    print(f'wrote {args.train} + {args.val} images to {args.out_dir}'
          + ''.join(f'\nconfig: {path}' for path in written))
    return written


if __name__ == '__main__':
    sys.exit(main() and 0)
