"""ImageNet-1k in mmpretrain's layout, read from local files, with one clear error when they are
missing (see :class:`LocalImageNet`)."""
import os
import os.path as osp
import re
from typing import List, Mapping, Optional, Tuple, Union

from mmengine.fileio import get_file_backend, list_from_file
from mmpretrain.datasets import ImageNet
from mmpretrain.datasets.custom import find_folders

from mmpoly.registry import DATASETS

#: mmpretrain's ImageNet layout under ``data_root`` (what :class:`mmpretrain.datasets.ImageNet`
#: reads for ``split='train'`` / ``'val'``).
IMAGENET_LAYOUT = """\
    {root}/train/<wnid>/*.JPEG  one folder per class, e.g. train/n01440764/n01440764_10026.JPEG
    {root}/val/*.JPEG           the validation images (flat, or in <wnid>/ folders)
    {root}/meta/train.txt       lines '<wnid>/<name>.JPEG <label>' (optional with class folders)
    {root}/meta/val.txt         lines '<name>.JPEG <label>' (needed for a flat val/)"""

#: The values of ``split``: mmpretrain's ImageNet splits, or '' for data_prefix / ann_file as
#: given.
SPLITS = ('train', 'val', 'test', '')


def _quoted(path: str) -> str:
    """``'path'``, and the absolute path for a relative one."""
    return repr(path) if osp.isabs(path) else f'{path!r} (= {osp.abspath(path)})'


@DATASETS.register_module()
class LocalImageNet(ImageNet):
    """mmpretrain's :class:`~mmpretrain.datasets.ImageNet`, checking its files before reading
    them.

    A missing ``data_root``, split folder or annotation file raises one FileNotFoundError that
    names the path, shows the expected layout and says how to point ``data_root`` elsewhere.
    :meth:`check_data` runs the same check on a dataset config without building the dataset
    (``tools/train.py`` and ``tools/test.py`` call it before the Runner is built).

    An unknown ``split``, a malformed ``ann_file`` line (not '<image path> <label>' with an
    integer label) and a label outside ``range(len(metainfo classes))`` (from ``ann_file`` or
    from the number of class folders) raise a ValueError naming them, where mmpretrain fails on
    an assertion, an unpacking error or not at all.
    """

    def __init__(self,
                 data_root: str = '',
                 split: str = '',
                 data_prefix: Union[str, dict] = '',
                 ann_file: str = '',
                 metainfo: Optional[dict] = None,
                 **kwargs) -> None:
        if split is None:  # mmpretrain reads None as ''
            split = ''
        if not isinstance(split, str) or split not in SPLITS:
            raise ValueError(f"{type(self).__name__}: split must be 'train', 'val', 'test' or '' "
                             f'(data_prefix and ann_file as given), got {split!r}')
        self.split = split
        super().__init__(data_root=data_root, split=split, data_prefix=data_prefix,
                         ann_file=ann_file, metainfo=metainfo, **kwargs)

    def load_data_list(self) -> List[dict]:
        # BaseDataset has joined data_root to the prefix and the annotation file
        prefix, ann_file = self.data_prefix.get('img_path', ''), self.ann_file
        self.check_data(dict(data_root=self.data_root, split=self.split,
                             data_prefix=osp.abspath(prefix) if prefix else '',
                             ann_file=osp.abspath(ann_file) if ann_file else ''))
        if not self.with_label:  # split 'test': image names only
            return super().load_data_list()
        if not ann_file:
            self._check_class_folders()
            return super().load_data_list()
        backend = get_file_backend(self.img_prefix, enable_singleton=True)
        return [{'img_path': backend.join_path(self.img_prefix, filename), 'gt_label': label}
                for filename, label in self._annotations()]

    def _annotations(self) -> List[Tuple[str, int]]:
        """The (image path, label) of each ``ann_file`` line, split as mmpretrain splits it
        (at the last space), refusing a malformed line or a label outside the classes."""
        name, count = type(self).__name__, len(self.CLASSES)
        samples = []
        for number, line in enumerate(list_from_file(self.ann_file), 1):
            where = f'{name}: ann_file {self.ann_file!r} line {number}'
            filename, _, label = line.strip().rpartition(' ')
            if not filename or not re.fullmatch(r'[-+]?[0-9]+', label):  # what int() reads
                raise ValueError(f"{where}: {line!r} is not '<image path> <label>' with an "
                                 'integer label')
            if not 0 <= int(label) < count:
                raise ValueError(f'{where}: label {int(label)} is outside the {count} classes '
                                 f'of metainfo; allowed: 0 to {count - 1}')
            samples.append((filename, int(label)))
        return samples

    def _check_class_folders(self) -> None:
        """Labels taken from the class folders (their indices, sorted) must be the classes'."""
        folders, _ = find_folders(self.img_prefix)
        if len(folders) != len(self.CLASSES):
            raise ValueError(
                f'{type(self).__name__}: {self.img_prefix!r} has {len(folders)} class folders '
                f'but metainfo.classes has {len(self.CLASSES)} names (the labels are the '
                "folders' indices in sorted order); allowed: one class folder per name, "
                'metainfo=dict(classes=...) with one name per folder, or an ann_file')

    @staticmethod
    def problem(data_root: str = '', split: str = '', data_prefix: object = '',
                ann_file: str = '') -> Optional[str]:
        """What is missing for these ImageNet arguments (None when nothing is)."""
        prefix = data_prefix.get('img_path', '') if isinstance(data_prefix, Mapping) \
            else data_prefix
        folder = prefix or split
        if data_root and not osp.isdir(data_root):
            return f'data_root {_quoted(data_root)} does not exist'
        folder = osp.join(data_root, folder) if data_root and folder else folder
        if folder and not osp.isdir(folder):
            return f'{folder!r} (split {split!r}) does not exist'
        if ann_file:
            path = osp.join(data_root, ann_file) if data_root else ann_file
            return None if osp.isfile(path) else f'ann_file {path!r} does not exist'
        if split not in ('', 'test') and folder \
                and not osp.isfile(osp.join(data_root, 'meta', f'{split}.txt')) \
                and not any(entry.is_dir() for entry in os.scandir(folder)):  # test: no labels
            return (f'{osp.join(data_root, "meta", f"{split}.txt")!r} does not exist and '
                    f'{folder!r} has no class folders to take the labels from')
        return None

    @classmethod
    def check_data(cls, cfg: Mapping) -> None:
        """Raise FileNotFoundError if the files of dataset config ``cfg`` are missing."""
        problem = cls.problem(cfg.get('data_root', ''), cfg.get('split', ''),
                              cfg.get('data_prefix', ''), cfg.get('ann_file', ''))
        if problem is None:
            return
        root = cfg.get('data_root', '') or '<data_root>'
        option = '{}_dataloader.dataset.data_root=DIR'
        raise FileNotFoundError(
            f'{cls.__name__}: {problem}.\n'
            f"Expected mmpretrain's ImageNet layout:\n{IMAGENET_LAYOUT.format(root=root)}\n"
            'Download ILSVRC2012 (https://image-net.org/download.php), arrange it so '
            "(mmpretrain's docs: user_guides/dataset_prepare) and link it here "
            f'(ln -s DIR {root}), or point data_root to it:\n'
            f'    tools/train.py CONFIG --cfg-options {option.format("train")} '
            f'{option.format("val")}\n'
            f'    tools/test.py CONFIG CHECKPOINT --cfg-options {option.format("test")}')
