"""Bad inputs of the dataset loaders, audio transforms, dataset converters, deployment and
analysis tools: each is refused with a message that names the field, the value and what is
allowed (not a raw error from deep inside numpy, torch or mmengine, nor silently accepted)."""
import json
import math
import os
from pathlib import Path
from typing import Any, Dict

import cv2
import numpy as np
import pytest
import torch
from helpers import CONFIGS, FASHION_MNIST, load_tool
from mmengine.config import Config

from mmpoly.analysis import analyse_config
from mmpoly.datasets import (ClassBalancedSampler, LocalCocoDataset, SpeechCommands,
                             write_fashion_coco)
from mmpoly.datasets.audio_transforms import (AudioAmplitude, AudioBackgroundNoise,
                                              AudioSpeedPitch, AudioToSTFT, LoadAudioFromFile,
                                              LogMelSpectrogram, STFTFixFrames, STFTTimeShift,
                                              STFTTimeStretch)
from mmpoly.deploy import (MIN_OPSET, export_onnx, input_shape_from_config, load_model,
                           opset_range)
from mmpoly.fileio.atomic import TEMP_SUFFIX
from mmpoly.utils.startup import StartupError

FASHION_CONFIG = CONFIGS / 'pdc_resnet8_1xb128-1400i_fashion-mnist.py'


# --------------------------------------------------------------------------- audio transforms


@pytest.mark.parametrize('cls, kwargs, message', [
    (LoadAudioFromFile, dict(duration=-1), 'LoadAudioFromFile.duration must be a number > 0'),
    (LoadAudioFromFile, dict(sample_rate=0), 'LoadAudioFromFile.sample_rate must be a positive'),
    (AudioToSTFT, dict(hop_length=0), 'AudioToSTFT.hop_length must be a positive int, got 0'),
    (AudioToSTFT, dict(n_fft=2048.0), 'AudioToSTFT.n_fft must be a positive int, got 2048.0'),
    (LogMelSpectrogram, dict(n_mels=0), 'LogMelSpectrogram.n_mels must be a positive int'),
    (LogMelSpectrogram, dict(hop_length=-1), 'LogMelSpectrogram.hop_length must be a positive'),
    (LogMelSpectrogram, dict(top_db=-5), 'LogMelSpectrogram.top_db must be None or a number'),
    (AudioToSTFT, dict(n_fft=256, hop_length=257),
     r'AudioToSTFT.hop_length must be at most n_fft=256 \(a longer hop leaves samples out '
     r'between the frames, which no frame sees\), got 257'),
    (LogMelSpectrogram, dict(hop_length=4096), 'LogMelSpectrogram.hop_length must be at most '
     'n_fft=2048'),
    (STFTFixFrames, dict(num_frames=-1), 'STFTFixFrames.num_frames must be a positive int'),
    (AudioAmplitude, dict(scale_range=0.5), r'AudioAmplitude.scale_range must be \(low, high\)'),
    (AudioAmplitude, dict(scale_range=('a', 'b')), 'AudioAmplitude.scale_range must be'),
    (AudioSpeedPitch, dict(max_scale='0.2'),
     r"AudioSpeedPitch.max_scale must be a number in \[0, 1\), got '0.2'"),
    (STFTTimeStretch, dict(max_scale=1.0), r'STFTTimeStretch.max_scale must be a number in'),
    (AudioBackgroundNoise, dict(max_ratio='0.4'),
     r"AudioBackgroundNoise.max_ratio must be a number in \[0, 1\], got '0.4'"),
    (STFTTimeShift, dict(max_shift=True), 'STFTTimeShift.max_shift must be an int >= 0'),
    (AudioAmplitude, dict(prob=math.nan), r'AudioAmplitude.prob must be a number in \[0, 1\]'),
])
def test_audio_transform_arguments_are_checked(cls: type, kwargs: Dict[str, Any],
                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


def test_audio_transform_defaults_still_work() -> None:
    results = LoadAudioFromFile().transform(dict(audio_path=None))
    results = LogMelSpectrogram().transform(AudioToSTFT().transform(results))
    assert results['img'].shape == (32, 32)


# --------------------------------------------------------------------------- datasets


@pytest.mark.parametrize('kwargs, message', [
    (dict(words='yes'), r"words must be a list of folder names, e\.g\. \['yes', 'no'\], got "
     r"'yes'"),
    (dict(sample_rate='16k'), r"sample_rate must be a positive int \(Hz\), got '16k'"),
    (dict(sample_rate=0), r'sample_rate must be a positive int \(Hz\), got 0'),
    (dict(verify_audio='yes'), "verify_audio must be True or False, got 'yes'"),
])
def test_speech_commands_arguments_are_checked(tmp_path: Path, kwargs: Dict[str, Any],
                                               message: str) -> None:
    with pytest.raises(ValueError, match='SpeechCommands: ' + message):
        SpeechCommands(str(tmp_path), lazy_init=True, **kwargs)


@pytest.mark.parametrize('text, message', [
    ('{"images": [', r'is not a COCO annotation file \(a JSON object\): Expecting value'),
    ('[1, 2]', r'is not a COCO annotation file \(a JSON object\)'),
    ('{}', r"lacks the COCO key\(s\) \['images', 'categories'\]; its keys: \[\]"),
    ('{"images": [], "annotations": []}', r"lacks the COCO key\(s\) \['categories'\]"),
])
def test_coco_annotation_file_that_is_not_coco_is_named(tmp_path: Path, text: str,
                                                        message: str) -> None:
    (tmp_path / 'annotations').mkdir()
    (tmp_path / 'val2017').mkdir()
    ann = tmp_path / 'annotations' / 'instances_val2017.json'
    ann.write_text(text)
    with pytest.raises(ValueError, match=f'ann_file {str(ann)!r} ' + message):
        LocalCocoDataset(data_root=str(tmp_path), ann_file='annotations/instances_val2017.json',
                         data_prefix=dict(img='val2017/'))


def test_coco_test_dev_style_file_without_annotations_is_read(tmp_path: Path) -> None:
    (tmp_path / 'val2017').mkdir()
    ann = tmp_path / 'image_info.json'
    ann.write_text(json.dumps(dict(
        images=[dict(id=1, file_name='a.jpg', height=8, width=8)],
        categories=[dict(id=1, name='person')])))
    dataset = LocalCocoDataset(data_root=str(tmp_path), ann_file='image_info.json',
                               data_prefix=dict(img='val2017/'), test_mode=True,
                               metainfo=dict(classes=('person', )))
    assert len(dataset) == 1


class _Labels:

    def __init__(self, labels: list) -> None:
        self.labels = labels

    def get_gt_labels(self) -> np.ndarray:
        return np.asarray(self.labels)

    def __len__(self) -> int:
        return len(self.labels)


@pytest.mark.parametrize('labels, kwargs, message', [
    ([0, 1, 1], dict(num_samples=True), 'num_samples must be a positive int, got True'),
    ([0, 1, 1], dict(seed='1'), "seed must be None or an int, got '1'"),
    ([0, -1, 1], dict(seed=0), r'sample 1 has the negative label -1; labels must be class '
     'indices >= 0'),
])
def test_class_balanced_sampler_arguments_are_checked(labels: list, kwargs: Dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(ValueError, match='ClassBalancedSampler: ' + message):
        ClassBalancedSampler(_Labels(labels), **kwargs)


def test_class_balanced_sampler_takes_a_numpy_seed() -> None:
    sampler = ClassBalancedSampler(_Labels([0, 1, 1]), seed=np.int64(3))
    assert len(list(sampler)) == 3 and sampler.seed == 3


@pytest.mark.parametrize('indices, message', [
    ([0, 99999], r'indices \[99999\] are outside the 10000 samples of this split; allowed: 0 '
     r'to 9999'),  # was IndexError: list index out of range
    (0, r'indices must be None .* got 0$'),  # was "need at least one array to concatenate"
    ('3', r"indices must be None .* got '3'$"),  # was a TypeError on list indices
    ([], r'indices must be None .* got \[\]$'),
])
def test_local_dataset_indices_are_checked(indices: Any, message: str) -> None:
    if not (FASHION_MNIST / 't10k-images-idx3-ubyte.gz').is_file():
        pytest.skip('tools/setup_env.sh installs Fashion-MNIST')
    from mmpoly.datasets import LocalFashionMNIST
    with pytest.raises(ValueError, match='^LocalFashionMNIST: ' + message):
        LocalFashionMNIST(data_root=str(FASHION_MNIST), split='test', indices=indices)
    assert len(LocalFashionMNIST(data_root=str(FASHION_MNIST), split='test',
                                 indices=[0, 9999])) == 2


# --------------------------------------------------------------------------- converters


@pytest.mark.parametrize('kwargs, message', [
    (dict(noise_seconds=0), r'--noise-seconds must be a number of seconds > 0 .*got 0'),
    (dict(noise_seconds=math.inf), r'--noise-seconds must be a number of seconds > 0'),
    (dict(jobs=0), '--jobs must be a positive int, got 0'),
])
def test_make_speech_commands_options_are_checked_first(tmp_path: Path, kwargs: Dict[str, Any],
                                                        message: str) -> None:
    tool = load_tool('dataset_converters/make_speech_commands')
    out = tmp_path / 'set'
    with pytest.raises(ValueError, match=message):
        tool.make_speech_commands(str(out), ['yes'], speakers=3, val_speakers=1,
                                  test_speakers=1, **kwargs)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_make_speech_commands_mistakes_are_one_line_before_any_clip(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An OUT_DIR that is a file, or under a folder that cannot be written, was found out only
    when the finished set was renamed (minutes of synthesis with the defaults); the option
    checks were tracebacks."""
    tool = load_tool('dataset_converters/make_speech_commands')
    prog = 'tools/dataset_converters/make_speech_commands.py: error: '
    (tmp_path / 'afile').write_text('x')
    small = ['--words', 'yes', '--speakers', '1', '--val-speakers', '0', '--test-speakers', '0',
             '--engines', 'flite']  # no clip is made: each case is refused before
    for argv, message in [
            ([str(tmp_path / 'afile'), *small], f'{tmp_path / "afile"} is a file, not a folder; '
             'choose a new folder'),
            (['/proc/x/set', *small], "the folder of OUT_DIR '/proc/x': the folder /proc is not "
             'writable ('),
            ([str(tmp_path / 'set'), '--words', 'yes', '--speakers', '2'], '--speakers 2 must '
             'exceed --val-speakers 2 + --test-speakers 2 (at least one training speaker)')]:
        with pytest.raises(SystemExit) as exit_info:
            tool.main(argv)
        assert exit_info.value.code == 1
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(prog + message), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['afile']


def test_every_noise_is_made_for_clips_shorter_than_the_brown_noise_window() -> None:
    """--noise-seconds 0.01 (160 samples) passed the check, then brown noise's 801-sample moving
    average broadcast (801,) against (160,)."""
    tool = load_tool('dataset_converters/make_speech_commands')
    for n in (1, 160, 801, 1600):
        for kind in ('white_noise', 'pink_noise', 'brown_noise', 'running_tap'):
            noise = tool.make_noise(kind, n / tool.SAMPLE_RATE, np.random.default_rng(0), '', {})
            assert noise.shape == (n, ) and np.isfinite(noise).all(), (kind, n)
            assert np.abs(noise).max() == pytest.approx(0.5) or not noise.any()


def test_fashion_mnist_to_imagenet_refuses_more_images_than_the_split(tmp_path: Path) -> None:
    if not (FASHION_MNIST / 't10k-images-idx3-ubyte.gz').is_file():
        pytest.skip('tools/setup_env.sh installs Fashion-MNIST')
    tool = load_tool('dataset_converters/fashion_mnist_to_imagenet')
    out = tmp_path / 'fashion_imagenet'
    with pytest.raises(ValueError, match="--val 20000 exceeds the 10000 images of Fashion-MNIST's "
                       'test split; allowed: 1 to 10000'):
        tool.write_fashion_imagenet(str(out), dict(val=20000), str(FASHION_MNIST))
    assert list(tmp_path.iterdir()) == []  # nothing left, not even the temporary folder
    with pytest.raises(ValueError, match='--train must be a positive number of images, got True'):
        tool.write_fashion_imagenet(str(out), dict(train=True), str(FASHION_MNIST))


def test_fashion_mnist_to_imagenet_mistakes_are_one_line(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    """Each was a traceback (numpy's "expected non-negative integer" for --seed -1, naming no
    option; a FileNotFoundError for an OUT_DIR under /proc, after reading the data)."""
    tool = load_tool('dataset_converters/fashion_mnist_to_imagenet')
    prog = 'tools/dataset_converters/fashion_mnist_to_imagenet.py: error: '
    (tmp_path / 'taken').mkdir()
    out = str(tmp_path / 'out')
    for argv, message in [
            ([str(tmp_path / 'taken')], f'{tmp_path / "taken"} exists; remove it or choose '
             'another output folder'),
            ([out, '--train', '0'], '--train must be a positive number of images, got 0'),
            ([out, '--seed', '-1'], '--seed must be a whole number >= 0, got -1'),
            ([out, '--fashion-mnist-root', str(tmp_path / 'none')],
             f"LocalFashionMNIST: data_root '{tmp_path / 'none'}/' does not exist"),
            (['/proc/x/fi'], "OUT_DIR '/proc/x/fi': the folder /proc is not writable (")]:
        with pytest.raises(SystemExit) as exit_info:
            tool.main(argv)
        assert exit_info.value.code == 1
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(prog + message), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['taken']  # nothing else written


@pytest.mark.parametrize('options, message', [
    (['--configs', 'missing_coco.py'], '--configs: missing_coco.py is not a file'),
    (['--configs', str(FASHION_CONFIG)],
     f'--configs: {FASHION_CONFIG} is not a COCO config (*_coco.py)'),
    (['--train', '0'], '--train must be a positive number of images, got 0'),
    (['--val', '-2'], '--val must be a positive number of images, got -2'),
])
def test_make_fashion_coco_checks_its_options_before_writing(
        tmp_path: Path, options: list, message: str, capsys: pytest.CaptureFixture) -> None:
    """A usage error (status 2) in the command line's terms, and nothing written."""
    tool = load_tool('dataset_converters/make_fashion_coco')
    out = tmp_path / 'set'
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(out), '--train', '1', '--val', '1', *options])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f': error: {message}' in err and 'Traceback' not in err
    assert not out.exists()


# --------------------------------------------------------------------------- deployment


def test_input_shape_of_audio_pipeline_uses_the_transform_defaults() -> None:
    def shape(fix_length: dict, log_mel: dict) -> tuple:
        pipeline = [dict(type='LoadAudioFromFile'), dict(type='AudioFixLength', **fix_length),
                    dict(type='LogMelSpectrogram', **log_mel)]
        return input_shape_from_config(Config(dict(
            model=dict(type='ImageClassifier', backbone=dict(in_channels=1)),
            test_dataloader=dict(dataset=dict(type='SpeechCommands', pipeline=pipeline)))))

    assert shape({}, {}) == (1, 32, 32)
    assert shape(dict(length=8000), dict(n_mels=40, hop_length=256)) == (1, 40, 32)


@pytest.fixture(scope='module')
def bad_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, model = load_model(str(FASHION_CONFIG))
    state = dict(model.state_dict())
    state['backbone.conv1.weight'] = torch.zeros(3)
    state['extra.weight'] = torch.zeros(1)
    path = tmp_path_factory.mktemp('ckpt') / 'bad.pth'
    torch.save(dict(state_dict=state), path)
    return path


def test_load_model_names_a_checkpoint_that_does_not_fit(bad_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match=(
            f'checkpoint {bad_checkpoint} does not fit the model of {FASHION_CONFIG}:\n'
            r'1 key\(s\) with another shape \(checkpoint shape vs model shape\):\n'
            r'    backbone.conv1.weight: \[3\] vs \[32, 1, 3, 3\]\n'
            r"1 checkpoint key\(s\) the model does not have:\n    extra.weight")):
        load_model(str(FASHION_CONFIG), str(bad_checkpoint))


def test_pytorch2onnx_reports_a_checkpoint_that_does_not_fit(bad_checkpoint: Path,
                                                             tmp_path: Path,
                                                             capsys: pytest.CaptureFixture
                                                             ) -> None:
    tool = load_tool('deployment/pytorch2onnx')
    out = tmp_path / 'm.onnx'
    assert tool.main([str(FASHION_CONFIG), str(bad_checkpoint), '--out', str(out)]) == 2
    assert 'error: checkpoint' in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize('rtol', ['nan', '-1', 'inf'])
def test_pytorch2onnx_refuses_a_bad_rtol(rtol: str, capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('deployment/pytorch2onnx')
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args([str(FASHION_CONFIG), '--rtol', rtol])
    assert exit_info.value.code == 2
    assert f'--rtol must be a finite number >= 0 (the largest accepted relative difference), ' \
        f'got {float(rtol)}' in capsys.readouterr().err


# --------------------------------------------------------------------------- analysis tools


@pytest.mark.parametrize('tool_name', ['get_flops', 'poly_degree'])
def test_analysis_tools_refuse_unknown_cfg_options(tool_name: str,
                                                   capsys: pytest.CaptureFixture) -> None:
    tool = load_tool(f'analysis_tools/{tool_name}')
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(FASHION_CONFIG), '--cfg-options', 'model.neck.dimm=3'])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert f'tools/analysis_tools/{tool_name}.py: error: unknown --cfg-options key: ' \
        "model.neck.dimm: 'dimm' is not a key of model.neck nor an argument of its type " \
        "'GlobalAveragePooling' (close matches: dim)" in err


def test_get_flops_refuses_a_missing_config_and_a_bad_shape(capsys: pytest.CaptureFixture
                                                            ) -> None:
    tool = load_tool('analysis_tools/get_flops')
    with pytest.raises(SystemExit) as exit_info:
        tool.main(['no_such_config.py'])
    assert exit_info.value.code == 1
    assert "error: config file 'no_such_config.py' does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(FASHION_CONFIG), '--shape', '0', '28'])
    assert exit_info.value.code == 2
    assert 'argument --shape: must be a positive integer, got 0' in capsys.readouterr().err


def test_get_flops_accepts_a_known_cfg_option(capsys: pytest.CaptureFixture) -> None:
    load_tool('analysis_tools/get_flops').main(
        [str(FASHION_CONFIG), '--no-flops', '--cfg-options', 'model.head.num_classes=7'])
    assert 'params:' in capsys.readouterr().out


@pytest.mark.parametrize('key, message', [
    ('model.neck.dimm', "model.neck.dimm: 'dimm' is not a key of model.neck nor an argument of "
     "its type 'GlobalAveragePooling' \\(close matches: dim\\)"),
    ('model.backbone.dept', r"model.backbone.dept: 'dept' is not a key of model.backbone nor an "
     r"argument of its type 'PDCResNetCIFAR' \(close matches: depth"),
])
def test_analyse_config_checks_cfg_options(key: str, message: str) -> None:
    """The API refuses a mistaken key as the CLI does: the neck typo used to pass unnoticed
    (only the backbone is built), the backbone one to end in a raw TypeError of the build."""
    with pytest.raises(StartupError, match='unknown --cfg-options key: ' + message):
        analyse_config(str(FASHION_CONFIG), cfg_options={key: 3}, parts=['blocks'],
                       max_degree=3)


def test_poly_degree_checks_cfg_options_once(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture) -> None:
    """The CLI leaves the check to analyse_config: one check, the CLI's message and status."""
    import mmpoly.analysis.degree as degree
    calls = []

    def counted(cfg: Config, options: dict) -> None:
        calls.append(options)
        return check(cfg, options)

    check = degree.check_cfg_options
    monkeypatch.setattr(degree, 'check_cfg_options', counted)
    tool = load_tool('analysis_tools/poly_degree')
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(FASHION_CONFIG), '--cfg-options', 'model.neck.dimm=3'])
    assert exit_info.value.code == 1 and len(calls) == 1
    assert 'tools/analysis_tools/poly_degree.py: error: unknown --cfg-options key: ' \
        'model.neck.dimm' in capsys.readouterr().err


# --------------------------------------------------------------------------- deployment options


def _not_reached(*args: Any, **kwargs: Any) -> None:
    raise AssertionError('a bad option must be refused before any model is loaded')


@pytest.mark.parametrize('value, message', [
    ('20000', '--num-images 20000 exceeds the 10000 test images of Fashion-MNIST; allowed: 1 '
     'to 10000 (or leave it out for all)'),
    ('0', '--num-images must be a positive number of images, got 0; allowed: 1 to 10000'),
])
def test_onnx_zoo_parity_refuses_more_images_than_the_test_set(
        value: str, message: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('deployment/onnx_zoo_parity')
    monkeypatch.setattr(tool, 'run', _not_reached)
    with pytest.raises(SystemExit) as exit_info:
        tool.main(['--num-images', value])
    assert exit_info.value.code == 2
    assert f': error: {message}' in capsys.readouterr().err


def test_onnx_zoo_parity_run_refuses_bad_options_before_loading(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip('onnxruntime')
    tool = load_tool('deployment/onnx_zoo_parity')
    monkeypatch.setattr(tool, 'published_models', _not_reached)
    with pytest.raises(ValueError, match='--num-images 10001 exceeds the 10000 test images'):
        tool.run(None, 10001, tool.DEFAULT_OPSET)
    with pytest.raises(ValueError, match='--opset must be an int from 18'):
        tool.run(None, 10, 17)


def test_onnx_zoo_parity_refuses_an_unknown_model_name(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A usage error naming the unknown name and the published ones, before anything runs."""
    tool = load_tool('deployment/onnx_zoo_parity')
    monkeypatch.setattr(tool, 'run', _not_reached)
    published = [m['name'] for m in tool.published_models()]
    with pytest.raises(SystemExit) as exit_info:
        tool.main(['--models', published[0], 'pdc_resnet99'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f": error: --models ['pdc_resnet99'] are not published models; choose from " \
        f'{sorted(published)}' in err
    assert 'Traceback' not in err


def _opset_errors(tool_name: str, opset: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``tool_name`` with ``--opset opset``; it must exit (SystemExit) before any export."""
    tool = load_tool(f'deployment/{tool_name}')
    if tool_name == 'onnx_zoo_parity':
        monkeypatch.setattr(tool, 'run', _not_reached)
        tool.main(['--opset', str(opset)])
    else:
        monkeypatch.setattr(tool, 'load_model', _not_reached)
        tool.main([str(FASHION_CONFIG), '--opset', str(opset)])


@pytest.mark.parametrize('tool_name', ['onnx_zoo_parity', 'pytorch2onnx'])
@pytest.mark.parametrize('too', ['low', 'high'])
def test_deployment_tools_refuse_an_opset_outside_the_exporter_range(
        tool_name: str, too: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """A usage error (status 2, one message, no traceback), the range from mmpoly.deploy."""
    low, high = opset_range()
    if high is None:
        pytest.skip('onnx is not installed')
    opset = 5 if too == 'low' else high + 1
    with pytest.raises(SystemExit) as exit_info:
        _opset_errors(tool_name, opset, monkeypatch)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f': error: --opset must be an int from {MIN_OPSET} to {high} (the ' \
        f'torch.export-based exporter implements opset {MIN_OPSET} and later; the installed ' \
        f'onnx knows opsets up to {high}), got {opset}' in err
    assert 'Traceback' not in err and err.count('error:') == 1


def test_export_onnx_refuses_an_opset_the_installed_onnx_does_not_know(tmp_path: Path) -> None:
    """torch's exporter would write opset 18 instead of it, without an error."""
    high = opset_range()[1]
    if high is None:
        pytest.skip('onnx is not installed')
    _, model = load_model(str(FASHION_CONFIG))
    with pytest.raises(ValueError, match=f'opset must be an int from 18 to {high} .*got '
                       f'{high + 1}'):
        export_onnx(model, str(tmp_path / 'm.onnx'), (1, 28, 28), opset=high + 1)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- make_fashion_coco


def test_make_fashion_coco_names_its_own_image_size_option(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture
                                                           ) -> None:
    tool = load_tool('dataset_converters/make_fashion_coco')
    out = tmp_path / 'set'
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(out), '--image-size', '40', '48'])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert ': error: --image-size 40 48: both sides must be >= 56 (the ' \
        'items pasted into the images are 56 to 120 pixels square, and the smallest must fit)' \
        in err
    assert 'item_sizes' not in err and not out.exists()
    assert tool.parse_args([str(out), '--image-size', '56', '56']).image_size == [56, 56]
    # the library function keeps naming its own argument
    with pytest.raises(ValueError, match=r'item_sizes must be \(min, max\), two ints with 16 <= '
                       r'min <= max and min <= the image side 40, got \(56, 120\)'):
        write_fashion_coco(str(out), image_size=(40, 48))
    assert not out.exists()


def _fashion_coco_files(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob('*'))
            if p.is_file()}


def test_write_fashion_coco_writes_each_file_atomically(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Images decode, no temporary file is left, and an interrupted rewrite leaves every image
    either old or new (never truncated) and no annotation file pointing at the mix."""
    if not (FASHION_MNIST / 't10k-images-idx3-ubyte.gz').is_file():
        pytest.skip('tools/setup_env.sh installs Fashion-MNIST')
    pytest.importorskip('skimage')
    out = tmp_path / 'set'
    options = dict(num_images=dict(val=3), image_size=(64, 64), item_sizes=(16, 32),
                   backgrounds=['camera'], fashion_mnist_root=str(FASHION_MNIST))
    written = write_fashion_coco(str(out), seed=0, **options)
    old = _fashion_coco_files(out)
    names = [f'val2017/{1001 + k:012d}.jpg' for k in range(3)]
    assert sorted(old) == ['annotations/instances_val2017.json'] + names
    for name in names:
        image = cv2.imread(str(out / name))
        assert image is not None and image.shape == (64, 64, 3)
    assert [i['file_name'] for i in json.loads(Path(written['val']).read_text())['images']] \
        == [Path(name).name for name in names]

    replace, replaced = os.replace, []

    def failing_replace(src: Any, dst: Any) -> None:
        if str(dst).endswith('.jpg'):
            replaced.append(dst)
            if len(replaced) == 2:  # the second image: interrupted just before its rename
                raise OSError('interrupted for the test')
        replace(src, dst)

    monkeypatch.setattr(os, 'replace', failing_replace)
    with pytest.raises(OSError, match='interrupted for the test'):
        write_fashion_coco(str(out), seed=1, **options)
    monkeypatch.undo()
    now = _fashion_coco_files(out)
    assert sorted(now) == names  # the old annotations are gone, no temporary file is left
    assert now[names[0]] != old[names[0]]  # rewritten (complete: it decodes)
    assert cv2.imread(str(out / names[0])) is not None
    assert now[names[1]] == old[names[1]] and now[names[2]] == old[names[2]]
    assert not list(out.rglob(f'*{TEMP_SUFFIX}'))
