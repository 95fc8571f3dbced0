"""Unit tests of mmpoly.engine: safe checkpoint loading and the CPU distributed launcher."""
import os
import pickle
import weakref
import zipfile
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple

import numpy as np
import pytest
import torch
from helpers import experiment_name, load_tool
from mmengine.config import Config
from mmengine.evaluator import BaseMetric
from mmengine.logging import HistoryBuffer
from mmengine.model import BaseModel, MMDistributedDataParallel
from mmengine.runner import Runner
from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint
from test_tools import free_port, make_fashion_mnist_subset, write_config
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset

import mmpoly.engine  # noqa: F401  (installs the safe loader)
from mmpoly.engine import checkpoint as ckpt_mod
from mmpoly.engine import launcher
from mmpoly.utils.startup import StartupError, startup_errors

# --------------------------------------------------------------------------- a tiny Runner job


class ToyDataset(Dataset):
    metainfo = dict(classes=('neg', 'pos'))

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(index)
        return dict(inputs=torch.randn(4, generator=gen), target=torch.tensor(index % 2.0))


class ToyModel(BaseModel):

    def __init__(self, init_cfg: dict = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.fc = nn.Linear(4, 1)
        self.bn = nn.BatchNorm1d(1)

    def forward(self, inputs: List[torch.Tensor], target: List[torch.Tensor],
                mode: str = 'tensor'):
        x, y = torch.stack(list(inputs)), torch.stack(list(target))
        out = self.bn(self.fc(x)).squeeze(-1)
        if mode == 'loss':
            return dict(loss=((out - y)**2).mean())
        return [dict(pred=o, gt=t) for o, t in zip(out, y)]


class ToyMetric(BaseMetric):

    def process(self, data_batch, data_samples) -> None:
        self.results.extend((float(s['pred']), float(s['gt'])) for s in data_samples)

    def compute_metrics(self, results: list) -> dict:
        return dict(count=len(results), mse=float(np.mean([(p - g)**2 for p, g in results])))


def toy_runner(work_dir: Path, max_epochs: int = 1, **cfg) -> Runner:
    """A Runner with the usual hooks (CheckpointHook) writing real mmengine checkpoints."""
    return Runner(
        model=ToyModel(),
        work_dir=str(work_dir),
        train_dataloader=dict(dataset=ToyDataset(), batch_size=4,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        val_dataloader=dict(dataset=ToyDataset(), batch_size=4,
                            sampler=dict(type='DefaultSampler', shuffle=False)),
        val_evaluator=[ToyMetric()],
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01, momentum=0.9)),
        param_scheduler=dict(type='MultiStepLR', milestones=[1]),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs, val_interval=1),
        val_cfg=dict(),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1)),
        randomness=dict(seed=0),
        experiment_name=experiment_name('toy'),
        **cfg)


@pytest.fixture(scope='module')
def runner_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """epoch_1.pth written by mmengine's CheckpointHook after one epoch (with validation)."""
    work_dir = tmp_path_factory.mktemp('toy_run')
    toy_runner(work_dir).train()
    path = work_dir / 'epoch_1.pth'
    assert path.is_file()
    return path


class Arbitrary:
    """A class no allow-list contains: loading it needs full unpickling."""

    def __init__(self, value: int) -> None:
        self.value = value


class RunsCommand:
    """Pickles as ``os.system(command)``: the classic malicious checkpoint."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command, )


class FetchesAttribute:
    """Pickles as ``getattr(HistoryBuffer, name)``, like HistoryBuffer's own methods do."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self):
        return getattr, (HistoryBuffer, self.name)


# --------------------------------------------------------------------------- safe loading


def test_loader_installed_for_local_paths_only() -> None:
    assert ckpt_mod.safe_checkpoint_loader_installed()
    assert CheckpointLoader._get_checkpoint_loader('/abs/epoch_1.pth') is \
        ckpt_mod.load_from_local_safe
    assert CheckpointLoader._get_checkpoint_loader('https://x/y.pth') is not \
        ckpt_mod.load_from_local_safe
    mmpoly.engine.install_safe_checkpoint_loader()  # idempotent
    assert ckpt_mod.safe_checkpoint_loader_installed()


def test_plain_torch_load_fails_on_mmengine_checkpoint(runner_checkpoint: Path) -> None:
    """The problem being fixed: torch >= 2.6 refuses mmengine's own checkpoints by default."""
    with pytest.raises(pickle.UnpicklingError, match='HistoryBuffer|numpy'):
        torch.load(runner_checkpoint)
    unsafe = set(torch.serialization.get_unsafe_globals_in_checkpoint(str(runner_checkpoint)))
    assert 'mmengine.logging.history_buffer.HistoryBuffer' in unsafe


def test_mmengine_checkpoint_loads_through_checkpoint_loader(runner_checkpoint: Path) -> None:
    before = set(torch.serialization.get_safe_globals())
    for loaded in (CheckpointLoader.load_checkpoint(str(runner_checkpoint), map_location='cpu'),
                   _load_checkpoint(str(runner_checkpoint), map_location='cpu')):
        assert set(loaded) >= {'meta', 'state_dict', 'message_hub', 'optimizer'}
        assert loaded['meta']['epoch'] == 1
        assert loaded['meta']['dataset_meta'] == {'classes': ('neg', 'pos')}
        hub = loaded['message_hub']
        loss = hub['log_scalars']['train/loss']
        assert isinstance(loss, HistoryBuffer) and np.isfinite(loss.mean())
        assert loss.statistics('max') >= loss.statistics('min')
        assert isinstance(hub['runtime_info']['eta'], np.floating)
        assert torch.is_tensor(loaded['state_dict']['fc.weight'])
    # the allow-list is scoped to the load: nothing leaks into torch's global list
    assert set(torch.serialization.get_safe_globals()) == before


def test_allow_list_is_minimal(runner_checkpoint: Path) -> None:
    """Every entry is needed by a real checkpoint, except the numpy 1.x spellings."""
    numpy1 = {'numpy.core.multiarray._reconstruct', 'numpy.core.multiarray.scalar'}
    for entry in ckpt_mod.MMENGINE_CHECKPOINT_GLOBALS:
        if isinstance(entry, tuple) and entry[1] in numpy1:
            continue
        rest = [e for e in ckpt_mod.MMENGINE_CHECKPOINT_GLOBALS if e is not entry]
        with torch.serialization.safe_globals(rest), pytest.raises(pickle.UnpicklingError):
            torch.load(runner_checkpoint, weights_only=True)


def rewrite_pickle(source: Path, target: Path, edit: Callable[[bytes], bytes]) -> None:
    """Copy the torch zip checkpoint ``source`` to ``target`` with ``edit`` applied to data.pkl."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, 'w') as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            dst.writestr(info.filename, edit(data) if info.filename.endswith('/data.pkl')
                         else data)


def test_numpy1_checkpoint_loads(runner_checkpoint: Path, tmp_path: Path) -> None:
    """A checkpoint written under numpy 1.x names numpy.core.multiarray instead."""
    old = tmp_path / 'numpy1.pth'

    def to_numpy1(data: bytes) -> bytes:
        assert b'numpy._core.multiarray' in data
        return data.replace(b'numpy._core.multiarray', b'numpy.core.multiarray')

    rewrite_pickle(runner_checkpoint, old, to_numpy1)
    assert 'numpy.core.multiarray._reconstruct' in \
        torch.serialization.get_unsafe_globals_in_checkpoint(str(old))
    loaded = CheckpointLoader.load_checkpoint(str(old), map_location='cpu')
    assert loaded['message_hub']['log_scalars']['train/loss'].mean() == pytest.approx(
        _load_checkpoint(str(runner_checkpoint))['message_hub']['log_scalars']
        ['train/loss'].mean())


def test_runner_resume_and_load_from(runner_checkpoint: Path, tmp_path: Path) -> None:
    """Runner.resume (resume=True, load_from=...) continues at epoch 2 from the checkpoint."""
    runner = toy_runner(tmp_path / 'resume', max_epochs=2, resume=True,
                        load_from=str(runner_checkpoint))
    runner.train()
    assert runner.epoch == 2 and runner.iter == 8
    assert (tmp_path / 'resume' / 'epoch_2.pth').is_file()
    assert not (tmp_path / 'resume' / 'epoch_1.pth').exists()  # epoch 1 was not rerun


def test_pretrained_init_cfg(runner_checkpoint: Path) -> None:
    """init_cfg=dict(type='Pretrained') goes through mmengine's CheckpointLoader too."""
    model = ToyModel(init_cfg=dict(type='Pretrained', checkpoint=str(runner_checkpoint)))
    model.init_weights()
    state = _load_checkpoint(str(runner_checkpoint))['state_dict']
    assert torch.equal(model.fc.weight, state['fc.weight'])
    assert torch.equal(model.bn.running_mean, state['bn.running_mean'])


def test_arbitrary_class_is_refused_then_trusted(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt_dir = tmp_path / 'untrusted'
    ckpt_dir.mkdir()
    path = ckpt_dir / 'custom.pth'
    torch.save(dict(state_dict=dict(w=torch.ones(2)), extra=Arbitrary(7)), path)
    monkeypatch.delenv(ckpt_mod.TRUSTED_CHECKPOINTS_ENV, raising=False)

    with pytest.raises(ckpt_mod.UnsafeCheckpointError) as info:
        CheckpointLoader.load_checkpoint(str(path), map_location='cpu')
    error = info.value
    assert isinstance(error, pickle.UnpicklingError)
    assert error.refused_globals == [f'{__name__}.Arbitrary']
    message = str(error)
    assert f'{__name__}.Arbitrary' in message  # which
    assert 'weights_only=True' in message and 'arbitrary code' in message  # why
    assert ckpt_mod.TRUSTED_CHECKPOINTS_ENV in message  # what to do
    assert str(path) in message

    for trusted in (str(path), str(ckpt_dir), f'/nonexistent{os.pathsep}{ckpt_dir}/'):
        monkeypatch.setenv(ckpt_mod.TRUSTED_CHECKPOINTS_ENV, trusted)
        loaded = _load_checkpoint(str(path), map_location='cpu')
        assert isinstance(loaded['extra'], Arbitrary) and loaded['extra'].value == 7

    # neither a sibling directory with a common prefix nor another file is trusted
    monkeypatch.setenv(ckpt_mod.TRUSTED_CHECKPOINTS_ENV,
                       f'{tmp_path / "untrust"}{os.pathsep}{ckpt_dir / "other.pth"}')
    with pytest.raises(ckpt_mod.UnsafeCheckpointError):
        _load_checkpoint(str(path), map_location='cpu')


def test_code_execution_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ckpt_mod.TRUSTED_CHECKPOINTS_ENV, raising=False)
    marker = tmp_path / 'pwned'
    path = tmp_path / 'evil.pth'
    torch.save(dict(state_dict={}, payload=RunsCommand(f'touch {marker}')), path)
    with pytest.raises(ckpt_mod.UnsafeCheckpointError) as info:
        _load_checkpoint(str(path))
    assert any(name.endswith('.system') for name in info.value.refused_globals)
    assert not marker.exists()


@pytest.mark.parametrize('name', ['__init__', 'register_statistics', '__class__'])
def test_getattr_is_restricted_to_history_buffer_statistics(tmp_path: Path, name: str) -> None:
    path = tmp_path / 'getattr.pth'
    torch.save(dict(payload=FetchesAttribute(name)), path)
    with pytest.raises(ckpt_mod.UnsafeCheckpointError, match='getattr'):
        _load_checkpoint(str(path))
    # the four statistics a HistoryBuffer pickles do resolve
    torch.save(dict(payload=FetchesAttribute('mean')), path)
    assert _load_checkpoint(str(path))['payload'] is HistoryBuffer.mean


def test_plain_state_dict_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / 'weights.pth'
    torch.save(dict(state_dict=dict(w=torch.arange(3))), path)
    assert torch.equal(ckpt_mod.load_checkpoint_file(str(path))['state_dict']['w'],
                       torch.arange(3))
    with pytest.raises(FileNotFoundError):
        ckpt_mod.load_checkpoint_file(str(tmp_path / 'missing.pth'))


def test_user_safe_globals_survive_a_load(tmp_path: Path) -> None:
    """Leaving the scoped allow-list does not remove a global the user had added."""
    path = tmp_path / 'weights.pth'
    torch.save(dict(w=torch.ones(1)), path)
    torch.serialization.add_safe_globals([np.ndarray])
    try:
        ckpt_mod.load_checkpoint_file(str(path))
        assert np.ndarray in torch.serialization.get_safe_globals()
    finally:
        torch.serialization._weights_only_unpickler._remove_safe_globals([np.ndarray])


# --------------------------------------------------------------------------- launcher


def test_resolve_dist_env_torchrun() -> None:
    env = dict(RANK='3', WORLD_SIZE='4', LOCAL_RANK='1', MASTER_ADDR='10.0.0.1',
               MASTER_PORT='29999')
    assert launcher.resolve_dist_env('pytorch', env) == launcher.DistEnv(
        3, 4, 1, '10.0.0.1', '29999')
    with pytest.raises(RuntimeError, match='MASTER_PORT'):
        launcher.resolve_dist_env('pytorch', {k: v for k, v in env.items() if k != 'MASTER_PORT'})


def test_resolve_dist_env_slurm_and_mpi() -> None:
    slurm = dict(SLURM_PROCID='5', SLURM_NTASKS='8', SLURM_LOCALID='1',
                 SLURM_NODELIST='node[1-2]', MASTER_ADDR='node1')
    assert launcher.resolve_dist_env('slurm', slurm) == launcher.DistEnv(
        5, 8, 1, 'node1', '29500')
    mpi = dict(OMPI_COMM_WORLD_RANK='1', OMPI_COMM_WORLD_SIZE='2',
               OMPI_COMM_WORLD_LOCAL_RANK='1', MASTER_ADDR='h', MASTER_PORT='1234')
    assert launcher.resolve_dist_env('mpi', mpi) == launcher.DistEnv(1, 2, 1, 'h', '1234')
    with pytest.raises(RuntimeError, match='MASTER_ADDR'):
        launcher.resolve_dist_env('mpi', {k: v for k, v in mpi.items() if k != 'MASTER_ADDR'})
    with pytest.raises(ValueError):
        launcher.resolve_dist_env('none', {})


def test_setup_cpu_distributed_noop_without_launcher() -> None:
    cfg = Config(dict(model=dict(type='X')))
    assert launcher.setup_cpu_distributed(cfg, 'none') is False
    assert 'model_wrapper_cfg' not in cfg
    with pytest.raises(ValueError):
        launcher.setup_cpu_distributed(cfg, 'torchrun')


@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torchrun's environment for one process on a free port (undone after the test)."""
    for name, value in dict(RANK='0', WORLD_SIZE='1', LOCAL_RANK='0', MASTER_ADDR='127.0.0.1',
                            MASTER_PORT=str(free_port())).items():
        monkeypatch.setenv(name, value)
    for name in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
        # a distributed Runner exports these when unset: unset them now and have monkeypatch
        # restore their values (or their absence) afterwards. delenv alone records nothing for
        # a variable that is unset, and the Runner's value would then stay.
        monkeypatch.setenv(name, '1')
        monkeypatch.delenv(name)
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class DDPWatch(NamedTuple):
    made: List[weakref.ref]  # every DDP wrapper built in the test, by weak reference
    seen: List[int]  # at each destroy_process_group: how many of them were alive


@pytest.fixture
def ddp_watch(monkeypatch: pytest.MonkeyPatch) -> DDPWatch:
    """Records the DDP wrappers built in the test and, at each ``destroy_process_group``, how
    many of them are still alive."""
    watch = DDPWatch([], [])
    ddp_init = DistributedDataParallel.__init__
    destroy = torch.distributed.destroy_process_group

    def recorded_init(self, *args, **kwargs) -> None:
        ddp_init(self, *args, **kwargs)
        watch.made.append(weakref.ref(self))

    def checked_destroy(*args, **kwargs) -> None:
        watch.seen.append(sum(ref() is not None for ref in watch.made))
        destroy(*args, **kwargs)

    monkeypatch.setattr(DistributedDataParallel, '__init__', recorded_init)
    monkeypatch.setattr(torch.distributed, 'destroy_process_group', checked_destroy)
    return watch


@pytest.mark.skipif(torch.cuda.is_available(), reason='tests the CPU-only path')
def test_setup_cpu_distributed_single_process_runner(tmp_path: Path, world_of_one: None) -> None:
    """A world of one: gloo group before the Runner, which then skips init_dist, DDP on CPU."""
    cfg = Config(dict(env_cfg=dict(dist_cfg=dict(backend='nccl', timeout=60))))
    assert launcher.setup_cpu_distributed(cfg, 'pytorch') is True
    assert torch.distributed.is_initialized()
    assert torch.distributed.get_backend() == 'gloo'
    assert cfg.env_cfg.dist_cfg.backend == 'gloo'
    assert cfg.model_wrapper_cfg == dict(type='MMDistributedDataParallel', device_ids=None,
                                         broadcast_buffers=False,
                                         find_unused_parameters=False)
    # Runner.wrap_model reads model_wrapper_cfg from the config (as Runner.from_cfg passes)
    runner = toy_runner(tmp_path, launcher='pytorch', env_cfg=cfg.env_cfg, cfg=cfg)
    assert runner.distributed and runner.world_size == 1
    assert isinstance(runner.model, MMDistributedDataParallel)
    assert runner.model.device_ids is None
    runner.train()
    assert runner.message_hub.get_scalar('val/count').current() == 16
    assert (tmp_path / 'epoch_1.pth').is_file()
    launcher.shutdown_distributed()  # what tools/train.py and tools/test.py do at the end
    assert not torch.distributed.is_initialized()
    launcher.shutdown_distributed()  # a no-op without a process group


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason='tests the CPU-only (gloo) path')
@pytest.mark.parametrize('tool', ['train', 'test'])
def test_distributed_tools_free_the_ddp_wrapper_before_ending_the_group(
        tool: str, tmp_path: Path, world_of_one: None, ddp_watch: DDPWatch) -> None:
    """tools/train.py and tools/test.py (--launcher pytorch, a world of one, in this process)
    leave no DistributedDataParallel wrapper alive when they destroy the process group. A
    finished Runner's loops refer back to it, and this reference cycle could keep the wrapper
    alive until interpreter shutdown. Freed only there, the wrapper can abort the process after
    its work is done ("terminate called without an active exception"): with torch 2.14.1 and
    gloo, 6 of 60 two-process runs of a 10-line DDP script whose wrapper sat in such a cycle,
    none of 60 with mmpoly's shutdown_distributed. It is the likely cause of a completed
    two-process Mask R-CNN dist_train.sh run of tests/test_detection.py that exited 134."""
    config = write_config(tmp_path, make_fashion_mnist_subset(tmp_path / 'data'))
    train_dir = tmp_path / 'train'
    load_tool('train').main([str(config), '--work-dir', str(train_dir), '--launcher', 'pytorch',
                             '--cfg-options', 'train_cfg.max_epochs=1'])
    if tool == 'test':
        ddp_watch.made.clear()
        ddp_watch.seen.clear()
        load_tool('test').main([str(config), str(train_dir / 'epoch_1.pth'), '--work-dir',
                                str(tmp_path / 'test'), '--launcher', 'pytorch'])
    assert len(ddp_watch.made) == 1, ddp_watch  # the tool did wrap its model
    assert ddp_watch.seen == [0] and not torch.distributed.is_initialized()


class _FinishedRun:
    """A run that built its DDP wrapper (kept in a reference cycle, as a Runner's)."""

    def __init__(self) -> None:
        self.model = DistributedDataParallel(nn.Linear(2, 2))
        self.me = self

    def refuse(self) -> None:
        """A refusal raised after the build: this frame's locals hold the run."""
        try:
            raise ValueError('the checkpoint does not fit')
        except ValueError as error:
            raise StartupError(str(error)) from error


@pytest.mark.skipif(torch.cuda.is_available(), reason='tests the CPU-only (gloo) path')
def test_a_refusal_after_the_runner_was_built_frees_it_and_ends_the_group(
        world_of_one: None, ddp_watch: DDPWatch, capsys: pytest.CaptureFixture) -> None:
    """A rank that stops on a StartupError raised after its Runner and DDP wrapper were built
    (tools/train.py and tools/test.py end in startup_errors) frees them, although the error's
    traceback holds the frame that built them, and destroys the process group before exiting
    with status 1: a wrapper freed only at interpreter shutdown can abort the rank (see the
    test above), and torchrun would then report a signal."""
    torch.distributed.init_process_group('gloo')
    with pytest.raises(SystemExit) as exit_info:
        with startup_errors('tools/train.py', 'pytorch'):
            _FinishedRun().refuse()
    assert exit_info.value.code == 1 and len(ddp_watch.made) == 1
    assert ddp_watch.seen == [0] and not torch.distributed.is_initialized()
    assert capsys.readouterr().err == 'tools/train.py: error: the checkpoint does not fit\n'


def test_existing_ddp_wrapper_cfg_gets_no_device_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config's own DDP wrapper keeps its options and gets device_ids=None."""
    monkeypatch.setattr(torch.distributed, 'is_initialized', lambda: True)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    cfg = Config(dict(model_wrapper_cfg=dict(type='MMDistributedDataParallel',
                                             find_unused_parameters=True)))
    assert launcher.setup_cpu_distributed(cfg, 'pytorch')
    assert cfg.model_wrapper_cfg == dict(type='MMDistributedDataParallel',
                                         find_unused_parameters=True, device_ids=None)
    cfg = Config(dict(model_wrapper_cfg=dict(type='MMFullyShardedDataParallel')))
    launcher.setup_cpu_distributed(cfg, 'pytorch')
    assert 'device_ids' not in cfg.model_wrapper_cfg
