"""Start-up gaps closed: mistakes that used to be accepted without a word or to end in a traceback
after the Runner was built now end in one message before it (mmpoly.utils.startup,
tools/train.py, tools/test.py), and torchrun's busy master port is one line
(mmpoly.utils.dist_run).

The tools run in-process (``run_main``: the message on stderr, ``SystemExit(1)``), as in
tests/test_startup_errors.py.
"""
import socket
import sys
import traceback
from pathlib import Path
from typing import Tuple

import pytest
from helpers import CONFIGS, FASHION_MNIST, load_tool
from mmengine.config import Config
from test_datasets import make_imagenet
from test_startup_errors import run_main

from mmpoly.datasets import (LocalCIFAR10, LocalCIFAR100, LocalCocoDataset, LocalFashionMNIST,
                             SpeechCommands)
from mmpoly.utils import startup
from mmpoly.utils.startup import StartupError, check_cfg_options

MAIN_JOB = str(CONFIGS / 'pdc_resnet8-w16_1xb256-4e_fashion-mnist.py')
FASHION = str(CONFIGS / 'pdc_resnet8_1xb128-1400i_fashion-mnist.py')
FASHION_EPOCHS = str(CONFIGS / 'pdc_resnet8_1xb128_fashion-mnist.py')
CIFAR10 = str(CONFIGS / 'resnet18_1xb128_cifar10.py')
IMAGENET = str(CONFIGS / 'pdc_resnet18_8xb32_in1k.py')
MASK_RCNN = str(CONFIGS / 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py')
SPEECH = str(CONFIGS / 'pdc_resnet7_1xb128_speech-commands.py')
TAIL = '. A key is a dotted path into the config, list items by index (e.g. param_scheduler.0.end)'
NO_EFFECT = ("is not a top-level key of the config, nor one that mmengine's Runner or the tools "
             'read, so it would have no effect')
VARIABLE = ("is a variable of the config file, which nothing reads: mmengine put its value where "
            'the file uses it when it read the file, so setting it now would change nothing')


@pytest.fixture(scope='module')
def tools() -> Tuple[object, object]:
    return load_tool('train'), load_tool('test')


# --------------------------------------------------------------------------- --cfg-options


@pytest.mark.parametrize('option, value, message', [
    ('max_epochs', 1, f"max_epochs: 'max_epochs' {NO_EFFECT}; the config has 'max_epochs' "
     'inside: set --cfg-options train_cfg.max_epochs=1'),
    ('seed', 0, f"seed: 'seed' {NO_EFFECT}; the config has 'seed' inside: set --cfg-options "
     'randomness.seed=0'),
    ('batch_size', 64, f"batch_size: 'batch_size' {NO_EFFECT}; the config has 'batch_size' "
     'inside: set the one you mean among --cfg-options train_dataloader.batch_size=64 '
     'val_dataloader.batch_size=64 test_dataloader.batch_size=64'),
    ('lr', 0.1, f"lr: 'lr' {NO_EFFECT}; the config has 'lr' inside: set --cfg-options "
     'optim_wrapper.optimizer.lr=0.1'),
    ('epochs', 1, f"epochs: 'epochs' {NO_EFFECT}; the config has keys named like it inside: "
     'set --cfg-options train_cfg.max_epochs=1'),
    ('optimizer.lr', 0.1, f"optimizer.lr: 'optimizer' {NO_EFFECT} (close matches: "
     "optim_wrapper); the config has 'optimizer' inside: set --cfg-options "
     'optim_wrapper.optimizer.lr=0.1'),
    ('workdir', 'x', f"workdir: 'workdir' {NO_EFFECT} (close matches: work_dir)"),
])
def test_top_level_keys_the_config_lacks_are_refused_with_where_it_has_them(
        option: str, value: object, message: str) -> None:
    cfg = Config.fromfile(MAIN_JOB)
    with pytest.raises(StartupError) as error:
        check_cfg_options(cfg, {option: value})
    assert str(error.value) == f'unknown --cfg-options key: {message}{TAIL}'


def test_a_mistaken_top_level_key_is_one_message_of_the_tool(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The audit's command: --cfg-options max_epochs=1 (meant train_cfg.max_epochs) trained the
    config's 4 epochs without a word."""
    lines = run_main(tools[0], [MAIN_JOB, '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                                'max_epochs=1'], capsys)
    assert lines == [f"tools/train.py: error: unknown --cfg-options key: max_epochs: 'max_epochs' "
                     f"{NO_EFFECT}; the config has 'max_epochs' inside: set --cfg-options "
                     f'train_cfg.max_epochs=1{TAIL}'], lines
    assert not (tmp_path / 'w').exists()


@pytest.mark.parametrize('config, option, value, message', [
    (MAIN_JOB, 'data_root', '/data/fm', f"data_root: 'data_root' {VARIABLE}; set those you "
     'mean of the keys that hold its value: --cfg-options '
     'train_dataloader.dataset.data_root=/data/fm val_dataloader.dataset.data_root=/data/fm '
     'test_dataloader.dataset.data_root=/data/fm'),
    (CIFAR10, 'train_pipeline.1.prob', 1.0, f"train_pipeline.1.prob: 'train_pipeline' "
     f'{VARIABLE}; set those you mean of the keys that hold its value: --cfg-options '
     'train_dataloader.dataset.pipeline.1.prob=1.0'),
    (MAIN_JOB, 'train_pipeline', [], f"train_pipeline: 'train_pipeline' {VARIABLE}; no key "
     'that is read holds its value (the config set them otherwise afterwards); set the keys '
     'the run reads instead'),
    (str(CONFIGS / 'nl_resnet8_1xb128-1400i_fashion-mnist.py'), 'max_iters', 700,
     f"max_iters: 'max_iters' {VARIABLE}; set those you mean of the keys that hold its value: "
     '--cfg-options default_hooks.checkpoint.interval=700 param_scheduler.1.T_max=700 '
     'param_scheduler.1.end=700 train_cfg.max_iters=700 train_cfg.val_interval=700'),
])
def test_variables_of_the_config_file_are_refused_naming_the_keys_holding_their_value(
        config: str, option: str, value: object, message: str) -> None:
    cfg = Config.fromfile(config)
    with pytest.raises(StartupError) as error:
        check_cfg_options(cfg, {option: value})
    assert str(error.value) == f'--cfg-options key without effect: {message}'


def test_read_and_legacy_top_level_keys_stay_accepted() -> None:
    """Keys that something reads pass although the config does not set them; mmcv 1.x keys
    pass on to warn_ignored_keys (tests/test_startup_errors.py), as before."""
    cfg = Config.fromfile(MAIN_JOB)
    assert 'find_unused_parameters' not in cfg and 'lr_config' not in cfg
    check_cfg_options(cfg, {'find_unused_parameters': True, 'load_from': 'x.pth',
                            'compile_model': True, 'lr_config.step': [1],
                            'train_cfg.max_epochs': 1, 'randomness.seed': 0})


# --------------------------------------------------------------------------- data


def test_the_validation_data_are_checked_too(tools, tmp_path: Path,
                                             capsys: pytest.CaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every config has val_cfg = dict(), which is falsy: the validation loader's data were not
    checked and a missing folder failed in runner.train()."""
    monkeypatch.chdir(tmp_path)
    make_imagenet(tmp_path / 'data/imagenet')
    missing = tmp_path / 'val_data'
    lines = run_main(tools[0], [IMAGENET, '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                                f'val_dataloader.dataset.data_root={missing}'], capsys)
    assert lines[0] == (f"tools/train.py: error: LocalImageNet: data_root '{missing}' does not "
                        'exist.'), lines


def test_cifar_and_fashion_mnist_check_their_data_before_the_runner(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lines = run_main(tools[0], [CIFAR10, '--work-dir', str(tmp_path / 'w')], capsys)
    assert lines == ["tools/train.py: error: LocalCIFAR10: data_root 'data/cifar10/' does not "
                     'exist. Download cifar-10-python.tar.gz ("CIFAR python version") from '
                     'https://www.cs.toronto.edu/~kriz/cifar.html and extract it so that '
                     'data/cifar10/cifar-10-batches-py/ holds its files, or set data_root to '
                     'where they are.'], lines
    checkpoint = tmp_path / 'x.pth'
    checkpoint.write_bytes(b'')
    lines = run_main(tools[1], [FASHION, str(checkpoint), '--work-dir', str(tmp_path / 'w'),
                                '--cfg-options', f'test_dataloader.dataset.data_root={tmp_path}'],
                     capsys)
    assert lines == [f"tools/test.py: error: LocalFashionMNIST: data_root '{tmp_path}/' lacks "
                     't10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz. On Debian/Ubuntu: '
                     'apt-get install dataset-fashion-mnist (files land in '
                     '/usr/share/datasets/fashion-mnist); or put the four *-ubyte(.gz) files '
                     'from https://github.com/zalandoresearch/fashion-mnist in data_root.'], lines


@pytest.mark.parametrize('cls', [LocalCIFAR10, LocalCIFAR100])
def test_cifar_check_data_raises_what_loading_raises(cls: type, tmp_path: Path) -> None:
    (tmp_path / cls.base_folder).mkdir()
    (tmp_path / cls.base_folder / cls.train_list[0][0]).write_bytes(b'')
    cfg = dict(data_root=str(tmp_path), split='test')
    with pytest.raises(FileNotFoundError) as checked:
        cls.check_data(cfg)
    with pytest.raises(FileNotFoundError) as loaded:
        cls(**cfg, verify_checksums=False)
    assert str(checked.value) == str(loaded.value)
    assert cls.train_list[0][0] not in str(checked.value)
    cls.check_data(dict(data_root=''))  # no folder: the dataset itself reports it
    cls.check_data(dict(data_root='s3://bucket/cifar'))  # remote: left to the loader


def test_fashion_mnist_check_data_takes_the_split_and_extracted_files(tmp_path: Path) -> None:
    for name, _ in LocalFashionMNIST.test_list:
        (tmp_path / name[:-len('.gz')]).write_bytes(b'')  # extracted copies count
    LocalFashionMNIST.check_data(dict(data_root=str(tmp_path), split='test'))
    cfg = dict(data_root=str(tmp_path), split='train')
    with pytest.raises(FileNotFoundError) as checked:
        LocalFashionMNIST.check_data(cfg)
    with pytest.raises(FileNotFoundError) as loaded:
        LocalFashionMNIST(**cfg)
    assert str(checked.value) == str(loaded.value)
    if (FASHION_MNIST / 't10k-labels-idx1-ubyte.gz').is_file():
        LocalFashionMNIST.check_data(dict(split='test'))  # the default: Debian's folder


def test_coco_check_data_raises_what_loading_raises(tmp_path: Path) -> None:
    """The COCO folders and annotation file are checked in the order the dataset checks them,
    with its message, and joined to data_root as mmengine joins them."""
    root = tmp_path / 'coco'
    cfg = dict(data_root=f'{root}/', ann_file='annotations/instances_val2017.json',
               data_prefix=dict(img='val2017/'))
    expected = [f"data_root '{root}/'", f"ann_file '{root}/annotations/instances_val2017.json'",
                f"data_prefix.img '{root}/val2017/'"]
    for step, field in enumerate(expected):
        with pytest.raises(FileNotFoundError) as checked:
            LocalCocoDataset.check_data(cfg)
        with pytest.raises(FileNotFoundError) as loaded:
            LocalCocoDataset(**cfg)
        assert str(checked.value) == str(loaded.value)
        assert str(checked.value).startswith(f'LocalCocoDataset: {field} does not exist. '), \
            str(checked.value)
        if step == 0:
            (root / 'annotations').mkdir(parents=True)
        elif step == 1:
            (root / 'annotations/instances_val2017.json').write_text('{}')
    (root / 'val2017').mkdir()
    LocalCocoDataset.check_data(cfg)  # complete (the file's content is read later)
    images = tmp_path / 'elsewhere'
    with pytest.raises(FileNotFoundError, match=f"data_prefix.img '{images}' does not exist"):
        LocalCocoDataset.check_data(dict(cfg, data_prefix=dict(img=str(images))))  # absolute
    LocalCocoDataset.check_data(dict(data_root='s3://bucket/coco/', ann_file='a.json'))  # remote


def test_speech_commands_check_data_raises_what_loading_raises(tmp_path: Path) -> None:
    root = tmp_path / 'speech'
    cfg = dict(data_root=str(root), split='test', words=['yes', 'no'])
    for step in range(3):
        with pytest.raises(FileNotFoundError) as checked:
            SpeechCommands.check_data(cfg)
        with pytest.raises(FileNotFoundError) as loaded:
            SpeechCommands(**cfg)
        assert str(checked.value) == str(loaded.value)
        assert str(checked.value).startswith(
            [f"SpeechCommands: data_root '{root}' does not exist. Download",
             f"SpeechCommands: data_root '{root}' lacks validation_list.txt, testing_list.txt",
             f"SpeechCommands: data_root '{root}' has no folder for the words ['no']; its word "
             "folders: ['yes']"][step]), str(checked.value)
        if step == 0:
            (root / 'yes').mkdir(parents=True)
        elif step == 1:
            for name in ('validation_list.txt', 'testing_list.txt'):
                (root / name).write_text('')
    (root / 'no').mkdir()
    SpeechCommands.check_data(cfg)
    SpeechCommands.check_data(dict(cfg, words='yes'))  # refused by the constructor instead


def test_coco_and_speech_commands_check_their_data_before_the_runner(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """They used to fail once the Runner and the model were built, in a traceback."""
    monkeypatch.chdir(tmp_path)
    lines = run_main(tools[0], [MASK_RCNN, '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                                'model.backbone.init_cfg=None'], capsys)
    assert len(lines) == 1 and lines[0].startswith(
        "tools/train.py: error: LocalCocoDataset: data_root 'data/coco/' does not exist. "
        'Download COCO 2017 from https://cocodataset.org/#download'), lines
    checkpoint = tmp_path / 'x.pth'
    checkpoint.write_bytes(b'')
    lines = run_main(tools[1], [SPEECH, str(checkpoint), '--work-dir', str(tmp_path / 'w')],
                     capsys)
    assert len(lines) == 1 and lines[0].startswith(
        "tools/test.py: error: SpeechCommands: data_root 'data/speech_commands' does not exist. "
        'Download http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz'), lines


# --------------------------------------------------------------------------- other settings


@pytest.mark.parametrize('option, message', [
    ('compile_model.mode=fast', "compile_model: mode 'fast' is not a torch.compile mode; "
     'allowed: ['),
    ('compile_model.backend=inductr', "compile_model: backend 'inductr' is not a torch.compile "
     'backend (close matches: inductor'),
])
def test_compile_mode_and_backend_are_checked_at_start_up(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture, option: str,
        message: str) -> None:
    lines = run_main(tools[0], [FASHION, '--work-dir', str(tmp_path / 'w'), '--compile',
                                '--cfg-options', option], capsys)
    assert len(lines) == 1 and lines[0].startswith(f'tools/train.py: error: {message}'), lines
    if option.startswith('compile_model.mode'):
        from torch._inductor import list_mode_options
        assert lines[0].endswith(f'allowed: {list(list_mode_options())}'), lines
    else:
        import torch._dynamo
        assert lines[0].endswith(
            f'; allowed: {", ".join(torch._dynamo.list_backends())} and the debug backends of '
            'torch._dynamo.list_backends(exclude_tags=()) (e.g. eager, aot_eager). Set '
            'compile_model.backend in the config or with --cfg-options '
            'compile_model.backend=NAME'), lines
    assert not (tmp_path / 'w').exists()


def test_dist_cfg_timeout_is_checked_by_both_tools(tools, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    checkpoint = tmp_path / 'x.pth'
    checkpoint.write_bytes(b'')
    for tool, extra in ((tools[0], []), (tools[1], [str(checkpoint)])):
        lines = run_main(tool, [FASHION, *extra, '--work-dir', str(tmp_path / 'w'),
                                '--cfg-options', 'env_cfg.dist_cfg.timeout=-5'], capsys)
        assert len(lines) == 1 and lines[0].endswith(
            'error: env_cfg.dist_cfg.timeout must be a positive finite number of seconds, got '
            '-5; set it in the config or with --cfg-options env_cfg.dist_cfg.timeout=SECONDS '
            '(e.g. 300)'), lines


def test_an_unknown_checkpoint_hook_option_is_one_message(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """mmengine's CheckpointHook takes **kwargs: the option used to fail the build of the
    AtomicCheckpointHook that replaces it, after the Runner had started."""
    checkpoint = tmp_path / 'x.pth'
    checkpoint.write_bytes(b'')
    for tool, extra in ((tools[0], []), (tools[1], [str(checkpoint)])):
        lines = run_main(tool, [FASHION, *extra, '--work-dir', str(tmp_path / 'w'),
                                '--cfg-options', 'default_hooks.checkpoint.max_keep=1'], capsys)
        assert len(lines) == 1, lines
        assert lines[0].split(': error: ')[1].startswith(
            "default_hooks.checkpoint (type 'CheckpointHook'): AtomicCheckpointHook has no "
            "option 'max_keep'; did you mean 'max_keep_ckpts'? Its options: "), lines
        assert ' interval, ' in lines[0] and ' disk_check, ' in lines[0], lines


def test_check_hooks_takes_strict_hooks_and_leaves_open_ones() -> None:
    cfg = Config(dict(default_scope='mmpretrain', custom_hooks=[
        dict(type='NonFiniteCheckHook'), dict(type='NonFiniteCheckHook', stop_on_los=True)]))
    with pytest.raises(StartupError, match=r"^custom_hooks.1 \(type 'NonFiniteCheckHook'\): "
                       r"NonFiniteCheckHook has no option 'stop_on_los'"):
        startup.check_hooks(cfg)
    startup.check_hooks(Config.fromfile(FASHION))  # the configs' own hooks pass
    # a checkpoint interval that mmengine would skip silently is refused by the same build
    cfg = Config(dict(default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=0))))
    with pytest.raises(StartupError, match=r"^default_hooks.checkpoint \(type 'CheckpointHook'"
                       r'\): AtomicCheckpointHook: interval=0; allowed: '):
        startup.check_hooks(cfg)


def test_persistent_workers_without_workers_names_the_loader_and_the_flag(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lines = run_main(tools[0], [FASHION_EPOCHS, '--work-dir', str(tmp_path / 'w'),
                                '--cfg-options', 'train_dataloader.num_workers=0'], capsys)
    assert lines == ['tools/train.py: error: train_dataloader: persistent_workers=True keeps '
                     'worker processes alive, but num_workers=0 starts none; set '
                     'train_dataloader.persistent_workers=False (--no-persistent-workers does so '
                     'for every loader), or train_dataloader.num_workers=N with N >= 1'], lines
    cfg = Config(dict(val_dataloader=dict(num_workers=-1), test_dataloader=dict(
        num_workers=0, persistent_workers=True)))
    with pytest.raises(StartupError) as error:
        startup.check_dataloaders(cfg, ['train_dataloader', 'val_dataloader', 'test_dataloader'])
    assert str(error.value) == (
        'val_dataloader.num_workers must be a whole number >= 0 (the worker processes; 0 loads '
        'in the main process), got -1; test_dataloader: persistent_workers=True keeps worker '
        'processes alive, but num_workers=0 starts none; set '
        'test_dataloader.persistent_workers=False, or test_dataloader.num_workers=N with N >= 1')


def test_a_missing_backbone_checkpoint_is_refused_before_the_runner(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/en/detection.md: a missing classifier checkpoint names the classifier config; it
    used to surface in runner.train(), after the Runner and the COCO data were built."""
    monkeypatch.chdir(tmp_path)
    lines = run_main(tools[0], [MASK_RCNN, '--work-dir', str(tmp_path / 'w')], capsys)
    assert lines == ["tools/train.py: error: model.backbone.init_cfg.checkpoint "
                     "'work_dirs/pdc_resnet18_8xb32_in1k/epoch_100.pth' does not exist. It is "
                     'written by training the classifier config configs/pdc_resnet18_8xb32_in1k.py '
                     '(e.g. tools/dist_train.sh configs/pdc_resnet18_8xb32_in1k.py 8); set '
                     '--cfg-options model.backbone.init_cfg.checkpoint=PATH to use another file, '
                     'or model.backbone.init_cfg=None to train the backbone from random weights'
                     ], lines
    cfg = Config.fromfile(MASK_RCNN)
    cfg.merge_from_dict({'model.backbone.init_cfg': None})
    startup.check_pretrained_backbone(cfg)
    cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint='torchvision://resnet18')
    startup.check_pretrained_backbone(cfg)  # URLs are left to the loader


# --------------------------------------------------------------------------- reporting


def test_the_traceback_is_printed_the_python_3_9_way(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    """MMPOLY_TRACEBACK=1 printed with traceback.print_exception(error), which Python 3.9 (the
    supported minimum) does not take: its first three parameters are required."""
    printed = []

    def print_exception_3_9(etype, value, tb, limit=None, file=None, chain=True):
        printed.append((etype, value, tb))

    monkeypatch.setattr(traceback, 'print_exception', print_exception_3_9)
    monkeypatch.setenv(startup.TRACEBACK_ENV, '1')
    with pytest.raises(SystemExit):
        with startup.startup_errors('prog'):
            raise StartupError('the message')
    assert capsys.readouterr().err.startswith('prog: error: the message\n')
    ((etype, value, tb), ) = printed
    assert etype is StartupError and str(value) == 'the message' and tb is not None


def test_a_busy_master_port_is_one_line(capsys: pytest.CaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    """torchrun's rendezvous on a port in use: 47 lines ending in DistNetworkError EADDRINUSE,
    now one line naming the port and PORT / --master-port."""
    from mmpoly.utils import dist_run
    script = tmp_path / 'hello.py'
    script.write_text('print("hello")\n')
    with socket.socket() as busy:
        busy.bind(('0.0.0.0', 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        monkeypatch.setattr(sys, 'argv', [
            'dist_run', '--nnodes=1', '--node_rank=0', '--master_addr=127.0.0.1',
            f'--master_port={port}', '--nproc_per_node=1', str(script)])
        with pytest.raises(SystemExit) as exit_info:
            dist_run.main()
    assert exit_info.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1] == (f'torchrun: master port {port} is in use on this machine (EADDRINUSE: '
                         'another job holds it, or one that has not ended yet); choose a free '
                         'port: PORT=N tools/dist_train.sh ... (also tools/dist_test.sh), or '
                         '--master-port N (the MASTER_PORT of the processes) for torchrun '
                         'itself'), lines
    assert not any('Traceback' in line for line in lines), lines


def test_get_started_names_every_package_of_the_tests_extra() -> None:
    from mmpoly.version import EXTRAS
    text = (CONFIGS.parent / 'docs' / 'en' / 'get_started.md').read_text(encoding='utf-8')
    (line, ) = [line for line in text.splitlines() if line.startswith("pip install '.[tests]'")]
    listed = line.split('# plus', 1)[1]
    assert [name for name in EXTRAS['tests'] if name not in listed] == []


def test_backbone_typos_are_refused_through_the_kwargs_of_mmpoly_backbones() -> None:
    """PDCResNetCIFAR(*args, block_cfg=..., **kwargs) passes its options on to PolyResNetBase:
    the check follows them there (a typo used to fail the build after the Runner started)."""
    cfg = Config.fromfile(FASHION_EPOCHS)
    assert cfg.model.backbone.type == 'PDCResNetCIFAR'
    with pytest.raises(StartupError, match=r"model.backbone.with_cq: 'with_cq' is not a key of "
                       r"model.backbone nor an argument of its type 'PDCResNetCIFAR' \(close "
                       r'matches: with_cp'):
        check_cfg_options(cfg, {'model.backbone.with_cq': True})
    # the base class's options, and the subclass's own, stay accepted
    check_cfg_options(cfg, {'model.backbone.with_cp': True, 'model.backbone.stem_stride': 1,
                            'model.backbone.frozen_stages': 1})
    args = startup._arguments
    from mmpoly.models import NonLocalBlock, PDCResNetCIFAR, PolyResNetBase
    assert {'with_cp', 'block_cfg', 'stem_stride', 'depth'} <= args(PDCResNetCIFAR)
    assert args(PolyResNetBase) < args(PDCResNetCIFAR)
    assert 'reduction' in args(NonLocalBlock)
    from mmcv.cnn import NonLocal2d  # takes **kwargs of its own: its options are open
    assert args(NonLocal2d) is None
