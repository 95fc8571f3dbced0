"""Clear errors for checkpoints that cannot be used.

* A file that is not a readable checkpoint (empty, truncated, random bytes, a damaged record)
  raises ``CorruptCheckpointError`` naming the file (and, for a file of another format such as
  an ONNX export or a config, what it is instead); only a well-formed file holding refused
  objects raises ``UnsafeCheckpointError``.
* ``tools/test.py`` refuses a checkpoint whose weights do not fit the model (missing, unexpected,
  mis-shaped keys) unless ``--non-strict`` is given (``StrictCheckpointHook``).
"""
import gzip
import io
import logging
import os
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

import cv2
import numpy as np
import pytest
import torch
from helpers import REPO, TOOLS
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.model import BaseModel
from mmengine.registry import init_default_scope
from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint
from test_engine import Arbitrary, ToyDataset, ToyMetric, rewrite_pickle, toy_runner
from test_tools import TIMEOUT_S, run_tool
from torch import nn

import mmpoly.engine  # noqa: F401  (installs the safe loader)
from mmpoly.engine import checkpoint as ckpt_mod
from mmpoly.engine.checkpoint import (CheckpointMismatchError, CorruptCheckpointError,
                                      StrictCheckpointHook, UnsafeCheckpointError,
                                      compare_state_dict)
from mmpoly.fileio import checkpoint as safe_loading


@pytest.fixture(scope='module')
def mmengine_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """epoch_1.pth written by mmengine's CheckpointHook (a zip-format torch file)."""
    work_dir = tmp_path_factory.mktemp('toy_ckpt')
    toy_runner(work_dir).train()
    return work_dir / 'epoch_1.pth'


def assert_corrupt(path: Path) -> CorruptCheckpointError:
    """Loading ``path`` through mmengine raises CorruptCheckpointError naming the file."""
    with pytest.raises(CorruptCheckpointError) as info:
        _load_checkpoint(str(path), map_location='cpu')
    error = info.value
    assert isinstance(error, ValueError) and not isinstance(error, pickle.UnpicklingError)
    assert error.path == str(path)
    message = str(error)
    assert f'Checkpoint {path} is corrupt' in message
    assert f'{path.stat().st_size} bytes' in message
    return error


# --------------------------------------------------------------------------- corrupt vs unsafe


def test_empty_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / 'empty.pth'
    path.write_bytes(b'')
    error = assert_corrupt(path)
    assert 'empty' in error.reason


@pytest.mark.parametrize('keep', [1, 3, 4, 30, 200, 0.25, 0.5, 0.9, -22, -1])
def test_truncated_mmengine_checkpoint_is_corrupt(mmengine_checkpoint: Path, tmp_path: Path,
                                                  keep: float) -> None:
    """Cut a real checkpoint at several lengths (an int: bytes, from the end if negative)."""
    data = mmengine_checkpoint.read_bytes()
    length = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    path = tmp_path / 'cut.pth'
    path.write_bytes(data[:length])
    error = assert_corrupt(path)
    if length >= 4:  # the zip signature is there: the archive itself is incomplete
        assert 'not a complete one' in error.reason and 'cut short' in error.reason


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_random_bytes_are_corrupt_not_unsafe(tmp_path: Path, seed: int) -> None:
    path = tmp_path / 'random.pth'
    path.write_bytes(np.random.default_rng(seed).bytes(4096))
    error = assert_corrupt(path)
    assert 'neither a zip archive' in error.reason


def test_pickle_like_bytes_are_corrupt(tmp_path: Path) -> None:
    """Starting with a pickle protocol header is not enough to count as unsafe."""
    path = tmp_path / 'pickle_like.pth'
    path.write_bytes(b'\x80\x02' + np.random.default_rng(3).bytes(1000))
    assert_corrupt(path)


def test_zip_without_torch_records_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / 'other.pth'
    with zipfile.ZipFile(path, 'w') as archive:
        archive.writestr('readme.txt', 'not a checkpoint')
    assert 'without a data.pkl record' in assert_corrupt(path).reason


def _other_formats(tmp_path: Path) -> Dict[str, Path]:
    """Files of other formats that users give as a checkpoint, each named as a .pth would be."""
    files = {}
    onnx_like = b'\x08\x0a\x12\x07pytorch\x1a\x052.6.0' + np.random.default_rng(0).bytes(200)
    files['an ONNX model'] = tmp_path / 'exported.pth'  # by its first bytes, not its suffix
    files['an ONNX model'].write_bytes(onnx_like)
    header = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    files['a safetensors file'] = tmp_path / 'model.pth'
    files['a safetensors file'].write_bytes(len(header).to_bytes(8, 'little') + header + b'\0' * 4)
    buffer = io.BytesIO()
    torch.save({'w': torch.ones(3)}, buffer)
    files['a gzip file'] = tmp_path / 'packed.pth'
    files['a gzip file'].write_bytes(gzip.compress(buffer.getvalue()))
    files['an image'] = tmp_path / 'image.pth'
    cv2.imwrite(str(tmp_path / 'image.png'), np.zeros((8, 8, 3), np.uint8))
    files['an image'].write_bytes((tmp_path / 'image.png').read_bytes())
    files['a text file'] = REPO / 'configs' / 'pdc_resnet8_1xb128_fashion-mnist.py'
    return files


def test_a_file_of_another_format_is_named_as_what_it_is(tmp_path: Path) -> None:
    """A config, an ONNX export, safetensors... given as the checkpoint: the error says what the
    file is instead and what to give, rather than calling it corrupt and advising a download."""
    for kind, path in _other_formats(tmp_path).items():
        with pytest.raises(CorruptCheckpointError) as info:
            _load_checkpoint(str(path), map_location='cpu')
        message = str(info.value)
        assert message.startswith(f'Checkpoint {path} is not a torch checkpoint: it is {kind}'), \
            message
        assert 'corrupt' not in message and 'Give the .pth file' in message
        assert info.value.other_format.startswith(kind)
    onnx = tmp_path / 'model.onnx'  # by its suffix
    onnx.write_bytes(np.random.default_rng(1).bytes(300))
    assert safe_loading.other_file_format(str(onnx)).startswith('an ONNX model')
    # what is none of them stays "corrupt" (random bytes, a cut zip, a cut legacy file)
    for seed in range(40):
        onnx.with_suffix('.pth').write_bytes(np.random.default_rng(seed).bytes(4096))
        assert safe_loading.other_file_format(str(onnx.with_suffix('.pth'))) is None, seed


def test_damaged_pickle_record_is_corrupt(mmengine_checkpoint: Path, tmp_path: Path) -> None:
    """A complete zip archive whose data.pkl is garbage (with a matching CRC) is corrupt."""
    path = tmp_path / 'damaged.pth'
    rewrite_pickle(mmengine_checkpoint, path,
                   lambda data: data[:len(data) // 2] + b'\xff' * 16 + data[len(data) // 2:])
    error = assert_corrupt(path)
    assert 'data.pkl is not a valid pickle' in error.reason


def test_legacy_file_loads_and_truncated_legacy_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / 'legacy.pth'
    weights = dict(state_dict=dict(w=torch.arange(1000.)))
    torch.save(weights, path, _use_new_zipfile_serialization=False)
    assert not zipfile.is_zipfile(path)
    assert torch.equal(_load_checkpoint(str(path))['state_dict']['w'], torch.arange(1000.))
    data = path.read_bytes()
    for length in (5, 40, len(data) // 2, len(data) - 1):
        cut = tmp_path / f'legacy_{length}.pth'
        cut.write_bytes(data[:length])
        assert_corrupt(cut)


@pytest.mark.parametrize('legacy', [False, True])
def test_disallowed_object_is_unsafe_not_corrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 legacy: bool) -> None:
    monkeypatch.delenv(ckpt_mod.TRUSTED_CHECKPOINTS_ENV, raising=False)
    path = tmp_path / 'custom.pth'
    torch.save(dict(state_dict=dict(w=torch.ones(2)), extra=Arbitrary(3)), path,
               _use_new_zipfile_serialization=not legacy)
    with pytest.raises(UnsafeCheckpointError) as info:
        CheckpointLoader.load_checkpoint(str(path), map_location='cpu')
    assert not isinstance(info.value, CorruptCheckpointError)
    assert str(path) in str(info.value) and 'Arbitrary' in str(info.value)
    assert info.value.refused_globals == ['test_engine.Arbitrary']


class RunsCommand:
    """Pickles as ``os.system(command)``: the classic malicious checkpoint."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command, )


def _save_raw_pickle(obj: object, path: Path, protocol: int = 2) -> None:
    with open(path, 'wb') as f:
        pickle.dump(obj, f, protocol=protocol)


#: How each format writes a checkpoint (a raw pickle with torch.save's protocol 2).
FORMATS = {
    'zip': torch.save,
    'legacy': lambda obj, path: torch.save(obj, path, _use_new_zipfile_serialization=False),
    'raw pickle': _save_raw_pickle,
}


@pytest.mark.parametrize('fmt', list(FORMATS))
def test_refusal_names_only_the_refused_global(mmengine_checkpoint: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               fmt: str) -> None:
    """A real mmengine checkpoint (HistoryBuffer, numpy arrays and scalars: all allowed) with a
    payload: the refusal names the payload's global, none of the allowed ones, and runs nothing."""
    monkeypatch.delenv(ckpt_mod.TRUSTED_CHECKPOINTS_ENV, raising=False)
    marker = tmp_path / 'pwned'
    loaded = _load_checkpoint(str(mmengine_checkpoint))
    content = dict(message_hub=loaded['message_hub'], payload=RunsCommand(f'touch {marker}'))
    if fmt != 'raw pickle':  # a raw pickle of tensors needs torch globals that are refused too
        content['state_dict'] = loaded['state_dict']
    path = tmp_path / 'evil.pth'
    FORMATS[fmt](content, path)
    allowed = [safe_loading._global_name(g) for g in safe_loading.MMENGINE_CHECKPOINT_GLOBALS]
    assert {'mmengine.logging.history_buffer.HistoryBuffer', 'builtins.getattr'} <= set(
        safe_loading.pickled_globals(str(path)))  # the file does hold allowed globals
    with pytest.raises(UnsafeCheckpointError) as info:
        CheckpointLoader.load_checkpoint(str(path), map_location='cpu')
    error = info.value
    system = f'{os.system.__module__}.system'  # posix.system on Linux
    assert error.refused_globals == [system]
    message = str(error)
    assert f'does not allow the global(s) {system}.' in message and str(path) in message
    for name in allowed + ['HistoryBuffer', 'numpy']:
        assert name not in message, name
    assert not marker.exists()


def test_refusal_of_a_protocol_5_pickle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pickle's default protocol names globals with STACK_GLOBAL (and memoized strings)."""
    monkeypatch.delenv(ckpt_mod.TRUSTED_CHECKPOINTS_ENV, raising=False)
    marker = tmp_path / 'pwned'
    path = tmp_path / 'evil.pkl'
    _save_raw_pickle(dict(epoch=1, a=RunsCommand(f'touch {marker}'),
                          b=RunsCommand(f'touch {marker}')), path, protocol=5)
    with pytest.raises(UnsafeCheckpointError) as info:
        _load_checkpoint(str(path))
    assert info.value.refused_globals == [f'{os.system.__module__}.system']
    assert not marker.exists()


def test_trusted_corrupt_file_is_still_corrupt(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / 'trusted.pth'
    path.write_bytes(b'PK\x03\x04' + b'\x00' * 100)
    monkeypatch.setenv(ckpt_mod.TRUSTED_CHECKPOINTS_ENV, str(path))
    assert_corrupt(path)


def test_sound_file_with_other_error_is_not_called_corrupt(tmp_path: Path) -> None:
    """A load error unrelated to the file (here a bad map_location) is passed on unchanged."""
    path = tmp_path / 'weights.pth'
    torch.save(dict(w=torch.ones(1)), path)
    assert ckpt_mod.checkpoint_file_problem(str(path)) is None
    with pytest.raises(RuntimeError) as info:
        ckpt_mod.load_checkpoint_file(str(path), map_location='no_such_device')
    assert not isinstance(info.value, CorruptCheckpointError)


# --------------------------------------------------------------------------- model fit


class Net(BaseModel):
    """conv - BN - linear, of a given width (a BaseModel, so a TTA model can wrap it)."""

    def __init__(self, width: int = 4, extra: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, width, 3)
        self.bn = nn.BatchNorm2d(width)
        self.fc = nn.Linear(width, 2)
        if extra:
            self.extra = nn.Linear(2, 2)

    def forward(self, inputs: torch.Tensor, data_samples=None, mode: str = 'tensor'):
        return self.fc(self.bn(self.conv(inputs)).mean((2, 3)))


def test_compare_state_dict_lists_every_kind() -> None:
    state = Net(width=8).state_dict()
    state['module.unused'] = torch.zeros(1)  # 'module.' is stripped, as the Runner does
    del state['fc.bias']
    mismatch = compare_state_dict(Net(width=4, extra=True), dict(state_dict=state, meta={}))
    assert ('conv.weight', (8, 1, 3, 3), (4, 1, 3, 3)) in mismatch.mismatched
    assert len(mismatch.mismatched) == 7  # conv w/b, bn w/b/mean/var, fc.weight
    assert mismatch.missing == ['fc.bias', 'extra.weight', 'extra.bias']
    assert mismatch.unexpected == ['unused']
    text = mismatch.describe(limit=2)
    assert '7 key(s) with another shape' in text and 'conv.weight: [8, 1, 3, 3] vs [4, 1, 3, 3]'\
        in text and '... and 5 more' in text
    assert '3 model key(s) missing' in text and '1 checkpoint key(s) the model does not' in text


def test_compare_state_dict_ignores_counters_and_preprocessor_buffers() -> None:
    model = Net()
    state = {k: v for k, v in model.state_dict().items() if 'num_batches_tracked' not in k}
    state['data_preprocessor.mean'] = torch.zeros(3)
    assert not compare_state_dict(model, state)  # a bare state_dict works too
    assert not compare_state_dict(model, dict(state_dict=Net().state_dict()))


def test_compare_state_dict_unwraps_tta_model() -> None:
    from mmpretrain.models import AverageClsScoreTTA
    model = AverageClsScoreTTA(module=Net())
    assert not compare_state_dict(model, dict(state_dict=Net().state_dict()))
    assert compare_state_dict(model, dict(state_dict=Net(width=5).state_dict())).mismatched


def test_compare_state_dict_with_mmdet_models() -> None:
    """Detectors built from mmpoly's mmdet configs: a plain ResNet18 Mask R-CNN does not fit
    the PDC one; the PDC one fits itself, also inside mmdet's DetTTAModel."""
    import mmdet.models  # noqa: F401
    from mmdet.models import DetTTAModel
    from mmdet.registry import MODELS
    init_default_scope('mmdet')

    def build(name):
        return MODELS.build(Config.fromfile(REPO / 'configs' / name).model)
    pdc = build('mask-rcnn_pdc-resnet18_fpn_1x_coco.py')
    plain = build('mask-rcnn_resnet18_fpn_1x_coco.py')
    mismatch = compare_state_dict(pdc, dict(state_dict=plain.state_dict()))
    assert mismatch.mismatched and mismatch.missing
    assert any(k.startswith('backbone.layer1.0.terms') for k in mismatch.missing)
    assert not compare_state_dict(DetTTAModel(module=pdc), dict(state_dict=pdc.state_dict()))


def _toy_test_runner(work_dir: Path, checkpoint: Path, strict: bool):
    runner = toy_runner(work_dir, load_from=str(checkpoint),
                        test_dataloader=dict(dataset=ToyDataset(), batch_size=4,
                                             sampler=dict(type='DefaultSampler', shuffle=False)),
                        test_evaluator=[ToyMetric()], test_cfg=dict())
    runner.register_hook(StrictCheckpointHook(strict=strict, path=str(checkpoint)))
    return runner


def test_strict_hook_in_runner(mmengine_checkpoint: Path, tmp_path: Path,
                               caplog: pytest.LogCaptureFixture) -> None:
    """The hook stops Runner.test on a mismatch; non-strict it warns and the test runs."""
    assert _toy_test_runner(tmp_path / 'ok', mmengine_checkpoint, True).test()['count'] == 16
    state = _load_checkpoint(str(mmengine_checkpoint))['state_dict']
    state['fc.weight'] = torch.zeros(1, 5)
    bad = tmp_path / 'bad.pth'
    torch.save(dict(state_dict=state, meta={}), bad)
    with pytest.raises(CheckpointMismatchError, match=r'fc\.weight: \[1, 5\] vs \[1, 4\]'):
        _toy_test_runner(tmp_path / 'strict', bad, True).test()
    runner = _toy_test_runner(tmp_path / 'lax', bad, False)
    messages: List[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore
    MMLogger.get_current_instance().addHandler(handler)
    try:
        assert runner.test()['count'] == 16
    finally:
        MMLogger.get_current_instance().removeHandler(handler)
    assert any('NON-STRICT LOAD' in m and 'fc.weight' in m for m in messages), messages


# --------------------------------------------------------------------------- tools/test.py

WIDE = 'stage_channels=[8, 24]'


def run_test_tool(config: Path, checkpoint: Path, work_dir: Path,
                  *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOLS / 'test.py'), str(config), str(checkpoint),
                           '--work-dir', str(work_dir), *extra], cwd=REPO, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)


@pytest.fixture(scope='module')
def wide_checkpoint(tiny_setup: Dict[str, Path]) -> Path:
    """A checkpoint of the tiny model with other widths, built from a second config."""
    from mmpretrain.registry import MODELS

    from mmpoly.utils import register_all_modules
    register_all_modules(init_default_scope=True)
    text = tiny_setup['config'].read_text()
    assert 'stage_channels=[8, 16]' in text and 'in_channels=16,' in text
    config = tiny_setup['root'] / 'tiny_wide.py'
    config.write_text(text.replace('stage_channels=[8, 16]', WIDE).replace(
        'in_channels=16,', 'in_channels=24,'))
    model = MODELS.build(Config.fromfile(config).model)
    path = tiny_setup['root'] / 'wide.pth'
    torch.save(dict(meta=dict(epoch=1), state_dict=model.state_dict()), path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize('tta', [False, True])
def test_test_tool_accepts_its_own_checkpoint(tiny_setup: Dict[str, Path], tmp_path: Path,
                                              tta: bool) -> None:
    proc = run_tool([sys.executable, str(TOOLS / 'test.py'), str(tiny_setup['config']),
                     str(tiny_setup['work_dir'] / 'epoch_1.pth'), '--work-dir',
                     str(tmp_path), *(['--tta'] if tta else [])])
    assert re.search(r'Epoch\(test\) \[2/2\]\s+accuracy/top1: \d', proc.stdout), \
        proc.stdout[-3000:]
    assert 'do not fit' not in proc.stdout and 'do not match exactly' not in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize('tta', [False, True])
def test_test_tool_refuses_other_widths(tiny_setup: Dict[str, Path], wide_checkpoint: Path,
                                        tmp_path: Path, tta: bool) -> None:
    proc = run_test_tool(tiny_setup['config'], wide_checkpoint, tmp_path,
                         *(['--tta'] if tta else []))
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:]
    assert f'error: The weights in checkpoint {wide_checkpoint} do not fit the model' in out
    assert '23 key(s) with another shape (checkpoint shape vs model shape):' in out, out[-3000:]
    assert 'backbone.layer2.0.conv1.weight: [24, 8, 3, 3] vs [16, 8, 3, 3]' in out
    assert '... and 13 more' in out  # layer2's other keys and the head: 10 listed
    assert '--non-strict' in out
    assert 'Epoch(test)' not in out and 'Traceback' not in out


@pytest.mark.slow
def test_test_tool_lists_missing_and_unexpected_keys(tiny_setup: Dict[str, Path],
                                                     tmp_path: Path) -> None:
    checkpoint = _load_checkpoint(str(tiny_setup['work_dir'] / 'epoch_1.pth'))
    state = checkpoint['state_dict']
    del state['head.fc.bias']
    state['backbone.extra_layer.weight'] = torch.ones(3)
    path = tmp_path / 'edited.pth'
    torch.save(dict(meta=checkpoint['meta'], state_dict=state), path)
    proc = run_test_tool(tiny_setup['config'], path, tmp_path / 'wd')
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert re.search(r'1 model key\(s\) missing from the checkpoint:\n\s+head\.fc\.bias',
                     proc.stdout), proc.stdout[-3000:]
    assert re.search(r'1 checkpoint key\(s\) the model does not have:\n\s+'
                     r'backbone\.extra_layer\.weight', proc.stdout), proc.stdout[-3000:]
    assert 'with another shape' not in proc.stdout


@pytest.mark.slow
def test_test_tool_non_strict_warns_and_runs(tiny_setup: Dict[str, Path], wide_checkpoint: Path,
                                             tmp_path: Path) -> None:
    proc = run_tool([sys.executable, str(TOOLS / 'test.py'), str(tiny_setup['config']),
                     str(wide_checkpoint), '--work-dir', str(tmp_path), '--non-strict'])
    assert 'NON-STRICT LOAD' in proc.stdout
    assert 'backbone.layer2.0.conv1.weight: [24, 8, 3, 3] vs [16, 8, 3, 3]' in proc.stdout
    assert re.search(r'Epoch\(test\) \[2/2\]\s+accuracy/top1: \d', proc.stdout), \
        proc.stdout[-3000:]


@pytest.mark.slow
def test_test_tool_reports_corrupt_checkpoint(tiny_setup: Dict[str, Path],
                                              tmp_path: Path) -> None:
    data = (tiny_setup['work_dir'] / 'epoch_1.pth').read_bytes()
    path = tmp_path / 'partial_download.pth'
    path.write_bytes(data[:len(data) // 3])
    proc = run_test_tool(tiny_setup['config'], path, tmp_path / 'wd')
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert f'error: Checkpoint {path} is corrupt' in proc.stdout, proc.stdout[-3000:]
    assert 'Traceback' not in proc.stdout and 'Epoch(test)' not in proc.stdout
