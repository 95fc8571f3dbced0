"""Audio loading, augmentation and log-mel features for keyword spotting (Speech Commands).

The recipe of arXiv:2104.07916 §4.3 (speech recognition, tables "Speech Commands"): 1-s 16 kHz
clips, training augmentations each applied with probability 0.5 (amplitude ×U(0.7, 1.1),
speed/pitch change ±20 %, STFT time stretch ±20 % by phase vocoder, time shift ±8 frames,
background-noise mixing up to 45 %), then 32 mel bands of the power STFT (n_fft 2048, hop 512)
in dB relative to the clip's maximum: a 1×32×32 input.

Everything is numpy/scipy: the STFT uses a periodic Hann window with centred, zero-padded frames,
the mel filters are Slaney's (linear below 1 kHz, logarithmic above, area-normalised), and
``power_to_db`` clips at ``top_db`` below the maximum, the conventions of librosa ≥ 0.10.

A pipeline reads ``results['audio_path']`` (None: a silent clip) and leaves the features in
``results['img']`` (float32, n_mels × frames), which mmpretrain's ``PackInputs`` turns into a
1 × n_mels × frames tensor.
"""
import glob
import math
import numbers
import os.path as osp
import wave
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from mmcv.transforms import BaseTransform
from scipy.io import wavfile

from mmpoly.registry import TRANSFORMS
from .local import is_int

__all__ = [
    'read_wav', 'check_wav_header', 'hann_window', 'stft', 'mel_filterbank', 'power_to_db',
    'log_mel_spectrogram', 'phase_vocoder', 'LoadAudioFromFile', 'AudioAmplitude',
    'AudioSpeedPitch', 'AudioFixLength', 'AudioBackgroundNoise', 'AudioToSTFT', 'STFTTimeStretch',
    'STFTTimeShift', 'STFTFixFrames', 'LogMelSpectrogram'
]

# --------------------------------------------------------------------------- WAV files


def check_wav_header(path: str, sample_rate: int = 16000) -> Tuple[int, int]:
    """Check that ``path`` is a mono 16-bit PCM WAV at ``sample_rate``; return (frames, rate).

    Reads only the header. Raises FileNotFoundError (missing) or ValueError naming the file, the
    field, its value and what is allowed.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'audio file {path} does not exist')
    try:
        with wave.open(path, 'rb') as f:
            channels, width, rate, frames = (f.getnchannels(), f.getsampwidth(),
                                             f.getframerate(), f.getnframes())
    except (wave.Error, EOFError, OSError) as e:
        raise ValueError(f'{path} is not a readable PCM WAV file ({type(e).__name__}: {e}); '
                         'expected a mono 16-bit PCM WAV') from e
    if rate != sample_rate:
        raise ValueError(f'{path}: sample rate {rate} Hz, expected {sample_rate} Hz '
                         '(resample it, e.g. sox IN -r 16000 OUT)')
    if channels != 1:
        raise ValueError(f'{path}: {channels} channels, expected 1 (mono)')
    if width != 2:
        raise ValueError(f'{path}: {8 * width}-bit samples, expected 16-bit PCM')
    expected_bytes = frames * width
    data_bytes = osp.getsize(path) - 44  # the canonical header; extra chunks only add bytes
    if data_bytes < expected_bytes:
        raise ValueError(f'{path} is truncated: its header announces {frames} samples '
                         f'({expected_bytes} bytes) but the file holds at most {data_bytes}')
    return frames, rate


def read_wav(path: str, sample_rate: int = 16000) -> np.ndarray:
    """Read a mono 16-bit PCM WAV as float32 samples in [-1, 1), shape (T, ).

    Raises FileNotFoundError for a missing file and ValueError naming the file for a corrupt
    file, a wrong sample rate, several channels or another sample format.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'audio file {path} does not exist')
    check_wav_header(path, sample_rate)
    try:
        rate, data = wavfile.read(path)
    except (ValueError, EOFError, OSError) as e:
        raise ValueError(f'{path} is not a readable WAV file ({type(e).__name__}: {e})') from e
    if data.dtype != np.int16 or data.ndim != 1:  # the header check makes this unreachable
        raise ValueError(f'{path}: samples {data.dtype} of shape {data.shape}, expected mono '
                         'int16')
    return data.astype(np.float32) / 32768.0


# --------------------------------------------------------------------------- features


def hann_window(n: int) -> np.ndarray:
    """The periodic Hann window of length ``n`` (the STFT convention), float64 (n, )."""
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)


def stft(audio: np.ndarray, n_fft: int = 2048, hop_length: int = 512) -> np.ndarray:
    """Short-time Fourier transform with centred frames (zero padding of n_fft // 2 each side).

    Args:
        audio: (T, ) samples.
    Returns:
        complex64 (1 + n_fft // 2, 1 + T // hop_length).
    """
    audio = np.asarray(audio, dtype=np.float64)
    if audio.ndim != 1:
        raise ValueError(f'stft: audio must be 1-D (T, ), got shape {audio.shape}')
    padded = np.pad(audio, n_fft // 2, mode='constant')
    num_frames = 1 + (len(padded) - n_fft) // hop_length
    index = np.arange(n_fft)[None, :] + hop_length * np.arange(num_frames)[:, None]
    frames = padded[index] * hann_window(n_fft)[None, :]
    return np.fft.rfft(frames, axis=1).T.astype(np.complex64)


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear (200/3 Hz per mel) below 1 kHz, logarithmic above."""
    freq = np.asarray(freq, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(freq >= min_log_hz,
                    min_log_mel + np.log(np.maximum(freq, min_log_hz) / min_log_hz) / logstep,
                    freq / f_sp)


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)),
                    f_sp * mels)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0,
                   fmax: Optional[float] = None) -> np.ndarray:
    """Triangular Slaney mel filters, each normalised to unit area; (n_mels, 1 + n_fft // 2)."""
    fmax = sample_rate / 2.0 if fmax is None else fmax
    bins = np.linspace(0.0, sample_rate / 2.0, 1 + n_fft // 2)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lower) / (centre - lower)
    falling = (upper - bins[None, :]) / (upper - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return (weights * (2.0 / (upper - lower))).astype(np.float32)


def power_to_db(power: np.ndarray, amin: float = 1e-10,
                top_db: Optional[float] = 80.0) -> np.ndarray:
    """10·log10(power / max(power)), floored at ``amin`` and at ``top_db`` below the maximum.

    An all-zero input gives all zeros (its reference is ``amin`` too).
    """
    power = np.asarray(power, dtype=np.float64)
    ref = max(float(power.max()), amin) if power.size else amin
    db = 10.0 * np.log10(np.maximum(power, amin)) - 10.0 * np.log10(ref)
    if top_db is not None:
        db = np.maximum(db, db.max() - top_db)
    return db


def _apply_filters(filters: np.ndarray, power: np.ndarray) -> np.ndarray:
    """(M, F) filters × (F, N) power → (M, N), float64.

    einsum, not BLAS: a multi-threaded BLAS call on these tiny matrices can take 100× longer
    when the dataloader workers already use every core.
    """
    return np.einsum('mf,fn->mn', filters.astype(np.float64), power.astype(np.float64))


def log_mel_spectrogram(audio: np.ndarray, sample_rate: int = 16000, n_fft: int = 2048,
                        hop_length: int = 512, n_mels: int = 32,
                        top_db: Optional[float] = 80.0) -> np.ndarray:
    """Log-mel spectrogram of (T, ) samples: float32 (n_mels, 1 + T // hop_length), in dB."""
    power = np.abs(stft(audio, n_fft, hop_length)).astype(np.float64)**2
    mel = _apply_filters(mel_filterbank(sample_rate, n_fft, n_mels), power)
    return power_to_db(mel, top_db=top_db).astype(np.float32)


def phase_vocoder(spec: np.ndarray, rate: float, hop_length: int) -> np.ndarray:
    """Time-stretch an STFT by ``rate`` (> 1: faster, fewer frames) keeping the pitch.

    Args:
        spec: complex (F, N) STFT made with ``hop_length``.
    Returns:
        complex64 (F, ceil(N / rate)): magnitudes interpolated between neighbouring frames,
        phases accumulated from the frames' instantaneous frequencies.
    """
    num_bins, num_frames = spec.shape
    steps = np.arange(0, num_frames, rate, dtype=np.float64)
    padded = np.pad(spec, ((0, 0), (0, 2)), mode='constant')
    expected = np.linspace(0, np.pi * hop_length, num_bins)  # phase advance of each bin's centre
    out = np.zeros((num_bins, len(steps)), dtype=np.complex64)
    phase = np.angle(padded[:, 0])
    for t, step in enumerate(steps):
        left, right = padded[:, int(step)], padded[:, int(step) + 1]
        alpha = step - int(step)
        magnitude = (1.0 - alpha) * np.abs(left) + alpha * np.abs(right)
        out[:, t] = magnitude * np.exp(1j * phase)
        deviation = np.angle(right) - np.angle(left) - expected
        deviation -= 2.0 * np.pi * np.round(deviation / (2.0 * np.pi))
        phase = phase + expected + deviation
    return out


# --------------------------------------------------------------------------- transforms


def _is_number(value: Any) -> bool:
    """A finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) \
        and math.isfinite(value)


def _check(owner: str, name: str, value: Any, allowed: str, valid: bool) -> None:
    """Raise a ValueError naming ``owner.name``, ``value`` and what is ``allowed``."""
    if not valid:
        raise ValueError(f'{owner}.{name} must be {allowed}, got {value!r}')


def _check_positive_int(owner: str, name: str, value: Any) -> int:
    _check(owner, name, value, 'a positive int', is_int(value) and value > 0)
    return int(value)


def _check_hop_length(owner: str, hop_length: Any, n_fft: int) -> int:
    """A positive int of at most ``n_fft``: a longer hop skips the samples between frames."""
    _check_positive_int(owner, 'hop_length', hop_length)
    _check(owner, 'hop_length', hop_length, f'at most n_fft={n_fft} (a longer hop leaves '
           f'samples out between the frames, which no frame sees)', hop_length <= n_fft)
    return int(hop_length)


def _check_max_scale(owner: str, max_scale: Any) -> float:
    _check(owner, 'max_scale', max_scale, 'a number in [0, 1)',
           _is_number(max_scale) and 0.0 <= max_scale < 1.0)
    return float(max_scale)


def _check_prob(name: str, prob: float) -> float:
    _check(name, 'prob', prob, 'a number in [0, 1]', _is_number(prob) and 0.0 <= prob <= 1.0)
    return float(prob)


def _require(results: dict, key: str, transform: str, produced_by: str) -> None:
    if key not in results:
        raise KeyError(f'{transform} needs results[{key!r}] (made by {produced_by}); present '
                       f'keys: {sorted(results)}')


@TRANSFORMS.register_module()
class LoadAudioFromFile(BaseTransform):
    """Read ``results['audio_path']`` into ``results['audio']`` (float32 (T, ) in [-1, 1)).

    ``audio_path=None`` (the "silence" class) gives ``duration`` seconds of zeros. Adds
    ``sample_rate`` and ``ori_length``. A wrong sample rate or a corrupt file raises a ValueError
    naming the file.
    """

    def __init__(self, sample_rate: int = 16000, duration: float = 1.0) -> None:
        self.sample_rate = _check_positive_int('LoadAudioFromFile', 'sample_rate', sample_rate)
        _check('LoadAudioFromFile', 'duration', duration, 'a number > 0 (seconds)',
               _is_number(duration) and duration > 0)
        self.duration = duration

    def transform(self, results: dict) -> dict:
        _require(results, 'audio_path', 'LoadAudioFromFile', 'the dataset')
        path = results['audio_path']
        if path is None:
            audio = np.zeros(int(round(self.sample_rate * self.duration)), dtype=np.float32)
        else:
            audio = read_wav(path, self.sample_rate)
        results.update(audio=audio, sample_rate=self.sample_rate, ori_length=len(audio))
        return results

    def __repr__(self) -> str:
        return f'{type(self).__name__}(sample_rate={self.sample_rate}, duration={self.duration})'


@TRANSFORMS.register_module()
class AudioAmplitude(BaseTransform):
    """With probability ``prob``, multiply the samples by a gain drawn from U(*scale_range)."""

    def __init__(self, scale_range: Sequence[float] = (0.7, 1.1), prob: float = 0.5) -> None:
        if not isinstance(scale_range, Sequence) or len(scale_range) != 2 \
                or not all(_is_number(s) for s in scale_range) \
                or not 0 < scale_range[0] <= scale_range[1]:
            raise ValueError(f'AudioAmplitude.scale_range must be (low, high) with 0 < low <= '
                             f'high, got {scale_range!r}')
        self.scale_range = tuple(float(s) for s in scale_range)
        self.prob = _check_prob('AudioAmplitude', prob)

    def transform(self, results: dict) -> dict:
        _require(results, 'audio', 'AudioAmplitude', 'LoadAudioFromFile')
        if np.random.rand() < self.prob:
            results['audio'] = (results['audio'] * np.random.uniform(*self.scale_range)).astype(
                np.float32)
        return results


@TRANSFORMS.register_module()
class AudioSpeedPitch(BaseTransform):
    """With probability ``prob``, play the clip faster or slower by up to ``max_scale``.

    Resampling by linear interpolation changes duration and pitch together: a scale s drawn from
    U(-max_scale, max_scale) makes the clip (1 + s) times as long.
    """

    def __init__(self, max_scale: float = 0.2, prob: float = 0.5) -> None:
        self.max_scale = _check_max_scale('AudioSpeedPitch', max_scale)
        self.prob = _check_prob('AudioSpeedPitch', prob)

    def transform(self, results: dict) -> dict:
        _require(results, 'audio', 'AudioSpeedPitch', 'LoadAudioFromFile')
        if np.random.rand() < self.prob:
            audio = results['audio']
            step = 1.0 / (1.0 + np.random.uniform(-self.max_scale, self.max_scale))
            positions = np.arange(0, len(audio) - 1 + 1e-9, step) if len(audio) > 1 else \
                np.zeros(len(audio))
            results['audio'] = np.interp(positions, np.arange(len(audio)),
                                         audio).astype(np.float32)
        return results


@TRANSFORMS.register_module()
class AudioFixLength(BaseTransform):
    """Zero-pad at the end or truncate the clip to ``length`` samples (16000: 1 s at 16 kHz)."""

    def __init__(self, length: int = 16000) -> None:
        self.length = _check_positive_int('AudioFixLength', 'length', length)

    def transform(self, results: dict) -> dict:
        _require(results, 'audio', 'AudioFixLength', 'LoadAudioFromFile')
        audio = results['audio'][:self.length]
        if len(audio) < self.length:
            audio = np.pad(audio, (0, self.length - len(audio)))
        results['audio'] = audio.astype(np.float32)
        return results


def _to_stft_args(results: dict, transform: str) -> Tuple[int, int]:
    _require(results, 'stft_params', transform, 'AudioToSTFT')
    params = results['stft_params']
    return params['n_fft'], params['hop_length']


@TRANSFORMS.register_module()
class AudioToSTFT(BaseTransform):
    """``results['stft']``: the complex (1 + n_fft // 2, 1 + T // hop_length) STFT of the clip."""

    def __init__(self, n_fft: int = 2048, hop_length: int = 512) -> None:
        self.n_fft = _check_positive_int('AudioToSTFT', 'n_fft', n_fft)
        self.hop_length = _check_hop_length('AudioToSTFT', hop_length, self.n_fft)

    def transform(self, results: dict) -> dict:
        _require(results, 'audio', 'AudioToSTFT', 'LoadAudioFromFile')
        results['stft'] = stft(results['audio'], self.n_fft, self.hop_length)
        results['stft_params'] = dict(n_fft=self.n_fft, hop_length=self.hop_length,
                                      length=len(results['audio']))
        return results


@TRANSFORMS.register_module()
class AudioBackgroundNoise(BaseTransform):
    """With probability ``prob``, mix a random segment of a background-noise file into the clip.

    ``x ← (1 − p)·x + p·noise`` with p ~ U(0, max_ratio), the noise a random stretch of one of the
    ``*.wav`` files of the noise folder: ``noise_dir``, or when it is None the folder the dataset
    gives in ``results['background_noise_dir']`` (:class:`SpeechCommands` gives its
    ``_background_noise_``, so the pipeline follows ``data_root``). Applied to the STFT when the
    pipeline has made one (the noise gets the same STFT; the STFT is linear), otherwise to the
    waveform. ``sample_rate`` (that of the noise files) must be the clip's
    (``results['sample_rate']``): a mismatch is a ValueError naming both.
    """

    def __init__(self, noise_dir: Optional[str] = None, max_ratio: float = 0.45,
                 prob: float = 0.5, sample_rate: int = 16000) -> None:
        _check('AudioBackgroundNoise', 'max_ratio', max_ratio, 'a number in [0, 1]',
               _is_number(max_ratio) and 0.0 <= max_ratio <= 1.0)
        _check('AudioBackgroundNoise', 'noise_dir', noise_dir,
               "None (the dataset's results['background_noise_dir']) or a folder path (str)",
               noise_dir is None or isinstance(noise_dir, str))
        self.noise_dir = noise_dir
        self.max_ratio = float(max_ratio)
        self.prob = _check_prob('AudioBackgroundNoise', prob)
        self.sample_rate = _check_positive_int('AudioBackgroundNoise', 'sample_rate',
                                               sample_rate)
        self._noises: Dict[str, List[np.ndarray]] = {}  # per folder, read once per worker
        if noise_dir is not None:
            self._noise_files(noise_dir)

    @staticmethod
    def _noise_files(noise_dir: str) -> List[str]:
        if not osp.isdir(noise_dir):
            raise FileNotFoundError(f'AudioBackgroundNoise: noise folder {noise_dir!r} does '
                                    'not exist (Speech Commands keeps it as '
                                    '_background_noise_/)')
        files = sorted(glob.glob(osp.join(noise_dir, '*.wav')))
        if not files:
            raise FileNotFoundError(f'AudioBackgroundNoise: noise folder {noise_dir!r} holds no '
                                    '*.wav file')
        return files

    def _noise_segment(self, noise_dir: str, length: int) -> np.ndarray:
        if noise_dir not in self._noises:
            self._noises[noise_dir] = [
                read_wav(f, self.sample_rate) for f in self._noise_files(noise_dir)
            ]
        noises = self._noises[noise_dir]
        noise = noises[np.random.randint(len(noises))]
        if len(noise) <= length:
            return np.pad(noise, (0, length - len(noise)))
        start = np.random.randint(len(noise) - length + 1)
        return noise[start:start + length]

    def transform(self, results: dict) -> dict:
        rate = results.get('sample_rate')
        if rate is not None and rate != self.sample_rate:
            raise ValueError(
                f'AudioBackgroundNoise.sample_rate={self.sample_rate} does not match the audio, '
                f"which is at {rate} Hz (results['sample_rate'], set by LoadAudioFromFile): the "
                'noise would be mixed in at the wrong rate. Give AudioBackgroundNoise and '
                'LoadAudioFromFile the same sample_rate, e.g. '
                f'AudioBackgroundNoise(sample_rate={rate})')
        if np.random.rand() >= self.prob:
            return results
        noise_dir = self.noise_dir
        if noise_dir is None:
            _require(results, 'background_noise_dir', 'AudioBackgroundNoise (noise_dir=None)',
                     'the dataset, e.g. SpeechCommands')
            noise_dir = results['background_noise_dir']
        ratio = np.random.uniform(0.0, self.max_ratio)
        if 'stft' in results:
            n_fft, hop = _to_stft_args(results, 'AudioBackgroundNoise')
            frames = results['stft'].shape[1]
            noise = stft(self._noise_segment(noise_dir, (frames - 1) * hop), n_fft, hop)
            results['stft'] = ((1 - ratio) * results['stft'] + ratio * noise).astype(np.complex64)
        else:
            _require(results, 'audio', 'AudioBackgroundNoise', 'LoadAudioFromFile')
            audio = results['audio']
            results['audio'] = ((1 - ratio) * audio +
                                ratio * self._noise_segment(noise_dir, len(audio))).astype(
                                    np.float32)
        return results

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(noise_dir={self.noise_dir!r}, '
                f'max_ratio={self.max_ratio}, prob={self.prob})')


@TRANSFORMS.register_module()
class STFTTimeStretch(BaseTransform):
    """With probability ``prob``, stretch the STFT in time by 1 + s, s ~ U(±max_scale).

    Phase vocoder (pitch kept); follow with :class:`STFTFixFrames`.
    """

    def __init__(self, max_scale: float = 0.2, prob: float = 0.5) -> None:
        self.max_scale = _check_max_scale('STFTTimeStretch', max_scale)
        self.prob = _check_prob('STFTTimeStretch', prob)

    def transform(self, results: dict) -> dict:
        _require(results, 'stft', 'STFTTimeStretch', 'AudioToSTFT')
        if np.random.rand() < self.prob:
            _, hop = _to_stft_args(results, 'STFTTimeStretch')
            scale = np.random.uniform(-self.max_scale, self.max_scale)
            results['stft'] = phase_vocoder(results['stft'], 1.0 / (1.0 + scale), hop)
        return results


@TRANSFORMS.register_module()
class STFTTimeShift(BaseTransform):
    """With probability ``prob``, shift the STFT by k ~ U{−max_shift..max_shift} frames.

    Frames shifted in are zeros; the frame count is kept.
    """

    def __init__(self, max_shift: int = 8, prob: float = 0.5) -> None:
        _check('STFTTimeShift', 'max_shift', max_shift, 'an int >= 0',
               is_int(max_shift) and max_shift >= 0)
        self.max_shift = max_shift
        self.prob = _check_prob('STFTTimeShift', prob)

    def transform(self, results: dict) -> dict:
        _require(results, 'stft', 'STFTTimeShift', 'AudioToSTFT')
        if np.random.rand() < self.prob:
            spec = results['stft']
            shift = np.random.randint(-self.max_shift, self.max_shift + 1)
            shifted = np.zeros_like(spec)
            if shift > 0:
                shifted[:, shift:] = spec[:, :spec.shape[1] - shift]
            elif shift < 0:
                shifted[:, :spec.shape[1] + shift] = spec[:, -shift:]
            else:
                shifted = spec
            results['stft'] = shifted
        return results


@TRANSFORMS.register_module()
class STFTFixFrames(BaseTransform):
    """Zero-pad or truncate the STFT to ``num_frames`` (None: 1 + length // hop of the clip)."""

    def __init__(self, num_frames: Optional[int] = None) -> None:
        if num_frames is not None:
            num_frames = _check_positive_int('STFTFixFrames', 'num_frames', num_frames)
        self.num_frames = num_frames

    def transform(self, results: dict) -> dict:
        _require(results, 'stft', 'STFTFixFrames', 'AudioToSTFT')
        num = self.num_frames
        if num is None:
            _, hop = _to_stft_args(results, 'STFTFixFrames')
            num = 1 + results['stft_params']['length'] // hop
        spec = results['stft'][:, :num]
        if spec.shape[1] < num:
            spec = np.pad(spec, ((0, 0), (0, num - spec.shape[1])))
        results['stft'] = spec
        return results


@TRANSFORMS.register_module()
class LogMelSpectrogram(BaseTransform):
    """Log-mel features in ``results['img']``: float32 (n_mels, frames), dB below the maximum.

    Uses ``results['stft']`` when the pipeline made one (the augmented training path), else the
    STFT of ``results['audio']`` with ``n_fft`` / ``hop_length``. A 1-s 16 kHz clip with the
    defaults gives 32 × 32. Removes ``audio`` and ``stft`` from the results.

    ``sample_rate`` must be the rate :class:`LoadAudioFromFile` gives
    (``results['sample_rate']``), and ``n_fft`` / ``hop_length`` those of the pipeline's
    :class:`AudioToSTFT` when there is one: a mismatch is a ValueError naming both values (the
    mel filters would not fit the data). ``n_mels`` so large that some mel filter covers no FFT
    bin is refused too.
    """

    def __init__(self, n_mels: int = 32, sample_rate: int = 16000, n_fft: int = 2048,
                 hop_length: int = 512, top_db: Optional[float] = 80.0) -> None:
        owner = 'LogMelSpectrogram'
        self.n_mels = _check_positive_int(owner, 'n_mels', n_mels)
        self.sample_rate = _check_positive_int(owner, 'sample_rate', sample_rate)
        self.n_fft = _check_positive_int(owner, 'n_fft', n_fft)
        self.hop_length = _check_hop_length(owner, hop_length, self.n_fft)
        _check(owner, 'top_db', top_db, 'None or a number >= 0',
               top_db is None or _is_number(top_db) and top_db >= 0)
        self.top_db = top_db
        filters = mel_filterbank(self.sample_rate, self.n_fft, self.n_mels)
        empty = int((filters.max(axis=1) <= 0).sum())
        if empty:
            raise ValueError(
                f'{owner}.n_mels={self.n_mels} is too many for n_fft={self.n_fft} at '
                f'sample_rate={self.sample_rate}: {empty} of the {self.n_mels} mel filters cover '
                f'none of the 1 + n_fft // 2 = {1 + self.n_fft // 2} FFT bins and would give '
                'constant features; use fewer mel bands or a larger n_fft')
        self._filters = filters.astype(np.float64)

    def _check_data(self, results: dict) -> None:
        """Refuse results made with another sample rate, n_fft or hop_length than this
        transform's (its mel filters would not fit them)."""
        owner = type(self).__name__
        rate = results.get('sample_rate')
        if rate is not None and rate != self.sample_rate:
            raise ValueError(
                f'{owner}.sample_rate={self.sample_rate} does not match the audio, which is at '
                f"{rate} Hz (results['sample_rate'], set by LoadAudioFromFile): its mel filters "
                f'would be those of the wrong rate. Give LogMelSpectrogram and LoadAudioFromFile '
                f'the same sample_rate, e.g. {owner}(sample_rate={rate})')
        if 'stft' not in results:
            return
        params = results.get('stft_params')
        if params is not None:
            wrong = [(name, getattr(self, name), params[name]) for name in ('n_fft', 'hop_length')
                     if name in params and params[name] != getattr(self, name)]
            if wrong:
                mine = ', '.join(f'{name}={value}' for name, value, _ in wrong)
                theirs = ', '.join(f'{name}={value}' for name, _, value in wrong)
                raise ValueError(
                    f'{owner}({mine}) does not match the STFT in results, which AudioToSTFT made '
                    f'with {theirs}: give both transforms the same n_fft and hop_length, e.g. '
                    f"{owner}(n_fft={params.get('n_fft', self.n_fft)}, "
                    f"hop_length={params.get('hop_length', self.hop_length)})")
        bins = np.shape(results['stft'])[0] if np.ndim(results['stft']) == 2 else None
        if bins != 1 + self.n_fft // 2:
            raise ValueError(
                f"{owner}: results['stft'] has shape {np.shape(results['stft'])}, but "
                f'n_fft={self.n_fft} needs (1 + n_fft // 2, frames) = ({1 + self.n_fft // 2}, '
                'frames); make the STFT with AudioToSTFT(n_fft=...) of the same n_fft')

    def transform(self, results: dict) -> dict:
        self._check_data(results)
        if 'stft' in results:
            spec = results['stft']
        else:
            _require(results, 'audio', 'LogMelSpectrogram', 'LoadAudioFromFile')
            spec = stft(results['audio'], self.n_fft, self.hop_length)
        mel = _apply_filters(self._filters, np.abs(spec).astype(np.float64)**2)
        img = power_to_db(mel, top_db=self.top_db).astype(np.float32)
        for key in ('audio', 'stft', 'stft_params'):
            results.pop(key, None)
        results.update(img=img, img_shape=img.shape, ori_shape=img.shape)
        return results

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(n_mels={self.n_mels}, sample_rate={self.sample_rate}, '
                f'n_fft={self.n_fft}, hop_length={self.hop_length}, top_db={self.top_db})')
