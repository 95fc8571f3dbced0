"""Dataset and audio-transform options that were silently ignored or silently changed: each is
now refused with a ValueError that names the field, the value and what is allowed, while the
valid settings (the shipped configs') give exactly what they gave before.

* ``LogMelSpectrogram`` after an STFT of another n_fft / hop_length, or on audio of another
  sample rate (also ``AudioBackgroundNoise``); so many mel bands that some filter is empty.
* ``SpeechCommands(silence_ratio=nan / inf / True / 1.5 / a ratio that rounds to no clip)``,
  non-bool flags.
* ``LongTailedDataset`` whose classes cannot give the requested imbalance (Fashion-MNIST's test
  split, 1000 images per class, with IF 10 and ``max_images_per_class=10000`` stayed balanced).
* ``LocalCIFAR10(verify_checksums='no')`` (counted as true), ``download=True`` (ignored),
  ``split='val'`` (an AssertionError), and the other flags of the local datasets.
"""
import math
import re
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
from helpers import CONFIGS, FASHION_MNIST
from mmcv.transforms import Compose
from mmengine.config import Config
from mmpretrain.registry import DATASETS, TRANSFORMS
from test_data_regimes import LabelsOnly
from test_datasets import make_cifar10, make_speech_commands

from mmpoly.datasets import (SPEECH_COMMANDS_WORDS, LocalCIFAR10, LocalCIFAR100,
                             LocalFashionMNIST, LongTailedDataset, SpeechCommands,
                             long_tailed_counts)
from mmpoly.datasets.audio_transforms import (AudioBackgroundNoise, AudioToSTFT,
                                              LoadAudioFromFile, LogMelSpectrogram,
                                              _apply_filters, mel_filterbank, power_to_db)

SPEECH_BASE = CONFIGS / '_base_' / 'datasets' / 'speech-commands_bs128.py'
SR = 16000


def refused(exc: pytest.ExceptionInfo, *parts: str) -> str:
    """The message of a refusal, after checking that it holds every one of ``parts``."""
    message = str(exc.value)
    for part in parts:
        assert part in message, (part, message)
    return message


@pytest.fixture(scope='module')
def speech_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Speech Commands' layout, one 1-s clip per word and split (tests/test_datasets.py)."""
    root = tmp_path_factory.mktemp('speech') / 'speech_commands'
    make_speech_commands(root)
    return root


def clip(seed: int = 0) -> np.ndarray:
    return (0.1 * np.random.default_rng(seed).standard_normal(SR)).astype(np.float32)


# --------------------------------------------------------------------------- LogMelSpectrogram


@pytest.mark.parametrize('n_fft, hop_length, mine, theirs', [
    (1024, 256, 'n_fft=1024, hop_length=256', 'n_fft=2048, hop_length=512'),
    (1024, 512, 'n_fft=1024', 'n_fft=2048'),
    (2048, 256, 'hop_length=256', 'hop_length=512'),
])
def test_log_mel_refuses_an_stft_of_another_n_fft_or_hop(n_fft: int, hop_length: int,
                                                         mine: str, theirs: str) -> None:
    results = AudioToSTFT(n_fft=2048, hop_length=512).transform(dict(audio=clip()))
    with pytest.raises(ValueError) as exc:
        LogMelSpectrogram(n_fft=n_fft, hop_length=hop_length).transform(results)
    refused(exc, f'LogMelSpectrogram({mine}) does not match the STFT',
            f'AudioToSTFT made with {theirs}', 'LogMelSpectrogram(n_fft=2048, hop_length=512)')


def test_log_mel_refuses_an_stft_of_another_size() -> None:
    """An STFT without AudioToSTFT's stft_params: its frequency bins must fit n_fft."""
    spec = AudioToSTFT(n_fft=1024).transform(dict(audio=clip()))['stft']
    with pytest.raises(ValueError) as exc:
        LogMelSpectrogram().transform(dict(stft=spec))
    refused(exc, "results['stft'] has shape (513, 32)", 'n_fft=2048', '(1025, frames)')


@pytest.mark.parametrize('through_stft', [False, True])
def test_log_mel_refuses_audio_of_another_sample_rate(through_stft: bool) -> None:
    results = LoadAudioFromFile(sample_rate=8000).transform(dict(audio_path=None))
    if through_stft:
        results = AudioToSTFT().transform(results)
    with pytest.raises(ValueError) as exc:
        LogMelSpectrogram().transform(dict(results))
    refused(exc, 'LogMelSpectrogram.sample_rate=16000', 'at 8000 Hz',
            "results['sample_rate']", 'LogMelSpectrogram(sample_rate=8000)')
    # the same rate on both sides is accepted: 8000 samples, hop 512 -> 16 frames
    assert LogMelSpectrogram(sample_rate=8000).transform(dict(results))['img'].shape == (32, 16)


def test_background_noise_refuses_audio_of_another_sample_rate() -> None:
    results = LoadAudioFromFile(sample_rate=8000).transform(dict(audio_path=None))
    noise = AudioBackgroundNoise(prob=0.0)  # refused whether or not it would mix this time
    with pytest.raises(ValueError) as exc:
        noise.transform(results)
    refused(exc, 'AudioBackgroundNoise.sample_rate=16000', 'at 8000 Hz',
            'AudioBackgroundNoise(sample_rate=8000)')
    with pytest.raises(ValueError) as exc:
        AudioBackgroundNoise(noise_dir=5)
    refused(exc, 'AudioBackgroundNoise.noise_dir must be None', 'got 5')


def test_log_mel_refuses_empty_mel_filters() -> None:
    with pytest.raises(ValueError) as exc:
        LogMelSpectrogram(n_mels=2000, n_fft=64, hop_length=16)
    refused(exc, 'LogMelSpectrogram.n_mels=2000 is too many for n_fft=64',
            'sample_rate=16000', 'of the 2000 mel filters cover none', '33 FFT bins')


def _old_log_mel(results: dict, n_mels: int = 32, sample_rate: int = SR,
                 top_db: float = 80.0) -> np.ndarray:
    """LogMelSpectrogram's features as the transform computed them before the checks: the
    filters of the STFT's own n_fft."""
    spec = results['stft']
    filters = mel_filterbank(sample_rate, results['stft_params']['n_fft'], n_mels)
    mel = _apply_filters(filters.astype(np.float64), np.abs(spec).astype(np.float64)**2)
    return power_to_db(mel, top_db=top_db).astype(np.float32)


def test_the_shipped_speech_pipelines_give_the_same_features(speech_root: Path) -> None:
    """The speech config's pipelines pass the checks, and the log-mel step gives bit for bit
    the features of the formula it had before; the checks draw no random number (the seeded
    pipeline run whole is the same as step by step)."""
    cfg = Config.fromfile(str(SPEECH_BASE))
    train = DATASETS.build(dict(cfg.train_dataloader.dataset, data_root=str(speech_root)))
    assert train.metainfo['classes'][-2:] == ('_unknown_', '_silence_')
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        steps = [TRANSFORMS.build(t) for t in cfg[loader].dataset.pipeline]
        assert type(steps[-2]).__name__ == 'LogMelSpectrogram'
        for index in (0, 7, len(train) - 1):  # word clips and a silent clip
            info = train.get_data_info(index)
            np.random.seed(index)
            results = dict(info)
            for step in steps[:-2]:
                results = step(results)
            before = dict(results)
            features = steps[-2](results)['img']
            if 'stft' not in before:  # the test pipeline: the STFT of the fixed-length clip
                before = AudioToSTFT(2048, 512).transform(before)
            assert features.shape == (32, 32)
            np.testing.assert_array_equal(features, _old_log_mel(before))
            np.random.seed(index)
            np.testing.assert_array_equal(Compose(steps)(dict(info))['inputs'][0].numpy(),
                                          features)


# --------------------------------------------------------------------------- SpeechCommands


@pytest.mark.parametrize('bad', [math.nan, math.inf, -math.inf, True, False, -0.1, 1.5, '0.1',
                                 None, [0.1]])
def test_speech_commands_silence_ratio_must_be_a_finite_number_in_0_1(tmp_path: Path,
                                                                      bad: Any) -> None:
    with pytest.raises(ValueError) as exc:
        SpeechCommands(str(tmp_path), silence_ratio=bad, lazy_init=True)
    refused(exc, 'SpeechCommands: silence_ratio must be a number from 0 to 1', f'got {bad!r}')


def test_speech_commands_silence_ratio_that_rounds_to_no_clip(speech_root: Path) -> None:
    with pytest.raises(ValueError) as exc:  # 2 validation clips: 0.1 of them is 0.2 -> 0
        SpeechCommands(str(speech_root), split='val', words=['yes', 'no'], silence_ratio=0.1)
    refused(exc, 'silence_ratio=0.1 of the 2 word clips', "split 'val'", 'gives no silent clip',
            'silence_ratio >= 0.5')


@pytest.mark.parametrize('field, bad', [('unknown', 1), ('unknown', 'yes'), ('verify_audio', 0),
                                        ('test_mode', 'no'), ('lazy_init', 'no')])
def test_speech_commands_flags_must_be_bools(tmp_path: Path, field: str, bad: Any) -> None:
    kwargs: Dict[str, Any] = dict(lazy_init=True)
    kwargs[field] = bad
    with pytest.raises(ValueError) as exc:
        SpeechCommands(str(tmp_path), **kwargs)
    refused(exc, f'SpeechCommands: {field} must be True or False, got {bad!r}')


def test_speech_commands_words_must_be_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as exc:
        SpeechCommands(str(tmp_path), words=['yes', 3], lazy_init=True)
    refused(exc, 'SpeechCommands: words must be folder names (non-empty str), got 3')


def test_speech_commands_valid_silence_ratios_are_unchanged(speech_root: Path) -> None:
    """0.1 (the configs'), 1 (an int), a numpy float and 0: as many silent clips as before,
    round(ratio x word clips)."""
    root = str(speech_root)
    train = SpeechCommands(root, words=SPEECH_COMMANDS_WORDS, silence_ratio=0.1)
    assert len(train) == 35 + 4 and train.class_counts()[-1] == 4  # round(3.5) = 4
    everything = SpeechCommands(root, words=['yes'], unknown=True, silence_ratio=1)
    assert everything.class_counts().tolist() == [1, 34, 35]
    assert SpeechCommands(root, words=['yes'], silence_ratio=np.float64(1.0)).class_counts(
    ).tolist() == [1, 1]
    none = SpeechCommands(root, words=['yes', 'no'], silence_ratio=0, unknown=np.bool_(False))
    assert none.metainfo['classes'] == ('yes', 'no') and len(none) == 2


# --------------------------------------------------------------------------- LongTailedDataset


def test_long_tailed_refuses_a_balanced_result_on_fashion_mnist_test() -> None:
    """The audit's case: 1000 images per class cannot give IF 10 from a head of 10000."""
    fashion = dict(type='LocalFashionMNIST', data_root=str(FASHION_MNIST), split='test')
    with pytest.raises(ValueError) as exc:
        DATASETS.build(dict(type='LongTailedDataset', dataset=fashion, imbalance_factor=10,
                            max_images_per_class=10000))
    refused(exc, 'LongTailedDataset: imbalance_factor=10, max_images_per_class=10000 cannot be '
            'met by LocalFashionMNIST', 'asks 10000 7742 5994',
            "class 0 'T-shirt/top' has 1000 (target 10000)", 'keep 1000 to 1000 images per class',
            "an imbalance of 1 instead of the profile's 10 (10000/1000)",
            'What works: max_images_per_class <= 1000',
            'max_images_per_class=1000 keeps 1000 774 599 464 359 278 215 166 129 100')
    lt = DATASETS.build(dict(type='LongTailedDataset', dataset=fashion, imbalance_factor=10,
                             max_images_per_class=1000))
    assert lt.class_counts == [1000, 774, 599, 464, 359, 278, 215, 166, 129, 100]


@pytest.mark.parametrize('sizes, kwargs, parts', [
    # the default head (the largest class, 50) is more than class 0 has
    ([40] + [50] * 9, dict(), [
        'max_images_per_class=None (the largest class, 50 images)',
        "class 0 'airplane' has 40 (target 50)",
        'keep 40 to 5 images per class, an imbalance of 8 instead of',
        'max_images_per_class <= 40']),
    # the tail class is shorter than its target
    ([50] * 9 + [3], dict(), ["class 9 'truck' has 3 (target 5)", 'keep 50 to 3 images',
                              'an imbalance of 16.67', "instead of the profile's 10 (50/5)"]),
    # an empty class
    ([50] * 9 + [0], dict(), ["class 9 'truck' has 0 (target 5)", 'an imbalance of infinite',
                              "What works: a dataset in which every class has images (class 9 "
                              "'truck' has none)"]),
    # IF 1 asks the same count of every class
    ([50] * 5 + [30] * 5, dict(imbalance_factor=1), ['imbalance_factor=1,',
                                                     'keep 50 to 30 images',
                                                     'max_images_per_class <= 30']),
])
def test_long_tailed_refuses_classes_that_change_the_imbalance(sizes: List[int],
                                                               kwargs: Dict[str, Any],
                                                               parts: List[str]) -> None:
    labels = np.repeat(np.arange(10), sizes)
    with pytest.raises(ValueError) as exc:
        LongTailedDataset(dataset=LabelsOnly(labels), **dict(dict(imbalance_factor=10), **kwargs))
    refused(exc, 'LongTailedDataset: imbalance_factor=', *parts)


def test_long_tailed_valid_requests_are_unchanged() -> None:
    """Short classes between the head and the tail keep all they have (a warning), as before;
    a profile the classes can give is kept exactly: the counts and the seeded choice."""
    small = LabelsOnly(np.repeat(np.arange(10), [40, 5] + [40] * 8))
    lt = LongTailedDataset(dataset=small, imbalance_factor=10)
    assert lt.class_counts == [40, 5] + long_tailed_counts(40, 10, 10)[2:]
    assert (lt.indices.size, int(lt.indices.sum())) == (134, 14619)
    labels = np.repeat(np.arange(10), 100)
    np.random.default_rng(0).shuffle(labels)
    lt = LongTailedDataset(dataset=LabelsOnly(labels), imbalance_factor=10, seed=1)
    assert lt.class_counts == long_tailed_counts(100, 10, 10) == [100, 77, 59, 46, 35, 27,
                                                                  21, 16, 12, 10]
    assert (lt.indices.size, int(lt.indices.sum())) == (403, 201038)
    # a profile whose tail floors to 0 images would leave the tail out: refused, naming a fix
    # (tests/test_data_regimes.py::test_a_profile_that_empties_the_tail_is_refused)
    with pytest.raises(ValueError, match=r'floor\(100 / 200\) = 0 images.*Give '
                       r'max_images_per_class >= 200 or imbalance_factor <= 100$'):
        LongTailedDataset(dataset=LabelsOnly(labels), imbalance_factor=200)


def test_long_tailed_lazy_init_must_be_a_bool() -> None:
    with pytest.raises(ValueError) as exc:
        LongTailedDataset(dataset=LabelsOnly(np.arange(10)), lazy_init='no')
    refused(exc, "LongTailedDataset: lazy_init must be True or False, got 'no'")


# --------------------------------------------------------------------------- local datasets


@pytest.mark.parametrize('cls', [LocalCIFAR10, LocalCIFAR100])
@pytest.mark.parametrize('field, bad', [('verify_checksums', 'no'), ('verify_checksums', 'False'),
                                        ('verify_checksums', 0), ('verify_checksums', None),
                                        ('download', 'no'), ('test_mode', 1),
                                        ('lazy_init', 'yes')])
def test_local_cifar_flags_must_be_bools(tmp_path: Path, cls: type, field: str,
                                         bad: Any) -> None:
    kwargs: Dict[str, Any] = dict(lazy_init=True)
    kwargs[field] = bad
    with pytest.raises(ValueError) as exc:
        cls(data_root=str(tmp_path), **kwargs)
    refused(exc, f'{cls.__name__}: {field} must be True or False, got {bad!r}')


def test_local_cifar_refuses_download_and_unknown_splits(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as exc:
        LocalCIFAR10(data_root=str(tmp_path), download=True, lazy_init=True)
    refused(exc, 'LocalCIFAR10: download=True is not supported', 'never downloads',
            'cifar-10-python.tar.gz', 'leave download=False')
    for cls in (LocalCIFAR10, LocalFashionMNIST):
        with pytest.raises(ValueError) as exc:
            cls(data_root=str(tmp_path), split='val', lazy_init=True)
        refused(exc, f"{cls.__name__}: split must be 'train' or 'test', got 'val'")
    with pytest.raises(ValueError) as exc:
        LocalFashionMNIST(data_root=str(tmp_path), test_mode='no', lazy_init=True)
    refused(exc, "LocalFashionMNIST: test_mode must be True or False, got 'no'")


def test_local_cifar_valid_flags_read_the_same_data(tmp_path: Path) -> None:
    written = make_cifar10(tmp_path)
    for flag in (False, np.bool_(False)):
        ds = LocalCIFAR10(data_root=str(tmp_path), split='test', verify_checksums=flag,
                          download=False)
        assert not ds.verify_checksums
        assert [ds.get_data_info(i)['gt_label'] for i in range(len(ds))] == \
            written['test'][1].tolist()
    # verify_checksums=True still checks (these made-up files are not the official ones)
    with pytest.raises(ValueError, match=re.escape('does not match the md5')):
        LocalCIFAR10(data_root=str(tmp_path), split='test')
