"""Write a small Speech Commands set offline, in the v0.02 on-disk layout, from synthesised speech.

Every "speaker" is one text-to-speech voice setting (espeak-ng accent and variant, speed and
pitch; or a flite voice with a duration stretch and pitch); each speaker says every word once.
Clips are 16 kHz mono 16-bit WAVs of at most 1 s, named ``<speaker>_nohash_0.wav`` in one folder
per word, as in the real archive. Speakers are split between train / validation / test (as the
real set splits by speaker), listed in ``validation_list.txt`` and ``testing_list.txt``;
``_background_noise_/`` gets synthetic noises (white, pink, brown, a band-passed "tap" and a
babble of overlapping speech). The set is built in a temporary folder next to ``OUT_DIR``
(``.<name>.<pid>.mmpoly-tmp``) and renamed to ``OUT_DIR`` when it is complete: a stopped run
leaves no partial set under ``OUT_DIR``::

    python tools/dataset_converters/make_speech_commands.py data/speech_commands_synth \\
        --words yes no up down --speakers 20

Needs Debian's ``espeak-ng`` (and ``flite`` for the flite voices): ``apt-get install espeak-ng
flite`` (tools/setup_env.sh installs both).
"""
import argparse
import hashlib
import os
import os.path as osp
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Sequence

import numpy as np
from scipy.io import wavfile
from scipy.signal import butter, resample_poly, sosfilt

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SAMPLE_RATE = 16000
ESPEAK_VOICES = ['en-us', 'en-gb', 'en-gb-scotland', 'en-gb-x-rp', 'en-gb-x-gbclan',
                 'en-gb-x-gbcwmd', 'en-029']
ESPEAK_VARIANTS = ['m1', 'm2', 'm3', 'm4', 'm5', 'm7', 'f1', 'f2', 'f3', 'f4', 'klatt', 'croak']
FLITE_VOICES = ['slt', 'rms', 'awb', 'kal16', 'kal']
#: Suffix of the temporary folder the set is built in (as mmpoly.fileio's temporary files).
TEMP_SUFFIX = '.mmpoly-tmp'
PROG = 'tools/dataset_converters/make_speech_commands.py'
NOISES = ['white_noise', 'pink_noise', 'brown_noise', 'running_tap', 'babble']
BABBLE_TEXT = [
    'the quick brown fox jumps over the lazy dog near the river bank',
    'please call stella and ask her to bring these things with her from the store',
    'six spoons of fresh snow peas five thick slabs of blue cheese and maybe a snack',
    'we also need a small plastic snake and a big toy frog for the kids',
]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('out_dir', help='where the set is written (created; must be empty)')
    parser.add_argument('--words', nargs='+', default=None,
                        help='the words (default: the 35 words of Speech Commands v0.02)')
    parser.add_argument('--speakers', type=int, default=20,
                        help='voice settings, each saying every word once (default 20)')
    parser.add_argument('--val-speakers', type=int, default=2,
                        help='speakers whose clips go to validation_list.txt (default 2)')
    parser.add_argument('--test-speakers', type=int, default=2,
                        help='speakers whose clips go to testing_list.txt (default 2)')
    parser.add_argument('--engines', nargs='+', default=['espeak-ng', 'flite'],
                        choices=['espeak-ng', 'flite'], help='speech synthesisers to use')
    parser.add_argument('--noise-seconds', type=float, default=10.0,
                        help='length of each background noise file (default 10 s)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--jobs', type=int, default=os.cpu_count() or 1)
    return parser.parse_args(argv)


def speaker_settings(count: int, engines: Sequence[str], seed: int) -> List[Dict]:
    """``count`` distinct voice settings, alternating between the available engines."""
    rng = np.random.default_rng(seed)
    settings, seen = [], set()
    while len(settings) < count:
        engine = engines[len(settings) % len(engines)]
        if engine == 'espeak-ng':
            voice = f'{rng.choice(ESPEAK_VOICES)}+{rng.choice(ESPEAK_VARIANTS)}'
            setting = dict(engine=engine, voice=voice, speed=int(rng.integers(120, 221)),
                           pitch=int(rng.integers(20, 81)))
        else:
            setting = dict(engine=engine, voice=str(rng.choice(FLITE_VOICES)),
                           stretch=round(float(rng.uniform(0.8, 1.3)), 2),
                           f0=int(rng.integers(90, 200)))
        key = tuple(sorted(setting.items()))
        if key in seen:
            continue
        seen.add(key)
        # the archive names speakers by an 8-hex-digit hash
        setting['id'] = hashlib.sha1(repr(key).encode()).hexdigest()[:8]
        settings.append(setting)
    return settings


def synthesise(text: str, setting: Dict, workdir: str) -> np.ndarray:
    """Speak ``text`` with one voice setting; float64 samples at 16 kHz."""
    path = osp.join(workdir, f'{setting["id"]}_{abs(hash(text))}.wav')
    if setting['engine'] == 'espeak-ng':
        cmd = ['espeak-ng', '-v', setting['voice'], '-s', str(setting['speed']), '-p',
               str(setting['pitch']), '-w', path, text]
    else:
        cmd = ['flite', '-voice', setting['voice'], '--setf',
               f'duration_stretch={setting["stretch"]}', '--setf',
               f'int_f0_target_mean={setting["f0"]}', '-t', text, '-o', path]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not osp.isfile(path):
        raise RuntimeError(f'{" ".join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}')
    rate, data = wavfile.read(path)
    os.remove(path)
    audio = data.astype(np.float64) / 32768.0
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    if rate != SAMPLE_RATE:
        g = np.gcd(rate, SAMPLE_RATE)
        audio = resample_poly(audio, SAMPLE_RATE // g, rate // g)
    return audio


def fit_clip(audio: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Trim leading/trailing silence, keep at most 1 s, place it at a random offset in 1 s."""
    level = np.abs(audio)
    voiced = np.flatnonzero(level > 0.02 * max(level.max(), 1e-9))
    if len(voiced):
        audio = audio[voiced[0]:voiced[-1] + 1]
    audio = audio[:SAMPLE_RATE]
    peak = np.abs(audio).max() if len(audio) else 0.0
    if peak > 0:
        audio = audio * (rng.uniform(0.3, 0.9) / peak)
    clip = np.zeros(SAMPLE_RATE)
    start = int(rng.integers(0, SAMPLE_RATE - len(audio) + 1))
    clip[start:start + len(audio)] = audio
    return clip


def write_wav(path: str, audio: np.ndarray) -> None:
    """Write float samples in [-1, 1] as a 16 kHz mono 16-bit PCM WAV."""
    data = np.clip(np.round(audio * 32767.0), -32768, 32767).astype(np.int16)
    wavfile.write(path, SAMPLE_RATE, data)


def make_noise(kind: str, seconds: float, rng: np.random.Generator, workdir: str,
               setting: Dict) -> np.ndarray:
    """One background recording of ``seconds``, peak-normalised to 0.5."""
    n = int(round(seconds * SAMPLE_RATE))
    white = rng.standard_normal(n)
    if kind == 'white_noise':
        noise = white
    elif kind == 'pink_noise':  # 1/f power: scale the spectrum by 1/sqrt(f)
        spectrum = np.fft.rfft(white)
        spectrum[1:] /= np.sqrt(np.arange(1, len(spectrum)))
        spectrum[0] = 0
        noise = np.fft.irfft(spectrum, n)
    elif kind == 'brown_noise':  # 1/f² power: integrated white noise, drift removed
        noise = np.cumsum(white)
        width = min(801, n)  # a 50 ms moving average (or the whole clip, if shorter)
        noise -= np.convolve(noise, np.ones(width) / width, mode='same')
    elif kind == 'running_tap':  # band-passed noise with a slow amplitude flutter
        noise = sosfilt(butter(4, [800, 4000], btype='bandpass', fs=SAMPLE_RATE, output='sos'),
                        white)
        noise *= 1 + 0.3 * np.sin(2 * np.pi * 3.0 * np.arange(n) / SAMPLE_RATE)
    elif kind == 'babble':  # overlapping sentences, looped to the length
        noise = np.zeros(n)
        for k, text in enumerate(BABBLE_TEXT):
            voice = dict(setting, pitch=30 + 12 * k, id=f'babble{k}')
            speech = synthesise(text, voice, workdir)
            reps = int(np.ceil(n / len(speech)))
            noise += np.roll(np.tile(speech, reps)[:n], int(rng.integers(n)))
    else:
        raise ValueError(f'unknown noise kind {kind!r}; allowed: {NOISES}')
    return noise * (0.5 / max(np.abs(noise).max(), 1e-9))


def make_speech_commands(out_dir: str, words: Sequence[str], speakers: int = 20,
                         val_speakers: int = 2, test_speakers: int = 2,
                         engines: Sequence[str] = ('espeak-ng', 'flite'),
                         noise_seconds: float = 10.0, seed: int = 0,
                         jobs: int = 1) -> Dict[str, List[str]]:
    """Write the set (complete or not at all, see the module docstring); return the relative
    clip paths of each split ('train', 'val', 'test')."""
    words = list(words)
    if len(set(words)) != len(words) or any(w.startswith('_') or '/' in w for w in words):
        raise ValueError(f'--words must be distinct folder names not starting with "_", got '
                         f'{words}')
    if val_speakers < 0 or test_speakers < 0 or speakers - val_speakers - test_speakers < 1:
        raise ValueError(f'--speakers {speakers} must exceed --val-speakers {val_speakers} + '
                         f'--test-speakers {test_speakers} (at least one training speaker)')
    if not isinstance(noise_seconds, (int, float)) or not np.isfinite(noise_seconds) \
            or round(noise_seconds * SAMPLE_RATE) < 1:
        raise ValueError(f'--noise-seconds must be a number of seconds > 0 (at least one '
                         f'sample, 1/{SAMPLE_RATE} s), got {noise_seconds!r}')
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f'--jobs must be a positive int, got {jobs!r}')
    for engine in engines:
        if shutil.which(engine) is None:
            raise FileNotFoundError(f'{engine} is not installed (Debian: apt-get install '
                                    f'{engine}; or choose --engines)')
    if osp.lexists(out_dir) and not osp.isdir(out_dir):
        raise FileExistsError(f'{out_dir} is a file, not a folder; choose a new folder')
    if osp.isdir(out_dir) and os.listdir(out_dir):
        raise FileExistsError(f'{out_dir} exists and is not empty; choose a new folder')
    from mmpoly.utils.startup import folder_problem
    problem = folder_problem(osp.dirname(osp.abspath(out_dir)), 'the folder of OUT_DIR')
    if problem:  # the set is written next to OUT_DIR, then renamed: found out before any work
        raise PermissionError(f'{problem}; choose another OUT_DIR')
    rng = np.random.default_rng(seed)
    settings = speaker_settings(speakers, engines, seed)
    # speakers to splits: a fixed shuffle, so each split has exactly the requested speakers
    order = rng.permutation(speakers)
    split_of = {}
    for rank, index in enumerate(order):
        split_of[settings[index]['id']] = ('val' if rank < val_speakers else
                                           'test' if rank < val_speakers + test_speakers
                                           else 'train')
    final_dir = osp.abspath(out_dir)
    os.makedirs(osp.dirname(final_dir), exist_ok=True)
    out_dir = osp.join(osp.dirname(final_dir),
                       f'.{osp.basename(final_dir)}.{os.getpid()}{TEMP_SUFFIX}')
    os.mkdir(out_dir)  # a new folder's usual mode, as OUT_DIR would get
    try:
        splits = _write_set(out_dir, words, settings, split_of, engines, noise_seconds, rng,
                            jobs)
        os.replace(out_dir, final_dir)  # onto a missing or empty folder (checked above)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    return splits


def _write_set(out_dir: str, words: Sequence[str], settings: List[Dict],
               split_of: Dict[str, str], engines: Sequence[str], noise_seconds: float,
               rng: np.random.Generator, jobs: int) -> Dict[str, List[str]]:
    """Write the clips, the noises and the split lists to the (new, empty) ``out_dir``."""
    for word in words:
        os.makedirs(osp.join(out_dir, word))
    os.makedirs(osp.join(out_dir, '_background_noise_'))
    jobs_list = [(word, setting, int(rng.integers(2**31))) for word in words
                 for setting in settings]
    splits: Dict[str, List[str]] = {'train': [], 'val': [], 'test': []}
    with tempfile.TemporaryDirectory() as workdir:

        def one(job):
            word, setting, clip_seed = job
            clip = fit_clip(synthesise(word, setting, workdir), np.random.default_rng(clip_seed))
            entry = f'{word}/{setting["id"]}_nohash_0.wav'
            write_wav(osp.join(out_dir, entry), clip)
            return entry, split_of[setting['id']]

        with ThreadPoolExecutor(jobs) as pool:
            for entry, split in pool.map(one, jobs_list):
                splits[split].append(entry)
        espeak = dict(engine='espeak-ng', voice='en-us', speed=170, pitch=50) \
            if 'espeak-ng' in engines else dict(settings[0])
        for kind in NOISES:
            if kind == 'babble' and espeak['engine'] != 'espeak-ng':
                continue
            noise = make_noise(kind, noise_seconds, rng, workdir, espeak)
            write_wav(osp.join(out_dir, '_background_noise_', f'{kind}.wav'), noise)
    for split, name in (('val', 'validation_list.txt'), ('test', 'testing_list.txt')):
        with open(osp.join(out_dir, name), 'w') as f:
            f.write(''.join(f'{entry}\n' for entry in sorted(splits[split])))
    return {k: sorted(v) for k, v in splits.items()}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, List[str]]:
    args = parse_args(argv)
    if REPO not in sys.path:  # mmpoly from this checkout, installed or not
        sys.path.insert(0, REPO)
    if args.words is None:
        from mmpoly.datasets.speech_commands import SPEECH_COMMANDS_WORDS
        args.words = list(SPEECH_COMMANDS_WORDS)
    from mmpoly.utils.startup import StartupError, startup_errors
    with startup_errors(PROG):  # a mistake in the arguments: one line, exit status 1
        try:
            splits = make_speech_commands(args.out_dir, args.words, args.speakers,
                                          args.val_speakers, args.test_speakers, args.engines,
                                          args.noise_seconds, args.seed, args.jobs)
        except (ValueError, FileExistsError, FileNotFoundError, PermissionError) as error:
            raise StartupError(str(error)) from error
    print(f'wrote {len(args.words)} words × {args.speakers} speakers to {args.out_dir}: '
          f'{len(splits["train"])} train, {len(splits["val"])} validation, '
          f'{len(splits["test"])} test clips, {len(NOISES)} background noises')
    return splits


if __name__ == '__main__':
    main()
