"""COCO 2017 in mmdet's layout, read from local files, with a clear error when they are missing."""
import os.path as osp
from typing import List

from mmdet.datasets import CocoDataset

from mmpoly.registry import DET_DATASETS

COCO_LAYOUT = ('{root}train2017/, {root}val2017/ and {root}annotations/instances_{{train,val}}'
               '2017.json')


@DET_DATASETS.register_module()
class LocalCocoDataset(CocoDataset):
    """mmdet's :class:`~mmdet.datasets.CocoDataset`, checking its files before reading them.

    A missing ``data_root``, annotation file or image folder raises a FileNotFoundError that
    names the path and says how to get COCO (or a small offline set in the same layout:
    ``tools/dataset_converters/make_fashion_coco.py``). Registered in mmdet's DATASETS.
    """

    def load_data_list(self) -> List[dict]:
        wanted = [('data_root', self.data_root, osp.isdir),
                  ('ann_file', self.ann_file, osp.isfile),
                  ('data_prefix.img', self.data_prefix.get('img', ''), osp.isdir)]
        for field, path, check in wanted:
            if path and not check(path):
                root = self.data_root or ''
                raise FileNotFoundError(
                    f'{type(self).__name__}: {field} {path!r} does not exist. Download COCO 2017 '
                    'from https://cocodataset.org/#download (train2017.zip, val2017.zip, '
                    'annotations_trainval2017.zip) and extract it so that '
                    f'{COCO_LAYOUT.format(root=osp.join(root, ""))} exist, or set '
                    f'data_root (and ann_file, data_prefix) to where they are. '
                    'tools/dataset_converters/make_fashion_coco.py writes a small offline set in '
                    'this layout.')
        return super().load_data_list()
