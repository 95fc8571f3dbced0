"""COCO 2017 in mmdet's layout, read from local files, with a clear error when they are missing."""
import json
import os.path as osp
from typing import List, Mapping, Optional

from mmdet.datasets import CocoDataset
from mmdet.datasets.api_wrappers import COCO

from mmpoly.registry import DET_DATASETS
from .local import join_to_root

COCO_LAYOUT = ('{root}train2017/, {root}val2017/ and {root}annotations/instances_{{train,val}}'
               '2017.json')


#: Top-level keys every COCO annotation file has (test-dev's image info has no annotations).
COCO_REQUIRED_KEYS = ('images', 'categories')


class CheckedCOCO(COCO):
    """mmdet's COCO API, raising a ValueError that names the file when it is not valid JSON, not
    a JSON object or lacks one of :data:`COCO_REQUIRED_KEYS`."""

    def __init__(self, annotation_file: Optional[str] = None) -> None:
        try:
            super().__init__(annotation_file)
        except (json.JSONDecodeError, UnicodeDecodeError, AssertionError) as error:
            raise ValueError(f'ann_file {annotation_file!r} is not a COCO annotation file '
                             f'(a JSON object): {error}; re-extract or re-write it') from error
        missing = [key for key in COCO_REQUIRED_KEYS if key not in self.dataset]
        if annotation_file is not None and missing:
            raise ValueError(f'ann_file {annotation_file!r} lacks the COCO key(s) {missing}; '
                             f'its keys: {sorted(self.dataset)}; a COCO annotation file has '
                             "'images', 'categories' and (except test-dev) 'annotations'")


@DET_DATASETS.register_module()
class LocalCocoDataset(CocoDataset):
    """mmdet's :class:`~mmdet.datasets.CocoDataset`, checking its files before reading them.

    A missing ``data_root``, annotation file or image folder (or one of the wrong kind: a folder
    given as ``ann_file``) raises a FileNotFoundError that names the field and the path and says
    how to get COCO (or a small offline set in the same layout:
    ``tools/dataset_converters/make_fashion_coco.py``). Registered in mmdet's DATASETS.
    An annotation file that is not COCO JSON raises a ValueError naming it (:class:`CheckedCOCO`).
    """

    COCOAPI = CheckedCOCO

    @classmethod
    def _missing(cls, data_root: str, ann_file: str, img_prefix: str) -> Optional[Exception]:
        """The FileNotFoundError for the first of ``data_root``, ``ann_file`` and
        ``data_prefix.img`` (as the dataset joins them) that does not exist or is of the wrong
        kind (a folder given as ``ann_file``, a file as a folder), else None."""
        wanted = [('data_root', data_root, osp.isdir, 'a file, not a folder'),
                  ('ann_file', ann_file, osp.isfile, 'a folder, not a COCO annotation JSON file'),
                  ('data_prefix.img', img_prefix, osp.isdir, 'a file, not a folder of images')]
        for field, path, check, wrong_kind in wanted:
            if path and not check(path):
                root = osp.join(data_root or '', '')
                if osp.exists(osp.normpath(path)):  # normpath: also 'a_file/'
                    if field == 'ann_file' and osp.isfile(osp.normpath(path)):
                        wrong_kind = "a file given with a '/' at its end: remove the '/'"
                    return FileNotFoundError(
                        f'{cls.__name__}: {field} {path!r} is {wrong_kind}. COCO 2017\'s layout '
                        f'is {COCO_LAYOUT.format(root=root)}: set data_root to its folder, '
                        'ann_file to one of its JSON files and data_prefix.img to one of its '
                        'image folders.')
                return FileNotFoundError(
                    f'{cls.__name__}: {field} {path!r} does not exist. Download COCO 2017 '
                    'from https://cocodataset.org/#download (train2017.zip, val2017.zip, '
                    'annotations_trainval2017.zip) and extract it so that '
                    f'{COCO_LAYOUT.format(root=root)} exist, or set '
                    f'data_root (and ann_file, data_prefix) to where they are. '
                    'tools/dataset_converters/make_fashion_coco.py writes a small offline set in '
                    'this layout.')
        return None

    @classmethod
    def check_data(cls, cfg: Mapping) -> None:
        """Raise the FileNotFoundError that loading dataset config ``cfg`` would raise for a
        missing folder or annotation file, without building the dataset or reading its files
        (``tools/train.py`` and ``tools/test.py`` call it before the Runner is built). Values
        that are not local paths (not strings, ``s3://...``) are left to the dataset."""
        data_root, ann_file = cfg.get('data_root', ''), cfg.get('ann_file', '')
        prefix = cfg.get('data_prefix', dict(img_path=''))
        img = prefix.get('img', '') if isinstance(prefix, Mapping) else None
        paths = (data_root or '', ann_file or '', img)
        if not all(isinstance(path, str) and '://' not in path for path in paths):
            return
        error = cls._missing(data_root or '', ann_file and join_to_root(data_root, ann_file),
                             join_to_root(data_root, img))
        if error is not None:
            raise error

    def load_data_list(self) -> List[dict]:
        error = self._missing(self.data_root or '', self.ann_file or '',
                              self.data_prefix.get('img', ''))
        if error is not None:
            raise error
        names: List[str] = []  # the file's category names, in its order

        class RecordingCOCO(self.COCOAPI):  # type: ignore[name-defined, misc]
            def __init__(inner, annotation_file: Optional[str] = None) -> None:
                super().__init__(annotation_file)
                names.extend(cat['name'] for cat in inner.load_cats(inner.get_cat_ids()))

        self.COCOAPI = RecordingCOCO  # mmdet deletes its COCO object before returning
        try:
            data_list = super().load_data_list()
        finally:
            del self.COCOAPI
        self._check_classes(names)
        return data_list

    def _check_classes(self, names: List[str]) -> None:
        """Refuse ``metainfo['classes']`` that the annotation file's categories do not give in
        that order. mmdet numbers the labels in the file's category order and drops the
        categories not named: a class missing from the file shifted the labels after it, and
        classes in another order gave each label another name, both without a word (and classes
        none of which is in the file loaded no instance at all)."""
        classes = list(self.metainfo.get('classes') or ())
        shown = f'{names[:12]}{" ..." if len(names) > 12 else ""} ({len(names)})'
        missing = [name for name in classes if name not in names]
        if missing:
            raise ValueError(
                f'metainfo classes {missing[:8]}{" ..." if len(missing) > 8 else ""} are not '
                f'categories of ann_file {self.ann_file!r}, whose categories are {shown}; give '
                'metainfo=dict(classes=...) with names of its categories, in its order')
        if [name for name in names if name in classes] != classes:
            raise ValueError(
                f'metainfo classes are in another order than the categories of ann_file '
                f'{self.ann_file!r} ({shown}): mmdet numbers the labels in the file\'s order, '
                'so each label would get another name; list the classes in the file\'s order')
