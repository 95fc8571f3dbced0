"""Speech Commands (Warden 2018) in its on-disk format, for the keyword-spotting experiments of
arXiv:2104.07916 (§4.3, tables "Speech Commands" and "Speech Commands, no activation functions").

Layout of the v0.02 archive (``speech_commands_v0.02.tar.gz``, extracted)::

    data_root/
        backward/0165e0e8_nohash_0.wav ...   one folder per word, 16 kHz mono 16-bit WAVs
        ...
        _background_noise_/*.wav             long noise recordings (for augmentation)
        validation_list.txt                  relative paths (word/file.wav), one per line
        testing_list.txt

The training split is every word file in neither list. ``tools/dataset_converters/
make_speech_commands.py`` writes a small set in the same layout from synthesised speech.
"""
import math
import numbers
import os
import os.path as osp
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
from mmpretrain.datasets import BaseDataset

from mmpoly.registry import DATASETS
from .audio_transforms import check_wav_header
from .local import check_flags

#: The 35 words of Speech Commands v0.02, in alphabetical order (the class order).
SPEECH_COMMANDS_WORDS = (
    'backward', 'bed', 'bird', 'cat', 'dog', 'down', 'eight', 'five', 'follow', 'forward', 'four',
    'go', 'happy', 'house', 'learn', 'left', 'marvin', 'nine', 'no', 'off', 'on', 'one', 'right',
    'seven', 'sheila', 'six', 'stop', 'three', 'tree', 'two', 'up', 'visual', 'wow', 'yes', 'zero')
UNKNOWN = '_unknown_'
SILENCE = '_silence_'
BACKGROUND_NOISE_DIR = '_background_noise_'
SPLIT_LISTS = {'val': 'validation_list.txt', 'test': 'testing_list.txt'}
#: The largest ``silence_ratio``: as many silent clips as word clips.
MAX_SILENCE_RATIO = 1
HOW_TO_GET = ('Download http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz and '
              'extract it into data_root, or write a small synthetic set in the same layout with '
              'python tools/dataset_converters/make_speech_commands.py DATA_ROOT.')


def _read_list(path: str, root: str) -> List[str]:
    """The relative paths of a split list; each must be ``word/file.wav`` and exist."""
    entries = []
    with open(path, encoding='utf-8') as f:
        for lineno, line in enumerate(f, 1):
            entry = line.strip()
            if not entry:
                continue
            parts = entry.split('/')
            if osp.isabs(entry) or len(parts) != 2 or not parts[1].endswith('.wav') \
                    or '..' in parts:
                raise ValueError(f'{path}:{lineno}: entry {entry!r} is not a relative path '
                                 '"word/file.wav"')
            if not osp.isfile(osp.join(root, entry)):
                raise FileNotFoundError(f'{path}:{lineno}: {entry!r} lists a file that does not '
                                        f'exist under {root}')
            entries.append(entry)
    return entries


@DATASETS.register_module()
class SpeechCommands(BaseDataset):
    """Speech Commands keyword spotting: one sample per 1-s clip, read by split.

    Classes are ``words`` (default: the 35 words of v0.02, the paper's setting), then
    ``_unknown_`` if ``unknown`` (files of word folders not in ``words``), then ``_silence_`` if
    ``silence_ratio > 0`` (that many silent clips per word clip, ``audio_path=None``; the group's
    pipeline uses 0.1 and 37 outputs: 35 words + unknown + silence).

    Args:
        data_root: the extracted archive (see the module docstring).
        split: 'train' (every word file in neither list), 'val' (validation_list.txt) or
            'test' (testing_list.txt).
        words: the word classes; every one must be a folder of ``data_root``.
        unknown: add the ``_unknown_`` class for the other word folders (else they are skipped).
        silence_ratio: silent clips added per word clip, a number from 0 (no ``_silence_``
            class) to 1 (as many silent clips as word clips); a ratio so small that a split
            gets no silent clip is refused.
        verify_audio: check every WAV header (mono 16-bit PCM at ``sample_rate``, not truncated)
            while loading the list, instead of when the clip is first read.
        sample_rate: the expected sample rate.
        pipeline / test_mode / lazy_init / indices: as mmpretrain's BaseDataset.

    Each data item: ``audio_path`` (str, or None for silence), ``gt_label`` (int), ``word`` and
    ``background_noise_dir`` (``data_root/_background_noise_``, None if absent), which
    :class:`AudioBackgroundNoise` reads.
    """

    def __init__(self,
                 data_root: str,
                 split: str = 'train',
                 words: Sequence[str] = SPEECH_COMMANDS_WORDS,
                 unknown: bool = False,
                 silence_ratio: float = 0.0,
                 verify_audio: bool = False,
                 sample_rate: int = 16000,
                 pipeline: Sequence = (),
                 test_mode: bool = False,
                 indices: Optional[int] = None,
                 lazy_init: bool = False) -> None:
        if split not in ('train', 'val', 'test'):
            raise ValueError(f"SpeechCommands: split must be 'train', 'val' or 'test', got "
                             f'{split!r}')
        if isinstance(words, str) or not isinstance(words, Sequence):
            raise ValueError(f'SpeechCommands: words must be a list of folder names, e.g. '
                             f"['yes', 'no'], got {words!r}")
        words = list(words)
        if not words or len(set(words)) != len(words):
            raise ValueError(f'SpeechCommands: words must be a non-empty list of distinct '
                             f'folder names, got {words!r}')
        for word in words:
            if not isinstance(word, str) or not word:
                raise ValueError(f'SpeechCommands: words must be folder names (non-empty str), '
                                 f'got {word!r} in {words!r}')
            if word in (UNKNOWN, SILENCE, BACKGROUND_NOISE_DIR) or '/' in word:
                raise ValueError(f'SpeechCommands: words may not contain {word!r}')
        if isinstance(silence_ratio, bool) or not isinstance(silence_ratio, numbers.Real) \
                or not math.isfinite(silence_ratio) \
                or not 0 <= silence_ratio <= MAX_SILENCE_RATIO:
            raise ValueError(f'SpeechCommands: silence_ratio must be a number from 0 to '
                             f'{MAX_SILENCE_RATIO} (silent clips per word clip; 0: no _silence_ '
                             f'class, 0.1 in the configs), got {silence_ratio!r}')
        check_flags('SpeechCommands', unknown=unknown, verify_audio=verify_audio,
                    test_mode=test_mode, lazy_init=lazy_init)
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
            raise ValueError(f'SpeechCommands: sample_rate must be a positive int (Hz), got '
                             f'{sample_rate!r}')
        self.split = split
        self.words = words
        self.unknown = bool(unknown)
        self.silence_ratio = float(silence_ratio)
        self.verify_audio = bool(verify_audio)
        self.sample_rate = sample_rate
        classes = words + ([UNKNOWN] if unknown else []) + ([SILENCE] if silence_ratio else [])
        super().__init__(ann_file='', metainfo=dict(classes=tuple(classes)),
                         data_root=data_root, pipeline=pipeline, test_mode=bool(test_mode),
                         indices=indices, lazy_init=bool(lazy_init))

    @property
    def background_noise_files(self) -> List[str]:
        """The ``*.wav`` files of ``data_root/_background_noise_`` (sorted; may be empty)."""
        folder = osp.join(self.data_root, BACKGROUND_NOISE_DIR)
        if not osp.isdir(folder):
            return []
        return sorted(osp.join(folder, f) for f in os.listdir(folder) if f.endswith('.wav'))

    @classmethod
    def _check_root(cls, root: str, words: Sequence[str]) -> None:
        """Raise a FileNotFoundError naming what is missing: ``root``, its split lists or the
        folder of one of ``words``."""
        if not osp.isdir(root):
            raise FileNotFoundError(f'SpeechCommands: data_root {root!r} does not exist. '
                                    f'{HOW_TO_GET}')
        missing = [name for name in SPLIT_LISTS.values() if not osp.isfile(osp.join(root, name))]
        if missing:
            raise FileNotFoundError(f'SpeechCommands: data_root {root!r} lacks '
                                    f'{", ".join(missing)} (the split lists of the archive). '
                                    f'{HOW_TO_GET}')
        absent = [w for w in words if not osp.isdir(osp.join(root, w))]
        if absent:
            raise FileNotFoundError(f'SpeechCommands: data_root {root!r} has no folder for the '
                                    f'words {absent}; its word folders: {cls._word_folders(root)}')

    @classmethod
    def check_data(cls, cfg: Mapping) -> None:
        """Raise the FileNotFoundError that loading dataset config ``cfg`` would raise for a
        missing ``data_root``, split list or word folder, without building the dataset
        (``tools/train.py`` and ``tools/test.py`` call it before the Runner is built). Values the
        constructor would refuse are left to it."""
        root, words = cfg.get('data_root'), cfg.get('words', SPEECH_COMMANDS_WORDS)
        if not isinstance(root, str) or isinstance(words, str) \
                or not isinstance(words, Sequence) \
                or not all(isinstance(word, str) for word in words):
            return
        cls._check_root(root, words)

    @staticmethod
    def _word_folders(root: str) -> List[str]:
        return sorted(d for d in os.listdir(root)
                      if osp.isdir(osp.join(root, d)) and not d.startswith('_'))

    def _split_entries(self) -> List[str]:
        root = self.data_root
        if self.split != 'train':
            return _read_list(osp.join(root, SPLIT_LISTS[self.split]), root)
        held_out = set()
        for name in SPLIT_LISTS.values():
            held_out.update(_read_list(osp.join(root, name), root))
        entries = []
        for folder in self._word_folders(root):
            for name in sorted(os.listdir(osp.join(root, folder))):
                entry = f'{folder}/{name}'
                if name.endswith('.wav') and entry not in held_out:
                    entries.append(entry)
        return entries

    def load_data_list(self) -> List[dict]:
        self._check_root(self.data_root, self.words)
        class_index: Dict[str, int] = {c: i for i, c in enumerate(self.metainfo['classes'])}
        noise_dir = osp.join(self.data_root, BACKGROUND_NOISE_DIR)
        noise_dir = noise_dir if osp.isdir(noise_dir) else None
        data_list = []
        for entry in self._split_entries():
            word = entry.split('/')[0]
            if word in class_index and word not in (UNKNOWN, SILENCE):
                label = class_index[word]
            elif self.unknown:
                label = class_index[UNKNOWN]
            else:
                continue
            path = osp.join(self.data_root, entry)
            if self.verify_audio:
                check_wav_header(path, self.sample_rate)
            data_list.append(dict(audio_path=path, gt_label=label, word=word,
                                  background_noise_dir=noise_dir))
        num_silence = int(round(self.silence_ratio * len(data_list)))
        if self.silence_ratio and data_list and not num_silence:
            raise ValueError(
                f'SpeechCommands: silence_ratio={self.silence_ratio} of the {len(data_list)} word '
                f'clips of split {self.split!r} gives no silent clip (it rounds to 0), yet adds '
                f'the {SILENCE} class; use silence_ratio >= {1 / len(data_list):.3g} (at least '
                'one silent clip) or 0 (no silence class)')
        data_list += [dict(audio_path=None, gt_label=class_index[SILENCE], word=SILENCE,
                           background_noise_dir=noise_dir) for _ in range(num_silence)]
        return data_list

    def class_counts(self) -> np.ndarray:
        """Samples per class, shape (num_classes, )."""
        return np.bincount(self.get_gt_labels(), minlength=len(self.metainfo['classes']))

    def extra_repr(self) -> List[str]:
        return [f'Split: \t{self.split}', f'Data root: \t{self.data_root}',
                f'Unknown class: \t{self.unknown}', f'Silence ratio: \t{self.silence_ratio}']
