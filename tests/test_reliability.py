"""Reliability guarantees of training runs: atomic saves, honest resume, one run per work_dir,
bounded distributed hangs (mmpoly.engine.saving / resume / run_lock / launcher, tools/train.py).

The slow tests run tools/train.py in subprocesses on the tiny config of tests/test_tools.py;
every subprocess has a timeout, so a hang fails the test instead of stalling the suite.
"""
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch
from helpers import TOOLS, disk_full_at_fsync, experiment_name
from mmengine.config import Config
from mmengine.dataset import DefaultSampler
from mmengine.evaluator import BaseMetric, Evaluator
from mmengine.fileio import get_file_backend
from mmengine.runner import Runner
from mmengine.runner.checkpoint import save_checkpoint
from test_engine import ToyDataset, ToyModel
from test_tools import free_port, train

from mmpoly.engine import (LOCK_FILENAME, AtomicCheckpointHook, AtomicLocalBackend, DiskFullError,
                           ResumeError, RunLock, WorkDirLockedError, atomic_write,
                           find_resume_candidates, install_atomic_saving, launcher,
                           load_checkpoint_file,
                           resume_problems, run_problems, select_checkpoint,
                           use_atomic_checkpoint_hook)
from mmpoly.engine import saving as saving_mod
from mmpoly.engine.resume import checkpoint_folder, saved_config_values
from mmpoly.fileio import atomic_savefig

SUBPROCESS_TIMEOUT_S = 120


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _litter(folder: Path) -> List[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(saving_mod.TEMP_SUFFIX))


# --------------------------------------------------------------------------- atomic saves


def test_atomic_write_creates_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / 'sub' / 'a.pth'
    atomic_write(b'first', target)
    atomic_write('second', target)
    assert target.read_bytes() == b'second'
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's 0o600
    assert _litter(target.parent) == []


SIGTERM_DURING_WRITE = r"""
import os, sys, time
from mmpoly.fileio import atomic as atomic_mod
def slow_fsync(fd):
    print('writing', flush=True)
    time.sleep(60)
atomic_mod.os.fsync = slow_fsync
atomic_mod.atomic_write(b'x' * 1000, sys.argv[1])
"""


def test_sigterm_during_an_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    """A terminated export or save: the process ends by SIGTERM as before, without the partial
    temporary file it used to leave beside the target."""
    target = tmp_path / 'model.onnx'
    proc = subprocess.Popen([sys.executable, '-c', SIGTERM_DURING_WRITE, str(target)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == 'writing\n'
        assert len(_litter(tmp_path)) == 1  # the temporary file, mid-write
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=SUBPROCESS_TIMEOUT_S) == -signal.SIGTERM
    finally:
        proc.kill()
    assert _litter(tmp_path) == [] and not target.exists()


@pytest.mark.parametrize('existing', [False, True])
def test_an_interrupt_as_the_temporary_file_is_created_leaves_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool) -> None:
    """A signal handled as the temporary file comes into being (here: KeyboardInterrupt raised
    as os.open returns) still removes it; with tempfile.mkstemp, a signal between its return and
    the clean-up's try left the file behind."""
    from mmpoly.fileio import atomic as atomic_mod
    target = tmp_path / 'model.pth'
    if existing:
        target.write_bytes(b'old')
    real_open = os.open

    def open_then_interrupt(path: str, *args: object, **kwargs: object) -> int:
        fd = real_open(path, *args, **kwargs)
        if str(path).endswith(saving_mod.TEMP_SUFFIX):
            os.close(fd)
            assert len(_litter(tmp_path)) == 1  # created
            raise KeyboardInterrupt
        return fd

    monkeypatch.setattr(atomic_mod.os, 'open', open_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(b'new', target)
    monkeypatch.undo()
    assert _litter(tmp_path) == []
    assert (target.read_bytes() == b'old') if existing else not target.exists()


def test_atomic_write_writes_through_links_and_keeps_the_mode(tmp_path: Path) -> None:
    """As open(path, 'wb') (mmengine's LocalBackend) does: a symbolic link keeps pointing at its
    target, which gets the data; an existing file keeps its permission bits."""
    target = tmp_path / 'data' / 'metrics.json'
    target.parent.mkdir()
    target.write_text('old')
    target.chmod(0o640)
    link = tmp_path / 'link.json'
    link.symlink_to(target)
    atomic_write('new', link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == 'new' and target.stat().st_mode & 0o777 == 0o640
    assert _litter(tmp_path) == [] and _litter(target.parent) == []
    dangling = tmp_path / 'dangling.json'
    dangling.symlink_to(tmp_path / 'data' / 'new.json')
    atomic_write('made', dangling)  # the link's target is created
    assert dangling.is_symlink() and (tmp_path / 'data' / 'new.json').read_text() == 'made'


@pytest.mark.parametrize('existing', [False, True])
def test_atomic_write_failure_leaves_no_file_and_no_litter(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           existing: bool) -> None:
    """A failure after part of the data is written: the final name is absent or unchanged."""
    target = tmp_path / 'epoch_1.pth'
    if existing:
        target.write_bytes(b'old complete checkpoint')

    def failing_fsync(fd: int) -> None:
        assert os.fstat(fd).st_size > 0  # the data is in the temporary file already
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(saving_mod.os, 'fsync', failing_fsync)
    with pytest.raises(OSError, match='No space left'):
        atomic_write(b'x' * 100_000, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == (['epoch_1.pth'] if existing else [])
    if existing:
        assert target.read_bytes() == b'old complete checkpoint'


def test_atomic_savefig_writes_the_suffix_s_format_or_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    magic = {'a.png': b'\x89PNG', 'a.pdf': b'%PDF', 'a.svg': b'<?xml', 'a': b'\x89PNG'}
    for name in magic:
        atomic_savefig(fig, tmp_path / name, dpi=50)
    atomic_savefig(fig, tmp_path / 'b.jpg', format='png')  # an explicit format wins
    assert {p.name: p.read_bytes()[:len(magic.get(p.name, b'\x89PNG'))]
            for p in tmp_path.iterdir()} == {**magic, 'b.jpg': b'\x89PNG'}
    disk_full_at_fsync(monkeypatch, min_bytes=1000)  # the whole image is written
    with pytest.raises(OSError, match='No space left'):
        atomic_savefig(fig, tmp_path / 'a.png')
    with pytest.raises(OSError, match='No space left'):
        atomic_savefig(fig, tmp_path / 'new.png')
    plt.close(fig)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*magic, 'b.jpg'])
    assert (tmp_path / 'a.png').read_bytes()[:4] == b'\x89PNG'


def test_mmengine_save_checkpoint_goes_through_the_atomic_backend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_atomic_saving()
    assert isinstance(get_file_backend(str(tmp_path)), AtomicLocalBackend)
    monkeypatch.setattr(saving_mod.os, 'replace',
                        lambda *a: (_ for _ in ()).throw(OSError('killed before rename')))
    with pytest.raises(OSError, match='killed before rename'):
        save_checkpoint({'state_dict': {'w': torch.ones(3)}}, str(tmp_path / 'epoch_1.pth'))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    save_checkpoint({'state_dict': {'w': torch.ones(3)}}, str(tmp_path / 'epoch_1.pth'))
    assert torch.equal(load_checkpoint_file(str(tmp_path / 'epoch_1.pth'))['state_dict']['w'],
                       torch.ones(3))


def test_install_drops_cached_plain_local_backends(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A LocalBackend that get_file_backend(enable_singleton=True) cached before the install
    is not returned after it."""
    from mmengine.fileio import LocalBackend
    from mmengine.fileio import io as mmengine_io
    monkeypatch.setitem(mmengine_io.backend_instances, ':{}', LocalBackend())
    assert type(get_file_backend(str(tmp_path), enable_singleton=True)) is LocalBackend
    install_atomic_saving()
    assert isinstance(get_file_backend(str(tmp_path), enable_singleton=True), AtomicLocalBackend)


def test_checkpoint_hooks_of_every_scope_are_swapped() -> None:
    cfg = Config(dict(
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1),
                           logger=dict(type='LoggerHook')),
        custom_hooks=[dict(type='mmdet.CheckpointHook', interval=2),
                      dict(type='mmpretrain.CheckpointHook'), dict(type='EMAHook')]))
    assert use_atomic_checkpoint_hook(cfg) == 3
    assert cfg.default_hooks.checkpoint.type == 'mmengine.AtomicCheckpointHook'
    assert cfg.default_hooks.checkpoint.interval == 1
    assert [h.type for h in cfg.custom_hooks] == ['mmengine.AtomicCheckpointHook'] * 2 + [
        'EMAHook']
    for scope in ('mmpretrain', 'mmdet'):
        registry = __import__(f'{scope}.registry', fromlist=['HOOKS']).HOOKS
        assert registry.get(cfg.default_hooks.checkpoint.type) is AtomicCheckpointHook


def _toy_runner(work_dir: Path, max_epochs: int, **hook: object) -> Runner:
    return Runner(
        model=ToyModel(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=ToyDataset(), batch_size=4,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs),
        default_hooks=dict(checkpoint=dict(type='mmengine.AtomicCheckpointHook', **hook)),
        randomness=dict(seed=0),
        experiment_name=experiment_name('reliability'))


def test_hook_names_a_complete_file_and_prunes_only_after_saving(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """max_keep_ckpts=1: mmengine deletes epoch_1 before writing epoch_2; mmpoly after."""
    (tmp_path / '.epoch_9.pth.abc.mmpoly-tmp').write_bytes(b'partial')  # a killed run's leftover
    _toy_runner(tmp_path, 1, interval=1, max_keep_ckpts=1).train()
    assert _litter(tmp_path) == []
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'epoch_1.pth')

    runner = _toy_runner(tmp_path, 2, interval=1, max_keep_ckpts=1)
    runner._resume = True  # as --resume sets it

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt('killed while saving')

    monkeypatch.setattr(runner, 'save_checkpoint', killed)
    with pytest.raises(KeyboardInterrupt):
        runner.train()
    # the old checkpoint is still there and still named
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'epoch_1.pth')
    assert load_checkpoint_file(str(tmp_path / 'epoch_1.pth'))['meta']['epoch'] == 1
    monkeypatch.undo()
    _toy_runner(tmp_path, 2, interval=1, max_keep_ckpts=1).train()
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'epoch_2.pth')
    assert sorted(p.name for p in tmp_path.glob('*.pth')) == ['epoch_2.pth']


class _RisingScore(BaseMetric):
    """A validation score that improves at every evaluation: each one is a new best."""

    def __init__(self) -> None:
        super().__init__()
        self.evaluations = 0

    def process(self, data_batch: object, data_samples: object) -> None:
        self.results.append(0)

    def compute_metrics(self, results: list) -> dict:
        self.evaluations += 1
        return dict(score=float(self.evaluations))


def _best_runner(work_dir: Path, max_epochs: int) -> Runner:
    return Runner(
        model=ToyModel(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=ToyDataset(), batch_size=4,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        val_dataloader=dict(dataset=ToyDataset(), batch_size=4,
                            sampler=dict(type='DefaultSampler', shuffle=False)),
        val_cfg=dict(), val_evaluator=Evaluator(_RisingScore()),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs, val_interval=1),
        default_hooks=dict(checkpoint=dict(type='mmengine.AtomicCheckpointHook', interval=1,
                                           save_best='score', rule='greater')),
        randomness=dict(seed=0), experiment_name=experiment_name('reliability-best'))


def test_previous_best_checkpoint_is_deleted_only_after_the_new_one_is_saved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mmengine deletes best_score_epoch_1.pth before it writes best_score_epoch_2.pth: a save
    that fails there (here: a full disk) left no best checkpoint. mmpoly deletes it after."""
    runner = _best_runner(tmp_path, 2)
    save = runner.save_checkpoint

    def disk_full_for_the_second_best(out_dir: str, filename: str, *args: object,
                                      **kwargs: object) -> None:
        if filename == 'best_score_epoch_2.pth':
            raise DiskFullError(str(tmp_path / filename), 10, 0, 'No space left')
        save(out_dir, filename, *args, **kwargs)

    monkeypatch.setattr(runner, 'save_checkpoint', disk_full_for_the_second_best)
    with pytest.raises(DiskFullError, match='previous best checkpoint .*best_score_epoch_1.pth '
                       'is intact'):
        runner.train()
    assert sorted(p.name for p in tmp_path.glob('*.pth')) == \
        ['best_score_epoch_1.pth', 'epoch_1.pth', 'epoch_2.pth']
    assert load_checkpoint_file(str(tmp_path / 'best_score_epoch_1.pth'))['meta']['epoch'] == 1
    # the same run without the failure replaces the best checkpoint as mmengine does
    shutil.rmtree(tmp_path)
    _best_runner(tmp_path, 2).train()
    assert sorted(p.name for p in tmp_path.glob('best_*.pth')) == ['best_score_epoch_2.pth']
    assert _litter(tmp_path) == []


# --------------------------------------------------------------------------- resume (units)


def _checkpoint(model: torch.nn.Module) -> dict:
    return dict(meta=dict(epoch=1, iter=4), state_dict=model.state_dict(),
                optimizer=dict(state={}, param_groups=[]))


def test_resume_problems_name_what_is_missing() -> None:
    model = ToyModel()
    assert resume_problems(_checkpoint(model), model) == []
    wrapped = _checkpoint(model)
    wrapped['state_dict'] = {f'module.{k}': v for k, v in wrapped['state_dict'].items()}
    assert resume_problems(wrapped, model) == []

    bare = resume_problems(model.state_dict(), model)
    assert len(bare) == 1 and 'bare state dict' in bare[0] and "'meta'" in bare[0]

    other = _checkpoint(model)
    del other['optimizer'], other['meta']['iter']
    state = dict(other['state_dict'])
    weights = sorted(k for k in state if not k.endswith('num_batches_tracked'))
    key, removed = weights[0], weights[-1]
    model_shape = list(state[key].shape)
    state[key] = torch.zeros(7, 7)
    del state[removed]
    state['head.extra'] = torch.zeros(1)
    other['state_dict'] = state
    text = '\n'.join(resume_problems(other, model))
    assert "'optimizer'" in text and "lacks ['iter']" in text
    assert f'1 model key(s) missing from the checkpoint:\n    {removed}' in text
    assert '1 checkpoint key(s) the model does not have:\n    head.extra' in text
    assert f'{key}: [7, 7] vs {model_shape}' in text
    assert resume_problems(['not', 'a', 'dict'], model)[0].startswith('it holds a list')


def test_candidates_last_checkpoint_first_then_newest(tmp_path: Path) -> None:
    for age, name in ((30, 'epoch_3.pth'), (20, 'iter_2.pth'), (10, 'epoch_1.pth')):
        (tmp_path / name).write_bytes(b'x')
        os.utime(tmp_path / name, (time.time() - age, time.time() - age))
    (tmp_path / 'best_accuracy_epoch_1.pth').write_bytes(b'x')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'iter_2.pth'))
    assert find_resume_candidates(str(tmp_path)) == [
        (str(tmp_path / 'iter_2.pth'), 'named by last_checkpoint'),
        (str(tmp_path / 'epoch_1.pth'), 'in the work_dir'),
        (str(tmp_path / 'epoch_3.pth'), 'in the work_dir')]


class _Log:
    def __init__(self) -> None:
        self.lines: List[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)

    warning = info


def test_select_checkpoint_skips_broken_files_and_reports_all(tmp_path: Path) -> None:
    model = ToyModel()
    good = tmp_path / 'epoch_1.pth'
    torch.save(_checkpoint(model), good)
    truncated = tmp_path / 'epoch_2.pth'
    truncated.write_bytes(good.read_bytes()[:500])
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'epoch_3.pth'))  # deleted file
    log = _Log()
    assert select_checkpoint(str(tmp_path), None, model, log) == str(good)
    assert any('epoch_3.pth (named by last_checkpoint): no such file' in line for line in log.lines)
    assert any('epoch_2.pth (in the work_dir): does not load' in line for line in log.lines)
    assert log.lines[-1] == f'Auto resumed from the latest checkpoint {good}.'

    good.write_bytes(b'garbage')
    with pytest.raises(ResumeError) as error:
        select_checkpoint(str(tmp_path), None, model, _Log())
    for name in ('epoch_1.pth', 'epoch_2.pth', 'epoch_3.pth'):
        assert name in str(error.value)
    assert select_checkpoint(str(tmp_path / 'empty'), None, model, log) is None
    assert 'training from scratch' in log.lines[-1]


def test_last_checkpoint_of_another_folder_names_this_work_dirs_file(tmp_path: Path) -> None:
    """A copied (or moved) work_dir: its last_checkpoint still names the old folder's file.
    Resuming that would continue the other folder's run; this work_dir's file of the same name
    is taken instead, or the name is skipped with the reason."""
    model = ToyModel()
    old, copy = tmp_path / 'old', tmp_path / 'copy'
    old.mkdir()
    torch.save(_checkpoint(model), old / 'epoch_1.pth')
    torch.save(dict(_checkpoint(model), meta=dict(epoch=2, iter=8)), old / 'epoch_2.pth')
    (old / 'last_checkpoint').write_text(str(old / 'epoch_2.pth'))
    shutil.copytree(old, copy)
    named = old / 'epoch_2.pth'
    moved = (f'last_checkpoint names {named}, in another folder than {copy} (was the work_dir '
             'copied or moved?)')
    notes: List[str] = []
    assert find_resume_candidates(str(copy), notes) == [
        (str(copy / 'epoch_2.pth'), f'the file of that name in {copy}; last_checkpoint names '
                                    f'{named} in another folder'),
        (str(copy / 'epoch_1.pth'), 'in the work_dir')]
    assert notes == [f'--resume: {moved}; trying the file of that name here, '
                     f'{copy / "epoch_2.pth"}, instead']
    log = _Log()
    assert select_checkpoint(str(copy), None, model, log) == str(copy / 'epoch_2.pth')
    assert log.lines == [*notes, f'Auto resumed from the latest checkpoint {copy / "epoch_2.pth"}.']

    (copy / 'epoch_2.pth').unlink()
    skipped = (f'{named} (named by last_checkpoint): {moved}, and {copy} has no epoch_2.pth; '
               "resuming it would continue another folder's run")
    log = _Log()
    assert select_checkpoint(str(copy), None, model, log) == str(copy / 'epoch_1.pth')
    assert log.lines == [f'--resume skipped {skipped}',
                         f'Auto resumed from the latest checkpoint {copy / "epoch_1.pth"}.']
    (copy / 'epoch_1.pth').unlink()  # nothing of this folder left: not "training from scratch"
    with pytest.raises(ResumeError) as error:
        select_checkpoint(str(copy), None, model, _Log())
    assert str(error.value) == (f'--resume found checkpoints in {copy} but none can be resumed:'
                                f'\n  {skipped}\nDelete or move the broken files, or pass '
                                '--resume PATH.')
    # the checkpoint hook's out_dir is where the checkpoints are: its files are not foreign
    cfg = Config(dict(default_hooks=dict(checkpoint=dict(out_dir=str(tmp_path / 'out')))))
    folder = checkpoint_folder(str(copy), cfg)
    assert folder == str(tmp_path / 'out' / 'copy')
    os.makedirs(folder)
    torch.save(_checkpoint(model), Path(folder) / 'epoch_1.pth')
    (copy / 'last_checkpoint').write_text(str(Path(folder) / 'epoch_1.pth'))
    log = _Log()
    assert select_checkpoint(str(copy), None, model, log, cfg) == str(Path(folder) / 'epoch_1.pth')
    assert len(log.lines) == 1


def _run_config(**changes: object) -> Config:
    cfg = Config(dict(
        train_cfg=dict(by_epoch=True, max_epochs=4, val_interval=1),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9)),
        param_scheduler=[dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
                              end=100),
                         dict(type='CosineAnnealingLR', T_max=4, by_epoch=True, begin=0, end=4)],
        val_evaluator=dict(type='Accuracy', topk=(1, 5))))
    cfg.merge_from_dict(changes)
    return cfg


def test_run_problems_finished_run_and_changed_optimizer_or_schedule(tmp_path: Path) -> None:
    """A resume is refused when the checkpoint's run is finished, or when the optimizer or the
    schedule changed since (mmengine would restore the old state over them without a word)."""
    cfg = _run_config()
    meta = dict(epoch=2, iter=8, cfg=cfg.pretty_text)  # the config text mmengine saves
    assert saved_config_values(cfg.pretty_text)['val_evaluator'] == dict(type='Accuracy',
                                                                         topk=[1, 5])
    assert run_problems(meta, cfg) == []
    assert run_problems(dict(meta, epoch=3), _run_config(**{'train_cfg.val_interval': 2})) == []
    finished = ('its run is finished: it was saved at epoch 4, and the config trains to '
                'train_cfg.max_epochs=4, so a resumed run would train nothing (to train longer, '
                'raise train_cfg.max_epochs)')
    assert run_problems(dict(meta, epoch=4), cfg) == [finished]
    iters = _run_config(train_cfg=dict(_delete_=True, by_epoch=False, max_iters=100))
    assert run_problems(dict(meta, epoch=0, iter=100, cfg=iters.pretty_text), iters) == [
        'its run is finished: it was saved at iter 100, and the config trains to '
        'train_cfg.max_iters=100, so a resumed run would train nothing (to train longer, raise '
        'train_cfg.max_iters)']
    changed = _run_config(**{'optim_wrapper.optimizer.lr': 0.01,
                             'optim_wrapper.optimizer.momentum': None,
                             'optim_wrapper.optimizer.nesterov': True,
                             'param_scheduler': [dict(type='LinearLR', start_factor=0.1,
                                                      by_epoch=False, begin=0, end=100),
                                                 dict(type='CosineAnnealingLR', T_max=8,
                                                      by_epoch=True, begin=0, end=8)]})
    assert run_problems(meta, changed) == [
        'the optimizer settings changed since the checkpoint was saved '
        '(optim_wrapper.optimizer.lr: 0.1 -> 0.01; optim_wrapper.optimizer.momentum: 0.9 -> '
        'None; optim_wrapper.optimizer.nesterov: (not set) -> True): a resumed run continues '
        "with the checkpoint's optimizer state, its learning rate, momentum and weight decay "
        'included, so the new settings would not take effect',
        'the learning-rate schedule changed since the checkpoint was saved '
        '(param_scheduler.1.T_max: 4 -> 8; param_scheduler.1.end: 4 -> 8): a resumed run '
        "continues with the checkpoint's scheduler state (begin, end, T_max, milestones, ...), "
        'so the new schedule would not take effect']
    one = run_problems(meta, _run_config(param_scheduler=[dict(type='ConstantLR')]))
    assert len(one) == 1 and one[0].startswith(
        "the learning-rate schedule changed since the checkpoint was saved (param_scheduler: [{'"
        ), one
    # the config text is read, never run; what it cannot read is not compared
    marker = tmp_path / 'ran'
    code = (f"import os\nos.system('touch {marker}')\n"
            "optim_wrapper = dict(optimizer=dict(type='SGD', lr=float('0.5')))\n"
            f'param_scheduler = {changed.param_scheduler!r}\n')
    assert run_problems(dict(meta, cfg=code), cfg)[0].startswith(
        'the learning-rate schedule changed')
    assert not marker.exists()
    assert run_problems(dict(epoch=1, iter=4), cfg) == []  # no config text: nothing to compare
    assert run_problems(None, cfg) == []

    # select_checkpoint refuses such a checkpoint with the way forward, auto and explicit
    model = ToyModel()
    path = tmp_path / 'work' / 'epoch_4.pth'
    path.parent.mkdir()
    torch.save(dict(_checkpoint(model), meta=dict(epoch=4, iter=16, cfg=cfg.pretty_text)), path)
    expected = (f'cannot resume from {path}: {finished}. To train again, start a new run in '
                'another --work-dir (without --resume); to fine-tune from its weights, start '
                f'one with --cfg-options load_from={path}.')
    for load_from in (None, str(path)):
        with pytest.raises(ResumeError) as error:
            select_checkpoint(str(path.parent), load_from, model, _Log(), cfg)
        assert str(error.value) == expected
    longer = _run_config(**{'train_cfg.max_epochs': 8})  # the schedule is the checkpoint's
    assert select_checkpoint(str(path.parent), None, model, _Log(), longer) == str(path)
    assert select_checkpoint(str(path.parent), None, model, _Log()) == str(path)  # no config


# --------------------------------------------------------------------------- lock (units)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, '-c', 'pass'])
    proc.wait(timeout=30)
    return proc.pid


def test_run_lock_refuses_a_second_run_and_is_released(tmp_path: Path) -> None:
    with RunLock(str(tmp_path), command=['train.py', 'a.py']) as first:
        info = json.loads((tmp_path / LOCK_FILENAME).read_text())
        assert info['pid'] == os.getpid() and info['host'] == socket.gethostname()
        assert info['command'].endswith('train.py a.py') and info['start_time']
        with pytest.raises(WorkDirLockedError) as error:
            RunLock(str(tmp_path)).acquire()  # another open file description: flock conflicts
        message = str(error.value)
        assert f'PID {os.getpid()} on host {socket.gethostname()}' in message
        assert info['start_time'] in message and 'train.py a.py' in message
        assert first.taken_over is None
    assert not (tmp_path / LOCK_FILENAME).exists()
    with pytest.raises(RuntimeError):
        with RunLock(str(tmp_path)):
            raise RuntimeError('training failed')
    assert not (tmp_path / LOCK_FILENAME).exists()  # released on exceptions too


def test_stale_lock_of_a_dead_pid_is_taken_over(tmp_path: Path) -> None:
    stale = dict(pid=_dead_pid(), host=socket.gethostname(), start_time='2020-01-01T00:00:00',
                 command='python tools/train.py old.py')
    (tmp_path / LOCK_FILENAME).write_text(json.dumps(stale))
    with RunLock(str(tmp_path)) as lock:
        assert lock.taken_over == stale
        assert json.loads((tmp_path / LOCK_FILENAME).read_text())['pid'] == os.getpid()


# --------------------------------------------------------------------------- timeout (units)


@pytest.mark.parametrize('value', [0, -5, math.inf, math.nan, 'abc', True, [10]])
def test_dist_timeout_must_be_positive_and_finite(value: object) -> None:
    cfg = Config(dict(env_cfg=dict(dist_cfg=dict(timeout=value))))
    with pytest.raises(ValueError, match=r'env_cfg\.dist_cfg\.timeout must be a positive '
                       r'finite number of seconds, got ' + re.escape(repr(value))):
        launcher.dist_timeout(cfg)
    with pytest.raises(ValueError, match='env_cfg.dist_cfg.timeout'):
        launcher.setup_cpu_distributed(cfg, 'pytorch')


def test_gloo_timeout_default(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture) -> None:
    assert launcher.dist_timeout(Config(dict())) is None
    assert launcher.dist_timeout(Config(dict(env_cfg=dict(dist_cfg=dict(timeout=15))))) == 15.0
    monkeypatch.setattr(torch.distributed, 'is_initialized', lambda: True)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    cfg = Config(dict(env_cfg=dict(dist_cfg=dict(backend='nccl'))))
    assert launcher.setup_cpu_distributed(cfg, 'pytorch')
    assert cfg.env_cfg.dist_cfg.timeout == launcher.DEFAULT_GLOO_TIMEOUT_S == 300
    assert 'timeout is not set: a collective waits at most 300 s' in capsys.readouterr().out
    cfg = Config(dict(env_cfg=dict(dist_cfg=dict(timeout=42))))
    launcher.setup_cpu_distributed(cfg, 'pytorch')
    assert cfg.env_cfg.dist_cfg.timeout == 42


# --------------------------------------------------------------------------- slow: subprocesses


def _start(args: List[str], log: Path, cwd: Optional[Path] = None,
           env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    """Start a command in its own process group, output to ``log``."""
    with open(log, 'wb') as out:
        return subprocess.Popen(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)


def _train_cmd(config: Path, *args: str) -> List[str]:
    return [sys.executable, str(TOOLS / 'train.py'), str(config), *args]


def _wait_for(condition, timeout: float, proc: Optional[subprocess.Popen] = None) -> bool:
    """Poll ``condition`` every 20 ms; False on timeout or when ``proc`` has ended."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        if proc is not None and proc.poll() is not None:
            return bool(condition())
        time.sleep(0.02)
    return False


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _run(args: List[str], cwd: Optional[Path] = None,
         env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=SUBPROCESS_TIMEOUT_S)


BULKY_HOOK = '''\
import torch
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class BulkyCheckpointHook(Hook):
    """Adds 16 MB to every checkpoint so that saving takes a noticeable time."""

    def before_save_checkpoint(self, runner, checkpoint):
        checkpoint['bulk'] = torch.ones(4_000_000)
'''


def _assert_work_dir_consistent(work_dir: Path) -> None:
    for path in work_dir.glob('*.pth'):
        checkpoint = load_checkpoint_file(str(path))  # raises on a truncated file
        assert checkpoint['bulk'].numel() == 4_000_000, path
    if (work_dir / 'last_checkpoint').exists():
        named = Path((work_dir / 'last_checkpoint').read_text())
        assert named.is_file(), f'last_checkpoint names {named}, which does not exist'
        load_checkpoint_file(str(named))


@pytest.mark.slow
def test_sigkill_while_saving_never_leaves_a_broken_checkpoint(
        tiny_setup: Dict[str, Path], tmp_path: Path) -> None:
    """Kill training with SIGKILL while it saves (and at a random moment), 3 times, then resume.

    Each checkpoint carries 16 MB so that a save lasts long enough to be hit; two kills wait
    for a complete new checkpoint and then for the temporary file of the next one to appear,
    i.e. land in the middle of a write.
    """
    (tmp_path / 'bulky_hook.py').write_text(BULKY_HOOK)
    config = tmp_path / 'bulky.py'
    config.write_text(f"_base_ = [{str(tiny_setup['config'])!r}]\n"
                      "custom_imports = dict(imports=['mmpoly.models', 'bulky_hook'], "
                      'allow_failed_imports=False)\n'
                      "custom_hooks = [dict(type='BulkyCheckpointHook')]\n"
                      "default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))\n"
                      # long enough that no attempt can finish before it is killed
                      'train_cfg = dict(max_epochs=100)\n')
    env = {'PYTHONPATH': f'{tmp_path}{os.pathsep}{os.environ.get("PYTHONPATH", "")}'}
    work_dir = tmp_path / 'work'
    rng = random.Random(0)
    kills_during_write = 0
    logs = []
    for attempt in range(3):
        log = tmp_path / f'run{attempt}.log'
        before = set(work_dir.glob('*.pth')) if work_dir.is_dir() else set()
        leftovers = set(_litter(work_dir)) if work_dir.is_dir() else set()
        proc = _start(_train_cmd(config, '--work-dir', str(work_dir), '--no-validate',
                                 '--resume'), log, env=env)
        try:
            if attempt % 2 == 0:  # kill while this run writes its second checkpoint
                _wait_for(lambda: set(work_dir.glob('*.pth')) - before, SUBPROCESS_TIMEOUT_S,
                          proc)
                saving = _wait_for(lambda: set(_litter(work_dir)) - leftovers,
                                   SUBPROCESS_TIMEOUT_S, proc)
                kills_during_write += saving
            else:  # kill at a random moment of training
                _wait_for(lambda: 'Epoch(train)' in _read(log), SUBPROCESS_TIMEOUT_S, proc)
                time.sleep(rng.uniform(0.0, 1.5))
            assert proc.poll() is None, f'run {attempt} ended before it was killed:\n' + \
                log.read_text()[-3000:]
        finally:
            _kill_group(proc)
        logs.append(log.read_text())
        _assert_work_dir_consistent(work_dir)
    assert kills_during_write >= 1
    assert any('Taking over the stale lock' in text for text in logs[1:])

    # resume and train one more epoch than the newest complete checkpoint holds. A kill between
    # a checkpoint's rename and the write of last_checkpoint (its temporary file is litter too)
    # can leave no last_checkpoint at all: resume then takes the newest epoch_*.pth.
    pointer = work_dir / 'last_checkpoint'
    newest = pointer.read_text() if pointer.exists() else str(max(
        work_dir.glob('epoch_*.pth'), key=lambda p: int(re.search(r'(\d+)\.pth$', p.name)[1])))
    done = int(re.search(r'epoch_(\d+)\.pth$', newest)[1])
    proc = _run(_train_cmd(config, '--work-dir', str(work_dir), '--no-validate', '--resume',
                           '--cfg-options', f'train_cfg.max_epochs={done + 1}'), env=env)
    assert proc.returncode == 0, proc.stdout[-4000:]
    named = (work_dir / 'last_checkpoint').read_text()
    assert f'Auto resumed from the latest checkpoint {work_dir / f"epoch_{done}.pth"}.' in \
        proc.stdout, proc.stdout[-3000:]
    assert f'resumed epoch: {done}' in proc.stdout, proc.stdout[-3000:]
    assert named == str(work_dir / f'epoch_{done + 1}.pth')
    _assert_work_dir_consistent(work_dir)
    assert _litter(work_dir) == [] and not (work_dir / LOCK_FILENAME).exists()


@pytest.mark.slow
def test_auto_resume_skips_a_truncated_newest_checkpoint(tiny_setup: Dict[str, Path],
                                                         tmp_path: Path) -> None:  # noqa: F811
    work_dir = tmp_path / 'work'
    work_dir.mkdir()
    good = work_dir / 'epoch_1.pth'
    shutil.copy(tiny_setup['work_dir'] / 'epoch_1.pth', good)
    (work_dir / 'epoch_2.pth').write_bytes(good.read_bytes()[:2000])  # newer, truncated
    proc = train(str(tiny_setup['config']), '--work-dir', str(work_dir), '--resume',
                 '--no-validate', '--cfg-options', 'train_cfg.max_epochs=2')
    assert re.search(r'--resume skipped .*epoch_2\.pth \(in the work_dir\): does not load',
                     proc.stdout), proc.stdout[-3000:]
    assert f'Auto resumed from the latest checkpoint {good}.' in proc.stdout
    assert 'resumed epoch: 1, iter: 4' in proc.stdout
    assert 'Epoch(train) [1]' not in proc.stdout and 'Epoch(train) [2][4/4]' in proc.stdout


@pytest.mark.slow
def test_resume_refuses_when_nothing_loads_or_fits(tiny_setup: Dict[str, Path],
                                                   tmp_path: Path) -> None:  # noqa: F811
    """No loadable checkpoint in the work_dir, and a foreign --resume PATH: errors, no training."""
    work_dir = tmp_path / 'work'
    work_dir.mkdir()
    (work_dir / 'epoch_1.pth').write_bytes(
        (tiny_setup['work_dir'] / 'epoch_1.pth').read_bytes()[:2000])
    proc = _run(_train_cmd(tiny_setup['config'], '--work-dir', str(work_dir), '--resume'))
    assert proc.returncode != 0
    assert 'none can be resumed' in proc.stdout and 'epoch_1.pth (in the work_dir): does not ' \
        'load' in proc.stdout, proc.stdout[-3000:]
    assert 'Epoch(train)' not in proc.stdout and 'Traceback' not in proc.stdout

    bare = tmp_path / 'bare.pth'
    checkpoint = load_checkpoint_file(str(tiny_setup['work_dir'] / 'epoch_1.pth'))
    torch.save(checkpoint['state_dict'], bare)
    proc = _run(_train_cmd(tiny_setup['config'], '--work-dir', str(tmp_path / 'w2'),
                           '--resume', str(bare)))
    assert proc.returncode != 0
    assert f'cannot resume from {bare}: it is a bare state dict' in proc.stdout, \
        proc.stdout[-3000:]
    assert "KeyError" not in proc.stdout and 'Epoch(train)' not in proc.stdout


@pytest.mark.slow
def test_a_new_run_in_a_used_work_dir_and_a_foreign_load_from_are_refused(
        tiny_setup: Dict[str, Path], tmp_path: Path) -> None:  # noqa: F811
    """tools/train.py without --resume on a work_dir holding a run's checkpoints, --resume of
    that finished run, and a load_from of another model's checkpoint: each stops with one
    message before training; --non-strict trains from the matching weights with a warning."""
    config = tiny_setup['config']
    work_dir = tmp_path / 'used'
    shutil.copytree(tiny_setup['work_dir'], work_dir)
    proc = _run(_train_cmd(config, '--work-dir', str(work_dir)))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        f"tools/train.py: error: work_dir '{work_dir}' holds the checkpoints of an earlier run "
        '(epoch_1.pth, last_checkpoint); a new run there would overwrite them and mix its '
        'checkpoints with theirs. To continue that run, add --resume; for a new run, choose '
        'another folder with --work-dir DIR (or move this one away)'], proc.stdout[-3000:]
    assert not (work_dir / LOCK_FILENAME).exists()

    proc = _run(_train_cmd(config, '--work-dir', str(work_dir), '--resume'))
    checkpoint = work_dir / 'epoch_1.pth'  # last_checkpoint names the original folder's file
    assert proc.returncode == 1
    assert (f'tools/train.py: error: cannot resume from {checkpoint}: its run is finished: it '
            'was saved at epoch 1, and the config trains to train_cfg.max_epochs=1, so a '
            'resumed run would train nothing (to train longer, raise train_cfg.max_epochs). To '
            'train again, start a new run in another --work-dir (without --resume); to '
            f'fine-tune from its weights, start one with --cfg-options load_from={checkpoint}.'
            ) in proc.stdout, proc.stdout[-3000:]
    assert 'Epoch(train)' not in proc.stdout and 'Traceback' not in proc.stdout

    wider = ['--no-validate', '--cfg-options', f'load_from={checkpoint}',
             'model.backbone.stage_channels=[8,32]', 'model.head.in_channels=32']
    proc = _run(_train_cmd(config, '--work-dir', str(tmp_path / 'wider'), *wider))
    assert proc.returncode == 1
    error = proc.stdout[proc.stdout.index('tools/train.py: error: '):].splitlines()
    assert error[0] == (f'tools/train.py: error: The weights in checkpoint {checkpoint} do not '
                        'fit the model:'), proc.stdout[-3000:]
    assert any(re.search(r'backbone\.layer2\.\S+: \[16, ', line) for line in error), error
    assert error[-1] == ("Is it a checkpoint of this config's model? To start from the matching "
                         'weights anyway (the others keep their initial values), load it '
                         'non-strictly: tools/train.py --non-strict.'), error
    assert 'Epoch(train)' not in proc.stdout and 'Traceback' not in proc.stdout
    assert not list((tmp_path / 'wider').glob('*.pth'))

    proc = _run(_train_cmd(config, '--work-dir', str(tmp_path / 'wider2'), '--non-strict', *wider))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f'NON-STRICT LOAD: the weights in checkpoint {checkpoint} do not fit' in proc.stdout
    assert (tmp_path / 'wider2' / 'epoch_1.pth').is_file()


@pytest.mark.slow
def test_mid_epoch_iteration_checkpoint_reruns_the_epoch(tiny_setup: Dict[str, Path],
                                                         tmp_path: Path) -> None:  # noqa: F811
    """What the --resume help documents for mmengine 0.10.7: the interrupted epoch starts over."""
    hook = ['default_hooks.checkpoint.by_epoch=False', 'default_hooks.checkpoint.interval=2']
    first = tmp_path / 'first'
    train(str(tiny_setup['config']), '--work-dir', str(first), '--no-validate',
          '--cfg-options', *hook)
    assert (first / 'iter_2.pth').is_file()
    proc = train(str(tiny_setup['config']), '--work-dir', str(tmp_path / 'again'),
                 '--no-validate', '--resume', str(first / 'iter_2.pth'), '--cfg-options', *hook)
    log = proc.stdout[proc.stdout.index('resumed epoch: 0, iter: 2'):]
    assert 'Epoch(train) [1][1/4]' in log and 'Epoch(train) [1][4/4]' in log  # epoch rerun
    final = load_checkpoint_file(str(tmp_path / 'again' / 'iter_6.pth'))  # 2 + 4 > max_iters 4
    assert final['meta']['iter'] == 6
    assert final['message_hub']['runtime_info']['eta'] < 0
    # the rerun batches are the same ones: the shuffle depends on seed and epoch only
    orders = []
    for _ in range(2):
        sampler = DefaultSampler(list(range(64)), shuffle=True, seed=0)
        sampler.set_epoch(0)
        orders.append(list(sampler))
    assert orders[0] == orders[1] != list(range(64))


@pytest.mark.slow
def test_second_run_on_a_busy_work_dir_is_refused(tiny_setup: Dict[str, Path],
                                                  tmp_path: Path) -> None:  # noqa: F811
    work_dir = tmp_path / 'busy'
    first = _start(_train_cmd(tiny_setup['config'], '--work-dir', str(work_dir), '--no-validate',
                              '--cfg-options', 'train_cfg.max_epochs=200'), tmp_path / 'first.log')
    try:
        assert _wait_for(lambda: f'"pid": {first.pid}' in _read(work_dir / LOCK_FILENAME),
                         SUBPROCESS_TIMEOUT_S, first), _read(tmp_path / 'first.log')[-3000:]
        second = _run(_train_cmd(tiny_setup['config'], '--work-dir', str(work_dir)))
        assert first.poll() is None, 'the first run should still be training'
    finally:
        _kill_group(first)
    assert second.returncode != 0
    assert 'is in use by another training run' in second.stdout, second.stdout[-3000:]
    assert f'PID {first.pid} on host {socket.gethostname()}, started ' in second.stdout
    assert 'train.py' in second.stdout and 'Traceback' not in second.stdout


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (FileNotFoundError, UnicodeDecodeError):
        return ''


def _children(pid: int) -> List[int]:
    """The PIDs of the direct children of ``pid`` (from /proc)."""
    children = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                stat = Path(f'/proc/{entry}/stat').read_text()
            except OSError:
                continue
            if int(stat.rsplit(')', 1)[1].split()[1]) == pid:
                children.append(int(entry))
    return children


def _worker_of_rank(agent: int, rank: int) -> Optional[int]:
    for child in _children(agent):
        try:
            environ = Path(f'/proc/{child}/environ').read_bytes().split(b'\0')
        except OSError:
            continue
        if f'RANK={rank}'.encode() in environ:
            return child
    return None


@pytest.mark.slow
@pytest.mark.parametrize('sig', ['SIGSTOP', 'SIGKILL'])
def test_dist_job_ends_when_a_worker_stops_or_dies(tiny_setup: Dict[str, Path], tmp_path: Path,
                                                   sig: str) -> None:  # noqa: F811
    """dist_train.sh with 2 gloo workers: a stopped worker ends the job within the timeout
    (10 s) plus torchrun's 30 s grace between SIGTERM (which a stopped process does not act
    on) and SIGKILL; a killed one ends it at once."""
    log = tmp_path / 'dist.log'
    job = _start(['bash', str(TOOLS / 'dist_train.sh'), str(tiny_setup['config']), '2',
                  '--work-dir', str(tmp_path / 'work'), '--no-validate', '--cfg-options',
                  'train_cfg.max_epochs=500', 'env_cfg.dist_cfg.timeout=10'], log, cwd=tmp_path,
                 env={'PYTHON': sys.executable, 'PORT': str(free_port())})
    worker = None
    try:
        assert _wait_for(lambda: re.search(r'Epoch\(train\) +\[2\]', _read(log)),
                         SUBPROCESS_TIMEOUT_S, job), _read(log)[-3000:]
        worker = _worker_of_rank(job.pid, 1)
        assert worker is not None
        start = time.monotonic()
        os.kill(worker, getattr(signal, sig))
        job.wait(timeout=90)
        elapsed = time.monotonic() - start
    finally:
        _kill_group(job)
        if worker is not None:
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert job.returncode != 0
    text = _read(log)
    if sig == 'SIGSTOP':
        assert elapsed < 60, f'{elapsed:.1f} s'
        assert 'Timed out waiting 10000ms' in text, text[-3000:]  # gloo, the configured 10 s
    else:
        assert elapsed < 10, f'{elapsed:.1f} s'
