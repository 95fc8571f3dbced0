"""Write Fashion-MNIST in mmpretrain's ImageNet layout, so the ImageNet configs train on it.

    python tools/dataset_converters/fashion_mnist_to_imagenet.py data/fashion_imagenet
    python tools/train.py configs/resnet18_8xb32_in1k.py --cfg-options \\
        train_dataloader.dataset.data_root=data/fashion_imagenet \\
        val_dataloader.dataset.data_root=data/fashion_imagenet model.head.num_classes=10

Layout (what mmpretrain's ``ImageNet`` reads for ``split='train'`` / ``'val'``)::

    OUT/train/<class>/<class>_<index>.png      grey 28×28 PNGs, one folder per class
    OUT/val/<class>/<class>_<index>.png        from Fashion-MNIST's test split
    OUT/meta/train.txt, OUT/meta/val.txt       lines '<class>/<file>.png <label>'

``<class>`` is the class name in lower case with non-alphanumerics as '-' (``t-shirt-top``);
labels 0..9 follow Fashion-MNIST's order. ``--train`` / ``--val`` take the first N images of a
seeded permutation of each split (default: all 60,000 / 10,000). The set is written to a
temporary folder next to OUT and renamed, so OUT is complete or absent.
"""
import argparse
import os
import os.path as osp
import re
import shutil
import sys
import tempfile
from typing import Dict, Optional, Sequence

import cv2
import numpy as np

PROG = 'tools/dataset_converters/fashion_mnist_to_imagenet.py'
FASHION_MNIST_ROOT = '/usr/share/datasets/fashion-mnist'
SPLITS = {'train': 'train', 'val': 'test'}  # ImageNet split -> Fashion-MNIST split


def class_folder(name: str) -> str:
    """'T-shirt/top' -> 't-shirt-top'."""
    return re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')


def write_fashion_imagenet(out_dir: str, num_images: Dict[str, Optional[int]],
                           fashion_mnist_root: str = FASHION_MNIST_ROOT,
                           seed: int = 0) -> Dict[str, int]:
    """Write the layout above to ``out_dir`` (which must not exist); return split -> count."""
    from mmpoly.datasets import FASHION_MNIST_CLASSES, LocalFashionMNIST

    if osp.exists(out_dir):
        raise FileExistsError(f'{out_dir} exists; remove it or choose another output folder')
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f'--seed must be a whole number >= 0, got {seed!r}')
    for split, count in num_images.items():
        if split not in SPLITS:
            raise ValueError(f'unknown split {split!r}; allowed: {list(SPLITS)}')
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                  or count < 1):
            raise ValueError(f'--{split} must be a positive number of images, got {count!r}')
    folders = [class_folder(name) for name in FASHION_MNIST_CLASSES]
    parent = osp.dirname(osp.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f'.{osp.basename(out_dir)}.', dir=parent)
    counts = {}
    try:
        os.makedirs(osp.join(tmp, 'meta'))
        for split, count in num_images.items():
            source = LocalFashionMNIST(data_root=fashion_mnist_root, split=SPLITS[split],
                                       lazy_init=False)
            if count is not None and count > len(source):
                raise ValueError(f'--{split} {count} exceeds the {len(source)} images of '
                                 f"Fashion-MNIST's {SPLITS[split]} split; allowed: 1 to "
                                 f'{len(source)} (or leave it out for all)')
            order = np.random.default_rng(seed).permutation(len(source))[:count]
            for folder in folders:
                os.makedirs(osp.join(tmp, split, folder))
            lines = []
            for index in sorted(order.tolist()):
                info = source.get_data_info(index)
                label = int(info['gt_label'])
                rel = f'{folders[label]}/{folders[label]}_{index:05d}.png'
                if not cv2.imwrite(osp.join(tmp, split, rel), np.asarray(info['img'])):
                    raise OSError(f'could not write {osp.join(tmp, split, rel)}')
                lines.append(f'{rel} {label}\n')
            with open(osp.join(tmp, 'meta', f'{split}.txt'), 'w') as f:
                f.writelines(lines)
            counts[split] = len(lines)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return counts


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('out_dir', help='the folder to write (must not exist)')
    parser.add_argument('--train', type=int, default=None,
                        help='training images (default all 60,000)')
    parser.add_argument('--val', type=int, default=None,
                        help='validation images, from the test split (default all 10,000)')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the permutation the subsets are taken from')
    parser.add_argument('--fashion-mnist-root', default=FASHION_MNIST_ROOT,
                        help="Fashion-MNIST's idx-ubyte(.gz) files (Debian's "
                        'dataset-fashion-mnist)')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, int]:
    """Write the set; a mistake in the arguments (an existing OUT_DIR, a count out of range, a
    negative seed, missing Fashion-MNIST files, a folder that cannot be written) is one line
    ``...: error: ...`` and exit status 1."""
    from mmpoly.utils.startup import StartupError, folder_problem, startup_errors
    args = parse_args(argv)
    with startup_errors(PROG):
        problem = None if osp.exists(args.out_dir) else folder_problem(args.out_dir, 'OUT_DIR')
        if problem:
            raise StartupError(f'{problem}; choose another output folder')
        try:
            counts = write_fashion_imagenet(args.out_dir, dict(train=args.train, val=args.val),
                                            args.fashion_mnist_root, args.seed)
        except (FileExistsError, FileNotFoundError, ValueError) as error:
            raise StartupError(str(error)) from error
    print(f'wrote {counts["train"]} training and {counts["val"]} validation images to '
          f'{args.out_dir}')
    return counts


if __name__ == '__main__':
    main()
    sys.exit(0)
