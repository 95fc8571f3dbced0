"""Speech Commands: the on-disk dataset, the audio transforms and log-mel features, the
class-balanced sampler, the synthetic-set writer (espeak-ng / flite), the speech configs of
arXiv:2104.07916 (tables "Speech Commands" and "Speech Commands, no activation functions"), and
a short real training run through tools/train.py (slow)."""
import math
import os
import re
import shutil
import subprocess
import sys
import wave
from pathlib import Path
from types import ModuleType
from typing import Dict

import numpy as np
import pytest
import scipy.signal
import torch
from helpers import REPO, TOOLS, load_tool, runtime_tail
from mmengine.config import Config
from mmpretrain.registry import DATA_SAMPLERS, DATASETS, MODELS, TRANSFORMS
from scipy.io import wavfile

from mmpoly.datasets import SPEECH_COMMANDS_WORDS, ClassBalancedSampler, SpeechCommands
from mmpoly.datasets.audio_transforms import (hann_window, log_mel_spectrogram, mel_filterbank,
                                              phase_vocoder, power_to_db, read_wav, stft)

TOOL = TOOLS / 'dataset_converters' / 'make_speech_commands.py'
DATA_BASE = REPO / 'configs' / '_base_' / 'datasets' / 'speech-commands_bs128.py'
WORDS = ['yes', 'no', 'up', 'down', 'left', 'right']
SPEAKERS, VAL_SPEAKERS, TEST_SPEAKERS = 8, 2, 2
SR = 16000


def load_converter() -> ModuleType:
    return load_tool('dataset_converters/make_speech_commands')


def require_tts() -> None:
    missing = [tool for tool in ('espeak-ng', 'flite') if shutil.which(tool) is None]
    if missing:
        pytest.fail(f'{missing} not installed: tools/setup_env.sh installs them '
                    '(apt-get install espeak-ng flite)')


@pytest.fixture(scope='module')
def synth(tmp_path_factory: pytest.TempPathFactory) -> Dict:
    """A small set written by the tool: 6 words × 8 speakers (2 validation, 2 test)."""
    require_tts()
    root = tmp_path_factory.mktemp('speech') / 'speech_commands'
    splits = load_converter().make_speech_commands(
        str(root), WORDS, speakers=SPEAKERS, val_speakers=VAL_SPEAKERS,
        test_speakers=TEST_SPEAKERS, noise_seconds=2.0, seed=0, jobs=2)
    return dict(root=root, splits=splits)


def write_wav(path: Path, data: np.ndarray, rate: int = SR) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    wavfile.write(str(path), rate, data)
    return path


def tone(freq: float, seconds: float = 1.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(SR * seconds)) / SR
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


# --------------------------------------------------------------------------- dataset


def test_words_are_the_35_of_v002() -> None:
    assert len(SPEECH_COMMANDS_WORDS) == 35 == len(set(SPEECH_COMMANDS_WORDS))
    assert list(SPEECH_COMMANDS_WORDS) == sorted(SPEECH_COMMANDS_WORDS)
    assert {'marvin', 'sheila', 'visual', 'learn', 'follow', 'forward', 'backward'} <= set(
        SPEECH_COMMANDS_WORDS)


def test_tool_output_is_read_back_by_split(synth: Dict) -> None:
    root, splits = synth['root'], synth['splits']
    assert sorted(p.name for p in root.iterdir()) == sorted(
        WORDS + ['_background_noise_', 'testing_list.txt', 'validation_list.txt'])
    assert (root / 'validation_list.txt').read_text().split() == splits['val']
    assert (root / 'testing_list.txt').read_text().split() == splits['test']
    speakers = {k: {e.split('/')[1].split('_nohash_')[0] for e in v} for k, v in splits.items()}
    assert [len(speakers[k]) for k in ('train', 'val', 'test')] == [
        SPEAKERS - VAL_SPEAKERS - TEST_SPEAKERS, VAL_SPEAKERS, TEST_SPEAKERS]
    assert not (speakers['train'] & speakers['val'] or speakers['train'] & speakers['test']
                or speakers['val'] & speakers['test'])
    expected = {'train': SPEAKERS - VAL_SPEAKERS - TEST_SPEAKERS, 'val': VAL_SPEAKERS,
                'test': TEST_SPEAKERS}
    for split, per_word in expected.items():
        ds = SpeechCommands(str(root), split=split, words=WORDS, verify_audio=True)
        assert ds.metainfo['classes'] == tuple(WORDS)
        assert len(ds) == per_word * len(WORDS)
        np.testing.assert_array_equal(ds.class_counts(), [per_word] * len(WORDS))
        for i in range(len(ds)):
            info = ds.get_data_info(i)
            word = Path(info['audio_path']).parent.name
            assert info['word'] == word and info['gt_label'] == WORDS.index(word)
            rel = f'{word}/{Path(info["audio_path"]).name}'
            assert rel in splits[split]
    # every clip: 16 kHz mono 16-bit, at most 1 s, not silent
    for rel in splits['val']:
        with wave.open(str(root / rel)) as f:
            assert (f.getframerate(), f.getnchannels(), f.getsampwidth()) == (SR, 1, 2)
            assert f.getnframes() <= SR
        assert np.abs(read_wav(str(root / rel))).max() > 0.1
    noises = sorted(p.name for p in (root / '_background_noise_').iterdir())
    assert noises == sorted(f'{k}.wav' for k in load_converter().NOISES)
    assert len(read_wav(str(root / '_background_noise_' / 'pink_noise.wav'))) == 2 * SR


def test_tool_command_line_and_errors(synth: Dict, tmp_path: Path) -> None:
    out = tmp_path / 'cli'
    proc = subprocess.run(
        [sys.executable, str(TOOL), str(out), '--words', 'yes', 'stop', '--speakers', '3',
         '--val-speakers', '1', '--test-speakers', '1', '--engines', 'espeak-ng',
         '--noise-seconds', '1'], text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'wrote 2 words × 3 speakers' in proc.stdout and '2 train, 2 validation, 2 test' in \
        proc.stdout
    ds = SpeechCommands(str(out), split='train', words=['yes', 'stop'], verify_audio=True)
    assert ds.class_counts().tolist() == [1, 1]
    tool = load_converter()
    with pytest.raises(FileExistsError, match='exists and is not empty'):
        tool.make_speech_commands(str(synth['root']), ['yes'])
    with pytest.raises(ValueError, match='--speakers 3 must exceed --val-speakers 2'):
        tool.make_speech_commands(str(tmp_path / 'x'), ['yes'], speakers=3, val_speakers=2,
                                  test_speakers=1)


def test_the_tool_writes_the_set_complete_or_not_at_all(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The set is built in a temporary folder and renamed when complete: a run stopped by an
    error leaves the (empty) output folder as it was and no partial set or temporary folder."""
    require_tts()
    tool = load_converter()
    out = tmp_path / 'set'
    out.mkdir()  # an empty folder is accepted, as before
    mode = out.stat().st_mode
    written = []
    write_wav = tool.write_wav

    def failing_write_wav(path: str, audio: np.ndarray) -> None:
        if len(written) == 2:
            raise OSError(28, 'No space left on device')
        write_wav(path, audio)
        written.append(path)

    monkeypatch.setattr(tool, 'write_wav', failing_write_wav)
    options = dict(speakers=3, val_speakers=1, test_speakers=1, engines=['espeak-ng'],
                   noise_seconds=0.5)
    with pytest.raises(OSError, match='No space left'):
        tool.make_speech_commands(str(out), ['yes', 'no'], **options)
    assert len(written) == 2 and all(f'{os.sep}.set.' in path for path in written)
    assert [p.name for p in tmp_path.iterdir()] == ['set'] and list(out.iterdir()) == []
    monkeypatch.undo()
    splits = tool.make_speech_commands(str(out), ['yes', 'no'], **options)
    assert [p.name for p in tmp_path.iterdir()] == ['set']
    assert sorted(p.name for p in out.iterdir()) == [
        '_background_noise_', 'no', 'testing_list.txt', 'validation_list.txt', 'yes']
    assert (out / 'testing_list.txt').read_text().splitlines() == splits['test']
    assert oct(out.stat().st_mode) == oct(mode)  # the mode of a new folder


def test_the_35_words_default_and_unknown_silence_options(synth: Dict) -> None:
    root = str(synth['root'])
    with pytest.raises(FileNotFoundError, match=r"no folder for the words \['backward'"):
        SpeechCommands(root, split='val')  # the default 35 words: this set has only 6
    ds = SpeechCommands(root, split='val', words=['yes', 'no'], unknown=True, silence_ratio=0.25)
    assert ds.metainfo['classes'] == ('yes', 'no', '_unknown_', '_silence_')
    n_words = VAL_SPEAKERS * len(WORDS)
    # yes, no: 2 each; unknown: the other 4 words; silence: 25 % of the 12 clips
    np.testing.assert_array_equal(ds.class_counts(), [2, 2, 8, 3])
    silent = [ds.get_data_info(i) for i in range(len(ds)) if ds.get_data_info(i)['gt_label'] == 3]
    assert all(s['audio_path'] is None for s in silent) and len(ds) == n_words + 3
    assert ds.get_data_info(0)['background_noise_dir'] == os.path.join(root, '_background_noise_')
    ds = SpeechCommands(root, split='val', words=['yes', 'no'])
    np.testing.assert_array_equal(ds.class_counts(), [2, 2])  # other words skipped


def test_missing_root_and_missing_lists_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match='does not exist.*speech_commands_v0.02'):
        SpeechCommands(str(tmp_path / 'nowhere'), words=['yes'])
    write_wav(tmp_path / 'yes' / 'a_nohash_0.wav', np.zeros(SR, np.int16))
    with pytest.raises(FileNotFoundError, match='lacks validation_list.txt, testing_list.txt'):
        SpeechCommands(str(tmp_path), words=['yes'])
    (tmp_path / 'validation_list.txt').write_text('yes/a_nohash_0.wav\n')
    with pytest.raises(FileNotFoundError, match='lacks testing_list.txt'):
        SpeechCommands(str(tmp_path), words=['yes'])
    (tmp_path / 'testing_list.txt').write_text('yes/a_nohash_0.wav\nyes/gone_nohash_0.wav\n')
    with pytest.raises(FileNotFoundError, match=r"testing_list.txt:2: 'yes/gone_nohash_0.wav'"):
        SpeechCommands(str(tmp_path), split='test', words=['yes'])
    (tmp_path / 'testing_list.txt').write_text('/abs/yes.wav\n')
    with pytest.raises(ValueError, match=r"testing_list.txt:1: entry '/abs/yes.wav'"):
        SpeechCommands(str(tmp_path), split='test', words=['yes'])
    with pytest.raises(ValueError, match="split must be 'train', 'val' or 'test', got 'dev'"):
        SpeechCommands(str(tmp_path), split='dev', words=['yes'])


def _bad_wav_root(tmp_path: Path) -> Dict[str, Path]:
    """A root whose training clips are a good one, an 8 kHz one, a corrupt one, a truncated one
    and a stereo one."""
    files = {
        'good': write_wav(tmp_path / 'yes' / 'good_nohash_0.wav', np.zeros(SR, np.int16)),
        'rate': write_wav(tmp_path / 'yes' / 'rate_nohash_0.wav', np.zeros(8000, np.int16), 8000),
        'stereo': write_wav(tmp_path / 'yes' / 'stereo_nohash_0.wav', np.zeros((SR, 2), np.int16)),
    }
    files['corrupt'] = tmp_path / 'yes' / 'corrupt_nohash_0.wav'
    files['corrupt'].write_bytes(b'this is not a RIFF file at all' * 10)
    files['truncated'] = tmp_path / 'yes' / 'truncated_nohash_0.wav'
    files['truncated'].write_bytes(files['good'].read_bytes()[:1000])
    (tmp_path / 'validation_list.txt').write_text('')
    (tmp_path / 'testing_list.txt').write_text('')
    return files


@pytest.mark.parametrize('kind, message', [
    ('rate', r'sample rate 8000 Hz, expected 16000 Hz'),
    ('corrupt', r'is not a readable PCM WAV file'),
    ('truncated', r'is truncated: its header announces 16000 samples'),
    ('stereo', r'2 channels, expected 1 \(mono\)'),
])
def test_bad_wav_files_are_named(tmp_path: Path, kind: str, message: str) -> None:
    files = _bad_wav_root(tmp_path)
    load = TRANSFORMS.build(dict(type='LoadAudioFromFile'))
    with pytest.raises(ValueError, match=re.escape(str(files[kind])) + '.*' + message):
        load(dict(audio_path=str(files[kind])))
    # the dataset reports the first bad file while listing the split when asked to verify
    for name, path in files.items():
        if name not in ('good', kind):
            path.unlink()
    with pytest.raises(ValueError, match=re.escape(str(files[kind])) + '.*' + message):
        SpeechCommands(str(tmp_path), words=['yes'], verify_audio=True)
    assert len(SpeechCommands(str(tmp_path), words=['yes'])) == 2  # unverified: listed only
    assert load(dict(audio_path=str(files['good'])))['audio'].shape == (SR, )


# --------------------------------------------------------------------------- features


def _independent_log_mel(audio: np.ndarray, sr: int = SR, n_fft: int = 2048, hop: int = 512,
                         n_mels: int = 32, top_db: float = 80.0) -> np.ndarray:
    """Log-mel by other means: scipy's STFT, and Slaney's filters built one bin at a time."""
    window = scipy.signal.get_window('hann', n_fft)  # periodic ("fftbins")
    _, _, spec = scipy.signal.stft(audio.astype(np.float64), fs=sr, window=window,
                                   nperseg=n_fft, noverlap=n_fft - hop, boundary='zeros',
                                   padded=False, detrend=False)
    spec = spec * window.sum()  # scipy scales by 1 / sum(window)
    power = np.abs(spec)**2

    def hz_to_mel(f: float) -> float:
        return f / (200 / 3) if f < 1000 else 15 + 27 * math.log(f / 1000) / math.log(6.4)

    def mel_to_hz(m: float) -> float:
        return m * 200 / 3 if m < 15 else 1000 * math.exp((m - 15) * math.log(6.4) / 27)

    top = hz_to_mel(sr / 2)
    edges = [mel_to_hz(top * k / (n_mels + 1)) for k in range(n_mels + 2)]
    filters = np.zeros((n_mels, n_fft // 2 + 1))
    for m in range(n_mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        for b in range(n_fft // 2 + 1):
            f = b * sr / n_fft
            if lo < f <= mid:
                filters[m, b] = (f - lo) / (mid - lo)
            elif mid < f < hi:
                filters[m, b] = (hi - f) / (hi - mid)
        filters[m] *= 2 / (hi - lo)
    mel = filters @ power
    db = 10 * np.log10(np.maximum(mel, 1e-10)) - 10 * np.log10(max(mel.max(), 1e-10))
    return np.maximum(db, db.max() - top_db)


def test_stft_and_window_match_scipy() -> None:
    np.testing.assert_allclose(hann_window(2048), scipy.signal.get_window('hann', 2048),
                               atol=1e-12)
    audio = np.random.default_rng(0).standard_normal(SR).astype(np.float32)
    spec = stft(audio, 2048, 512)
    assert spec.shape == (1025, 32) and spec.dtype == np.complex64
    _, _, ref = scipy.signal.stft(audio.astype(np.float64), window='hann', nperseg=2048,
                                  noverlap=1536, boundary='zeros', padded=False, detrend=False)
    np.testing.assert_allclose(spec, ref * 1024.0, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize('signal', ['speech', 'noise', 'chirp'])
def test_log_mel_matches_an_independent_computation(synth: Dict, signal: str) -> None:
    if signal == 'speech':
        audio = read_wav(str(synth['root'] / synth['splits']['train'][0]))
    elif signal == 'noise':
        audio = np.random.default_rng(1).standard_normal(SR).astype(np.float32) * 0.1
    else:
        t = np.arange(SR) / SR
        audio = (0.3 * scipy.signal.chirp(t, 100, 1.0, 7000)).astype(np.float32)
    ours = log_mel_spectrogram(audio, SR, 2048, 512, 32)
    assert ours.shape == (32, 32) and ours.dtype == np.float32
    assert ours.max() == 0.0 and ours.min() >= -80.0
    np.testing.assert_allclose(ours, _independent_log_mel(audio), atol=2e-3)


def test_log_mel_physics() -> None:
    """A tone lands in the band whose centre is nearest; silence gives 0 dB (no NaN)."""
    filters = mel_filterbank(SR, 2048, 32)
    assert filters.shape == (32, 1025) and (filters >= 0).all()
    bins = np.linspace(0, SR / 2, 1025)
    centres = bins[filters.argmax(axis=1)]
    assert np.all(np.diff(centres) > 0)
    for freq in (300.0, 1000.0, 3000.0, 6000.0):
        feats = log_mel_spectrogram(tone(freq))
        band = int(np.argmax(feats[:, 16]))
        assert abs(band - int(np.argmin(np.abs(centres - freq)))) <= 1, (freq, band)
    silent = log_mel_spectrogram(np.zeros(SR, np.float32))
    np.testing.assert_array_equal(silent, np.zeros((32, 32), np.float32))
    np.testing.assert_allclose(power_to_db(np.array([1.0, 0.1, 1e-12])), [0, -10, -80])


def test_phase_vocoder_changes_duration_not_pitch() -> None:
    spec = stft(tone(1000.0), 2048, 512)
    np.testing.assert_allclose(np.abs(phase_vocoder(spec, 1.0, 512)), np.abs(spec), rtol=1e-5,
                               atol=1e-3)
    slow = phase_vocoder(spec, 0.8, 512)
    fast = phase_vocoder(spec, 1.25, 512)
    assert slow.shape == (1025, 40) and fast.shape == (1025, 26)
    for out in (slow, fast):
        peak_bins = np.abs(out[:, 2:-3]).argmax(axis=0)
        assert np.all(np.abs(peak_bins * SR / 2048 - 1000) < 10)


# --------------------------------------------------------------------------- transforms


def test_augmentations_do_what_they_say(synth: Dict) -> None:
    np.random.seed(0)
    clip = dict(audio=tone(500.0))
    amp = TRANSFORMS.build(dict(type='AudioAmplitude', scale_range=(0.7, 1.1), prob=1.0))
    gains = [amp(dict(clip))['audio'].max() / clip['audio'].max() for _ in range(50)]
    assert 0.7 <= min(gains) and max(gains) <= 1.1 and np.std(gains) > 0.05
    assert TRANSFORMS.build(dict(type='AudioAmplitude', prob=0.0))(dict(clip))['audio'] is \
        clip['audio']
    speed = TRANSFORMS.build(dict(type='AudioSpeedPitch', max_scale=0.2, prob=1.0))
    lengths = [len(speed(dict(clip))['audio']) for _ in range(50)]
    assert 0.8 * SR - 2 <= min(lengths) < SR < max(lengths) <= 1.2 * SR + 2
    fix = TRANSFORMS.build(dict(type='AudioFixLength', length=SR))
    assert fix(dict(audio=np.ones(20000, np.float32)))['audio'].shape == (SR, )
    padded = fix(dict(audio=np.ones(100, np.float32)))['audio']
    assert padded.shape == (SR, ) and padded[:100].all() and not padded[100:].any()

    to_stft = TRANSFORMS.build(dict(type='AudioToSTFT'))
    base = to_stft(dict(audio=tone(500.0) * np.linspace(0, 1, SR, dtype=np.float32)))
    shift = TRANSFORMS.build(dict(type='STFTTimeShift', max_shift=8, prob=1.0))
    for _ in range(10):
        out = shift(dict(base))['stft']
        assert out.shape == (1025, 32)
        energy = np.abs(out).sum(axis=0)
        k = int(np.argmax(np.abs(base['stft']).sum(axis=0))) - int(np.argmax(energy))
        assert -8 <= -k <= 8
    stretch = TRANSFORMS.build(dict(type='STFTTimeStretch', max_scale=0.2, prob=1.0))
    fixf = TRANSFORMS.build(dict(type='STFTFixFrames'))
    widths = {stretch(dict(base))['stft'].shape[1] for _ in range(20)}
    assert min(widths) < 32 < max(widths) and min(widths) >= 26 and max(widths) <= 40
    assert fixf(stretch(dict(base)))['stft'].shape == (1025, 32)

    noise = TRANSFORMS.build(dict(type='AudioBackgroundNoise', max_ratio=0.45, prob=1.0))
    noise_dir = str(synth['root'] / '_background_noise_')
    silent = dict(audio=np.zeros(SR, np.float32), background_noise_dir=noise_dir)
    mixed = noise(dict(silent))['audio']
    assert mixed.shape == (SR, ) and 0 < np.abs(mixed).max() <= 0.45 * 0.5 + 1e-6
    on_stft = noise(to_stft(dict(silent)))['stft']
    assert on_stft.shape == (1025, 32) and np.abs(on_stft).max() > 0
    with pytest.raises(KeyError, match="background_noise_dir"):
        noise(dict(audio=np.zeros(SR, np.float32)))
    with pytest.raises(FileNotFoundError, match='nowhere.*does not exist'):
        TRANSFORMS.build(dict(type='AudioBackgroundNoise', noise_dir='/nowhere'))
    with pytest.raises(ValueError, match=r'AudioAmplitude.prob must be a number in \[0, 1\]'):
        TRANSFORMS.build(dict(type='AudioAmplitude', prob=2))
    with pytest.raises(KeyError, match=r"STFTTimeShift needs results\['stft'\]"):
        shift(dict(audio=np.zeros(SR)))


def test_config_pipelines_give_1x32x32_features(synth: Dict) -> None:
    cfg = Config.fromfile(str(DATA_BASE))
    root = str(synth['root'])
    np.random.seed(0)
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        ds_cfg = dict(cfg[loader].dataset, data_root=root, words=WORDS)
        ds = DATASETS.build(ds_cfg)
        assert ds.metainfo['classes'] == tuple(WORDS) + ('_unknown_', '_silence_')
        for i in (0, len(ds) - 1):  # a word clip and a silent clip
            sample = ds[i]
            inputs = sample['inputs']
            assert tuple(inputs.shape) == (1, 32, 32) and inputs.dtype == torch.float32
            assert torch.isfinite(inputs).all() and inputs.max() <= 0 and inputs.min() >= -80
            assert int(sample['data_samples'].gt_label) == ds.get_data_info(i)['gt_label']
    # validation: no augmentation, exactly the log-mel of the clip
    val = DATASETS.build(dict(cfg.val_dataloader.dataset, data_root=root, words=WORDS))
    audio = read_wav(val.get_data_info(0)['audio_path'])
    expected = log_mel_spectrogram(np.pad(audio, (0, SR - len(audio))))
    np.testing.assert_allclose(val[0]['inputs'][0].numpy(), expected, atol=1e-5)
    assert cfg.train_dataloader.sampler.type == 'ClassBalancedSampler'
    assert [t['type'] for t in cfg.train_pipeline] == [
        'LoadAudioFromFile', 'AudioAmplitude', 'AudioSpeedPitch', 'AudioFixLength',
        'AudioToSTFT', 'STFTTimeStretch', 'STFTTimeShift', 'STFTFixFrames',
        'AudioBackgroundNoise', 'LogMelSpectrogram', 'PackInputs']


# --------------------------------------------------------------------------- sampler


def test_class_balanced_sampler(synth: Dict) -> None:
    ds = SpeechCommands(str(synth['root']), split='train', words=['yes'], unknown=True,
                        silence_ratio=0.1)
    counts = ds.class_counts()  # yes: 4, unknown: 20, silence: 2
    assert counts.tolist() == [4, 20, 2]
    sampler = DATA_SAMPLERS.build(dict(type='ClassBalancedSampler', dataset=ds, seed=0,
                                       num_samples=6000))
    assert isinstance(sampler, ClassBalancedSampler) and len(sampler) == 6000
    draws = list(sampler)
    labels = np.asarray(ds.get_gt_labels())[draws]
    share = np.bincount(labels, minlength=3) / len(labels)
    np.testing.assert_allclose(share, [1 / 3] * 3, atol=0.03)
    assert list(sampler) == draws  # same epoch, same draw
    sampler.set_epoch(1)
    assert list(sampler) != draws
    # two ranks split one draw of the epoch between them
    ranks = []
    for rank in (0, 1):
        s = ClassBalancedSampler(ds, num_samples=7, seed=3)
        s.rank, s.world_size = rank, 2
        s.total_size, s.num_samples = 8, 4
        ranks.append(list(s))
    single = ClassBalancedSampler(ds, num_samples=8, seed=3)
    assert sorted(ranks[0] + ranks[1]) == sorted(single) and len(ranks[0]) == 4
    with pytest.raises(ValueError, match='num_samples must be a positive int, got 0'):
        ClassBalancedSampler(ds, num_samples=0)


# --------------------------------------------------------------------------- configs

#: (config, the paper's parameter count in millions, the exact count of the paper's
#: configuration with 35 outputs where it is known)
SPEECH_CONFIGS = [
    ('resnet7_1xb128_speech-commands.py', 4.9, 4_914_915),
    ('se_resnet7_1xb128_speech-commands.py', 5.1, 5_090_195),
    ('pdc_resnet7_1xb128_speech-commands.py', 3.9, 3_858_279),
    ('resnet18_1xb128_speech-commands.py', 11.2, 11_185_635),
    ('se_resnet18_1xb128_speech-commands.py', 11.5, 11_536_195),
    ('pinet_resnet18_1xb128_speech-commands.py', 6.0, None),
    ('pdc_resnet18_1xb128_speech-commands.py', 8.0, None),
    ('noact_resnet18_1xb128_speech-commands.py', 11.2, 11_185_635),
    ('pinet-noact_resnet18_1xb128_speech-commands.py', 11.9, 11_889_643),
    ('pdc-noact_resnet18_1xb128_speech-commands.py', 5.4, 5_439_082),
]


def test_every_speech_config_is_listed() -> None:
    shipped = {p.name for p in (REPO / 'configs').glob('*_speech-commands.py')}
    assert shipped == {name for name, _, _ in SPEECH_CONFIGS}


@pytest.mark.parametrize('name, paper_m, exact35', SPEECH_CONFIGS,
                         ids=[c[0].split('_1xb')[0] for c in SPEECH_CONFIGS])
def test_speech_config_builds_runs_and_matches_the_paper(name: str, paper_m: float,
                                                         exact35) -> None:
    cfg = Config.fromfile(str(REPO / 'configs' / name))
    assert cfg.model.backbone.in_channels == 1 and cfg.model.head.num_classes == 37
    assert cfg.train_dataloader.dataset.type == 'SpeechCommands'
    assert cfg.optim_wrapper.optimizer.lr == 0.1 and cfg.train_cfg.max_epochs == 120
    model = MODELS.build(cfg.model)
    model.eval()
    with torch.no_grad():
        logits = model(torch.randn(2, 1, 32, 32), mode='tensor')
    assert logits.shape == (2, 37) and torch.isfinite(logits).all()
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert round(count / 1e6, 1) == paper_m, (name, count)
    if exact35 is not None:
        cfg.model.head.num_classes = 35
        model35 = MODELS.build(cfg.model)
        assert sum(p.numel() for p in model35.parameters() if p.requires_grad) == exact35
        assert count - exact35 == 2 * (cfg.model.head.in_channels + 1)


# --------------------------------------------------------------------------- real run

TRAIN_CONFIG = '''\
_base_ = [{data_base!r}]
default_scope = 'mmpretrain'
custom_imports = dict(imports=['mmpoly.models', 'mmpoly.datasets'], allow_failed_imports=False)
words = {words!r}
model = dict(
    type='ImageClassifier',
    backbone=dict(type='PDCResNetCIFAR', depth=None, stage_blocks=[1, 1, 1],
                  stage_channels=[16, 32, 64], strides=[1, 2, 2], in_channels=1,
                  hidden_channels=[8, 16, 32], block_cfg=dict(type='PDCBlock', degree=2),
                  out_indices=(2, ), zero_init_residual=False),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=len(words), in_channels=64,
              loss=dict(type='CrossEntropyLoss'), topk=(1, )))
data_preprocessor = dict(num_classes=len(words), mean=[-40.0], std=[20.0])
# no augmentation in this short run: with the paper's, 250 steps reach only ~25 %
train_dataloader = dict(batch_size=16, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root={root!r}, words=words, unknown=False,
                                     silence_ratio=0.0, pipeline={{{{_base_.test_pipeline}}}}))
val_dataloader = dict(batch_size=50, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root={root!r}, words=words, unknown=False,
                                   silence_ratio=0.0))
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(type='Adam', lr=3e-3))
param_scheduler = dict(type='CosineAnnealingLR', by_epoch=True, T_max={epochs})
train_cfg = dict(by_epoch=True, max_epochs={epochs}, val_interval={epochs})
val_cfg = dict()
test_cfg = dict()
''' + runtime_tail('{epochs}')


@pytest.mark.slow
def test_short_training_on_synthesised_speech(tmp_path: Path) -> None:
    """10 words × 20 speakers (16 train, 4 validation), the class-balanced sampler, 250 steps:
    the loss falls and the validation accuracy beats chance (10 %) by far (~30 s)."""
    require_tts()
    words = ['yes', 'no', 'up', 'down', 'left', 'right', 'on', 'off', 'stop', 'go']
    root = tmp_path / 'speech_commands'
    load_converter().make_speech_commands(str(root), words, speakers=20, val_speakers=4,
                                          test_speakers=0, noise_seconds=3.0, seed=1, jobs=2)
    epochs = 25
    config = tmp_path / 'tiny_pdc_speech.py'
    config.write_text(TRAIN_CONFIG.format(data_base=str(DATA_BASE), words=words, root=str(root),
                                          epochs=epochs))
    proc = subprocess.run(
        [sys.executable, str(REPO / 'tools' / 'train.py'), str(config), '--work-dir',
         str(tmp_path / 'work')], cwd=REPO, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, timeout=300,
        # one thread: a tiny model on 2 busy cores runs ~15x slower with two
        env={**os.environ, 'OMP_NUM_THREADS': '1'})
    log = proc.stdout
    assert proc.returncode == 0, log[-6000:]
    losses = [float(x) for x in re.findall(r'Epoch\(train\).*?\bloss: ([\d.]+)', log)]
    assert len(losses) >= 2 * epochs, log[-3000:]
    k = len(losses) // 4
    assert np.mean(losses[-k:]) < 0.5 * np.mean(losses[:k]), losses
    accuracy = re.findall(r'Epoch\(val\) \[\d+\]\[\d+/\d+\]\s+accuracy/top1: ([\d.]+)', log)
    assert accuracy, log[-3000:]
    assert float(accuracy[-1]) >= 40.0, (accuracy, losses)  # chance: 10 %
