"""Hook options are checked when a hook is built, and disk space before it is needed.

* an unknown key of mmpoly's checkpoint hook, NonFiniteCheckHook or ModelCheckHook raises when
  the hook is built (close matches named), not at the first save;
* before training, the checkpoint folder's free space is compared with twice the estimated
  checkpoint size (``disk_check='error'`` stops, ``'warn'`` logs the numbers and trains);
* a save that runs out of space names the file, the bytes needed and free, and leaves the
  previous checkpoint intact and named by ``last_checkpoint``.
"""
import errno
import logging
import os
import re
import subprocess
import sys
from collections import namedtuple
from pathlib import Path
from typing import List

import pytest
import torch
from helpers import TOOLS, experiment_name
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import HOOKS
from mmengine.runner import Runner
from test_engine import ToyDataset, ToyModel
from test_tools import TIMEOUT_S, make_fashion_mnist_subset, write_config

from mmpoly.engine import (AtomicCheckpointHook, DiskFullError, InsufficientDiskSpaceError,
                           ModelCheckHook, NonFiniteCheckHook, UnknownHookOptionError,
                           estimate_checkpoint_bytes, load_checkpoint_file,
                           use_atomic_checkpoint_hook)
from mmpoly.fileio import TEMP_SUFFIX
from mmpoly.fileio import atomic as atomic_mod

# --------------------------------------------------------------------------- options


def test_checkpoint_hook_rejects_a_mistyped_key_when_built() -> None:
    cfg = Config(dict(default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1,
                                                         max_keep_ckpt=2))))
    assert use_atomic_checkpoint_hook(cfg) == 1
    with pytest.raises(UnknownHookOptionError) as info:
        HOOKS.build(cfg.default_hooks.checkpoint)
    message = str(info.value)
    assert "AtomicCheckpointHook has no option 'max_keep_ckpt'" in message
    assert "did you mean 'max_keep_ckpts'?" in message
    assert 'disk_check' in message and 'save_best' in message  # its options, mmengine's too
    # every option of mmengine's CheckpointHook is still accepted
    hook = AtomicCheckpointHook(interval=2, max_keep_ckpts=1, save_best='auto', rule='greater',
                                filename_tmpl='ep{}.pth', published_keys=['meta'])
    assert hook.max_keep_ckpts == 1 and hook.args == {}


def test_disk_check_value_is_checked() -> None:
    with pytest.raises(ValueError, match=r"disk_check='warm'; allowed: 'error', 'warn'"):
        AtomicCheckpointHook(disk_check='warm')


@pytest.mark.parametrize('interval', [0, -2, 1.5, '2', True])
def test_checkpoint_interval_is_a_whole_number_or_minus_one(interval: object) -> None:
    """mmengine skips every periodic save for these (silently): only the last was saved."""
    with pytest.raises(ValueError, match=rf"AtomicCheckpointHook: interval={interval!r}; "
                       r"allowed: a whole number >= 1 .*or -1"):
        AtomicCheckpointHook(interval=interval)
    with pytest.raises(ValueError, match=r'interval='):
        AtomicCheckpointHook(interval)  # given by position, as mmengine's signature allows
    assert AtomicCheckpointHook().interval == -1
    assert AtomicCheckpointHook(3).interval == AtomicCheckpointHook(interval=3).interval == 3


@pytest.mark.parametrize('max_listed', [-1, '5', 2.0, None])
def test_non_finite_check_hook_max_listed_is_a_whole_number(max_listed: object) -> None:
    """A bad value used to pass, then replace the NaN diagnosis by a TypeError at the NaN."""
    with pytest.raises(ValueError, match=rf'max_listed must be a whole number >= 0.*got '
                       rf'{re.escape(repr(max_listed))}'):
        HOOKS.build(dict(type='NonFiniteCheckHook', max_listed=max_listed))
    assert NonFiniteCheckHook(max_listed=0).max_listed == 0


def test_check_hooks_reject_unknown_keys() -> None:
    with pytest.raises(UnknownHookOptionError,
                       match=r"NonFiniteCheckHook has no option 'max_list'; did you mean "
                       r"'max_listed'\? Its options: max_listed\."):
        HOOKS.build(dict(type='NonFiniteCheckHook', max_list=3))
    assert NonFiniteCheckHook(max_listed=3).max_listed == 3
    with pytest.raises(UnknownHookOptionError,
                       match=r"ModelCheckHook has no option 'strict'\. It takes no options\."):
        ModelCheckHook(strict=True)
    ModelCheckHook()


@pytest.mark.slow
def test_train_tool_stops_on_a_mistyped_checkpoint_key_before_training(tmp_path: Path) -> None:
    config = write_config(tmp_path, make_fashion_mnist_subset(tmp_path / 'data'))
    proc = subprocess.run(
        [sys.executable, str(TOOLS / 'train.py'), str(config), '--work-dir', str(tmp_path / 'w'),
         '--cfg-options', 'default_hooks.checkpoint.max_keep_ckpt=1'], text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "has no option 'max_keep_ckpt'; did you mean 'max_keep_ckpts'?" in proc.stdout
    assert 'Epoch(train)' not in proc.stdout
    assert not list((tmp_path / 'w').glob('*.pth'))


# --------------------------------------------------------------------------- disk space


def _runner(work_dir: Path, max_epochs: int = 1, **hook: object) -> Runner:
    return Runner(
        model=ToyModel(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=ToyDataset(), batch_size=4,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01, momentum=0.9)),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs),
        default_hooks=dict(checkpoint=dict(type='mmengine.AtomicCheckpointHook', interval=1,
                                           **hook)),
        randomness=dict(seed=0), experiment_name=experiment_name('disk'))


Usage = namedtuple('Usage', 'total used free')


def _fake_free(monkeypatch: pytest.MonkeyPatch, free: int) -> List[str]:
    """Make the file system of every path report ``free`` bytes; returns the queried paths."""
    asked: List[str] = []

    def disk_usage(path: str) -> Usage:
        asked.append(path)
        return Usage(10 * free + 10**9, 10**9, free)

    monkeypatch.setattr(atomic_mod.shutil, 'disk_usage', disk_usage)
    return asked


def _tensor_bytes(obj: object) -> int:
    if torch.is_tensor(obj):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def test_estimate_equals_the_tensors_of_the_saved_checkpoint(tmp_path: Path) -> None:
    """Before the first step (no momentum buffers yet) the estimate is the byte count of the
    state_dict and optimizer tensors that the first checkpoint then holds."""
    runner = _runner(tmp_path)
    estimate = estimate_checkpoint_bytes(runner.model, runner.build_optim_wrapper(
        dict(optimizer=dict(type='SGD', lr=0.01, momentum=0.9))))
    params = sum(p.numel() for p in runner.model.parameters())
    assert params == 7  # fc 4+1, bn 1+1
    runner.train()
    saved = load_checkpoint_file(str(tmp_path / 'epoch_1.pth'))
    assert estimate == _tensor_bytes(saved['state_dict']) + _tensor_bytes(saved['optimizer'])
    assert estimate == (7 + 2) * 4 + 8 + 7 * 4  # fp32 weights + running stats, int64 counter,
    #                                              one momentum buffer per parameter


def _needed() -> int:
    """2 x the estimate of the toy runner's checkpoint (see the test above)."""
    return 2 * ((7 + 2) * 4 + 8 + 7 * 4)


def test_too_little_space_stops_before_training(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _fake_free(monkeypatch, _needed() - 1)
    runner = _runner(tmp_path)
    with pytest.raises(InsufficientDiskSpaceError) as info:
        runner.train()
    message = str(info.value)
    assert f'{_needed() - 1} bytes' in message and f'saving needs about {_needed()} bytes' in \
        message
    assert str(tmp_path) in message and "disk_check='warn'" in message
    assert runner.iter == 0 and not list(tmp_path.glob('*.pth'))
    assert os.path.realpath(asked[0]) == os.path.realpath(tmp_path)


def test_enough_space_or_warn_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_free(monkeypatch, _needed())
    _runner(tmp_path / 'enough').train()
    assert (tmp_path / 'enough' / 'epoch_1.pth').is_file()

    _fake_free(monkeypatch, 100)
    messages: List[str] = []
    runner = _runner(tmp_path / 'warn', disk_check='warn')
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore
    MMLogger.get_current_instance().addHandler(handler)
    try:
        runner.train()
    finally:
        MMLogger.get_current_instance().removeHandler(handler)
    assert (tmp_path / 'warn' / 'epoch_1.pth').is_file()
    warned = [m for m in messages if 'Not enough free disk space' in m]
    assert len(warned) == 1 and '100 bytes (100 B) are free' in warned[0]
    assert "disk_check='warn' is set: training anyway" in warned[0]


def test_enospc_during_a_save_names_path_sizes_and_the_intact_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_fsync = os.fsync
    written: List[int] = []

    def fsync(fd: int) -> None:  # the disk fills up while epoch_2.pth is written
        if 'epoch_2.pth' in os.readlink(f'/proc/self/fd/{fd}'):
            written.append(os.fstat(fd).st_size)
            raise OSError(errno.ENOSPC, 'No space left on device')
        real_fsync(fd)

    monkeypatch.setattr(atomic_mod.os, 'fsync', fsync)
    monkeypatch.setattr(atomic_mod.shutil, 'disk_usage',
                        lambda path: Usage(10**12, 0, 10**12) if not os.path.exists(
                            tmp_path / 'epoch_1.pth') else Usage(10**6, 0, 12345))
    with pytest.raises(DiskFullError) as info:
        _runner(tmp_path, max_epochs=2).train()
    error = info.value
    first = tmp_path / 'epoch_1.pth'
    assert error.errno == errno.ENOSPC and error.path == str(tmp_path / 'epoch_2.pth')
    assert error.free == 12345 and [error.needed] == written  # the whole checkpoint's bytes
    message = str(error)
    assert f'No space left on device while writing {tmp_path / "epoch_2.pth"}: it needs ' \
        f'{error.needed} bytes' in message and '12345 bytes (12.1 KiB) are free' in message
    assert f'The previous checkpoint {first} is intact' in message
    assert not (tmp_path / 'epoch_2.pth').exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(TEMP_SUFFIX)]
    assert (tmp_path / 'last_checkpoint').read_text() == str(first)
    assert load_checkpoint_file(str(first))['meta']['epoch'] == 1


def test_free_bytes_asks_the_nearest_existing_folder(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _fake_free(monkeypatch, 7)
    assert atomic_mod.free_bytes(tmp_path / 'not' / 'yet') == 7
    assert asked == [str(tmp_path)]
