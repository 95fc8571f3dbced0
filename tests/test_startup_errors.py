"""Start-up mistakes of tools/train.py and tools/test.py end in one message that comes first and
names the file or key (mmpoly.utils.startup), and the ImageNet configs check their data.

Most cases call the tools' ``main()`` in-process (the same code path as the command line up to
the exit: the message on stderr, ``SystemExit(1)``); the slow ones run the tools as subprocesses
with the venv's Python, one of them ``tools/dist_train.sh CONFIG 2`` (2 gloo processes).
"""
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest
import torch
from helpers import CONFIGS, REPO, TOOLS, load_tool
from mmengine.config import Config
from test_datasets import make_imagenet
from test_tools import free_port

from mmpoly.datasets import LocalImageNet
from mmpoly.utils import startup
from mmpoly.utils.startup import (StartupError, check_cfg_options, check_model_config,
                                  load_config)

FASHION = str(CONFIGS / 'pdc_resnet8_1xb128-1400i_fashion-mnist.py')
IMAGENET = str(CONFIGS / 'pdc_resnet18_8xb32_in1k.py')
TIMEOUT_S = 180


@pytest.fixture(scope='module')
def tools() -> Tuple[object, object]:
    return load_tool('train'), load_tool('test')


def run_main(tool: object, argv: List[str], capsys: pytest.CaptureFixture) -> List[str]:
    """``tool.main(argv)`` must exit with status 1; the lines it printed to stderr."""
    with pytest.raises(SystemExit) as exit_info:
        tool.main(argv)
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    assert captured.out == ''
    return captured.err.splitlines()


def run_tool(args: List[str], cwd: Path = REPO) -> Tuple[int, List[str]]:
    proc = subprocess.run([sys.executable, *args], cwd=cwd, text=True, timeout=TIMEOUT_S,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={**os.environ, startup.TRACEBACK_ENV: ''})
    return proc.returncode, proc.stdout.splitlines()


def write_broken_base(tmp_path: Path) -> Path:
    """A config whose second ``_base_`` file has a syntax error on its line 3."""
    (tmp_path / 'broken_base.py').write_text('a = 1\nmodel = dict(\n    type=)\n')
    config = tmp_path / 'leaf.py'
    config.write_text(f"_base_ = [{FASHION!r}, './broken_base.py']\nb = 2\n")
    return config


# --------------------------------------------------------------------------- subprocesses


@pytest.mark.slow
def test_missing_config_is_the_first_line(tmp_path: Path) -> None:
    missing = str(CONFIGS / 'pdc_resnet18_8xb32_in1kk.py')
    code, lines = run_tool([str(TOOLS / 'train.py'), missing, '--work-dir', str(tmp_path)])
    assert code == 1
    assert lines == [f"tools/train.py: error: config file {missing!r} does not exist (close "
                     'matches: pdc_resnet18_8xb32_in1k.py, pdc-cmp_resnet18_8xb32_in1k.py, '
                     'resnet18_8xb32_in1k.py); give the path of a config file, e.g. one of '
                     'configs/*.py']


@pytest.mark.slow
def test_syntax_error_in_a_base_file_names_it_and_its_line(tmp_path: Path) -> None:
    config = write_broken_base(tmp_path)
    code, lines = run_tool([str(TOOLS / 'train.py'), str(config), '--work-dir',
                            str(tmp_path / 'work')])
    assert code == 1
    assert lines[0].startswith(f'tools/train.py: error: syntax error in config file '
                               f'{tmp_path / "broken_base.py"}, line 3: '), lines
    assert lines[1].strip() == 'type=)'
    assert len(lines) == 2 and not (tmp_path / 'work').exists()


@pytest.mark.slow
def test_test_tool_unknown_cfg_option_and_missing_checkpoint(tmp_path: Path) -> None:
    code, lines = run_tool([str(TOOLS / 'test.py'), FASHION, str(tmp_path / 'x.pth'),
                            '--work-dir', str(tmp_path / 'w'), '--cfg-options',
                            'test_dataloader.batch_sise=8'])
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith('tools/test.py: error: unknown --cfg-options key: '
                               'test_dataloader.batch_sise: test_dataloader has no key '
                               "'batch_sise' (close matches: batch_size)"), lines
    code, lines = run_tool([str(TOOLS / 'test.py'), FASHION, str(tmp_path / 'epoch_1.pth'),
                            '--work-dir', str(tmp_path / 'w')])
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"tools/test.py: error: CHECKPOINT "
                               f"'{tmp_path / 'epoch_1.pth'}' does not exist; "), lines


@pytest.mark.slow
def test_unusable_work_dir_is_named(tmp_path: Path) -> None:
    code, lines = run_tool([str(TOOLS / 'train.py'), FASHION, '--work-dir', '/proc/x'])
    assert code == 1 and len(lines) == 1, lines
    assert lines[0] == ("tools/train.py: error: work_dir '/proc/x' cannot be created (No such "
                        "file or directory); choose another with --work-dir DIR")


@pytest.mark.slow
def test_dist_train_imagenet_without_data_prints_one_message(tmp_path: Path) -> None:
    """The user's own command, run where data/imagenet does not exist: rank 0 reports once,
    rank 1 is ended quietly, no traceback at all, non-zero exit status, and the whole output
    stays short: torchrun's OMP_NUM_THREADS notice, the message, and the one-line report of
    the failed job that ``python -m mmpoly.utils.dist_run`` (what dist_train.sh runs) gives."""
    proc = subprocess.run(['bash', str(TOOLS / 'dist_train.sh'), IMAGENET, '2'], cwd=tmp_path,
                          text=True, timeout=TIMEOUT_S, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT,
                          env={**os.environ, 'PYTHON': sys.executable,
                               'PORT': str(free_port())})
    lines = proc.stdout.splitlines()
    assert proc.returncode != 0
    errors = [i for i, line in enumerate(lines) if 'tools/train.py: error' in line]
    assert len(errors) == 1, proc.stdout
    assert lines[errors[0]] == ("tools/train.py: error: LocalImageNet: data_root 'data/imagenet' "
                                f"(= {tmp_path / 'data' / 'imagenet'}) does not exist."), lines
    summary = [line for line in lines if line.startswith('torchrun: ')]
    assert len(summary) == 1 and 'failed in rank 0 (exit code 1)' in summary[0], proc.stdout
    # torchrun's own lines (its SIGTERM notice to rank 1, its one-line report) follow the message
    report = next(i for i, line in enumerate(lines)
                  if 'torch/distributed/elastic' in line or line.startswith('torchrun: '))
    message = lines[errors[0]:report]
    assert 'data/imagenet/train/<wnid>/*.JPEG' in message[2]
    assert message[-2].endswith('--cfg-options train_dataloader.dataset.data_root=DIR '
                                'val_dataloader.dataset.data_root=DIR')
    assert report <= 14 and len(message) == 9, proc.stdout
    assert len(lines) <= 30, proc.stdout
    assert 'Traceback' not in proc.stdout, proc.stdout


def test_dist_run_ends_a_failed_job_with_one_line(capsys: pytest.CaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """mmpoly.utils.dist_run: torchrun's ChildFailedError becomes one line and the exit status
    of the first failure."""
    import torch.distributed.run
    from torch.distributed.elastic.multiprocessing.errors import (ChildFailedError,
                                                                  ProcessFailure)

    from mmpoly.utils import dist_run

    def failed_job() -> None:
        raise ChildFailedError('tools/train.py', {
            0: ProcessFailure(local_rank=0, pid=11, exitcode=1, error_file='<N/A>'),
            1: ProcessFailure(local_rank=1, pid=12, exitcode=-15, error_file='<N/A>')})

    monkeypatch.setattr(torch.distributed.run, 'main', failed_job)
    with pytest.raises(SystemExit) as exit_info:
        dist_run.main()
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == ('torchrun: tools/train.py failed in rank 0 (exit code 1), '
                                       'rank 1 (signal SIGTERM); first: rank 0\n')


# --------------------------------------------------------------------------- in-process


def test_cfg_options_typos_are_refused_with_close_matches(tools, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    train_tool = tools[0]
    lines = run_main(train_tool, [FASHION, '--work-dir', str(tmp_path), '--cfg-options',
                                  'train_cfg.max_iter=2', 'default_hooks.checkpoint.intervl=5'],
                     capsys)
    # train_cfg has no type: the Runner builds an IterBasedTrainLoop (by_epoch=False)
    assert lines == ['tools/train.py: error: unknown --cfg-options keys: train_cfg.max_iter: '
                     "'max_iter' is not a key of train_cfg nor an argument of its type "
                     "'IterBasedTrainLoop' (close matches: max_iters, val_interval); "
                     'default_hooks.checkpoint.intervl: default_hooks.checkpoint has no key '
                     "'intervl' (close matches: interval). A key is a dotted path into the "
                     'config, list items by index (e.g. param_scheduler.0.end)'], lines


def test_optim_wrapper_without_a_type_is_checked_as_an_optim_wrapper() -> None:
    """mmengine builds an OptimWrapper from an optim_wrapper dict without a type: a typo of
    its arguments fails the build with a TypeError, so it is refused at start-up."""
    cfg = Config.fromfile(FASHION)
    assert 'type' not in cfg.optim_wrapper and 'optimizer' in cfg.optim_wrapper
    with pytest.raises(StartupError, match=r"optim_wrapper.clip_gard.max_norm: 'clip_gard' is "
                       r"not a key of optim_wrapper nor an argument of its type 'OptimWrapper' "
                       r'\(close matches: clip_grad'):
        check_cfg_options(cfg, {'optim_wrapper.clip_gard.max_norm': 1.0})
    check_cfg_options(cfg, {'optim_wrapper.clip_grad.max_norm': 1.0,
                            'optim_wrapper.accumulative_counts': 2})


def test_loops_without_a_type_are_checked_as_the_loop_the_runner_builds() -> None:
    assert startup._implied_type('train_cfg', dict(by_epoch=True, max_epochs=2)) == \
        'EpochBasedTrainLoop'
    assert startup._implied_type('train_cfg', dict(by_epoch=False)) == 'IterBasedTrainLoop'
    assert startup._implied_type('train_cfg', dict(max_epochs=2)) is None  # the Runner fails
    assert startup._implied_type('train_cfg', dict(type='MyLoop', by_epoch=True)) is None
    assert startup._implied_type('val_cfg', dict()) == 'ValLoop'
    assert startup._implied_type('test_cfg', dict(fp16=True)) == 'TestLoop'
    assert startup._implied_type('model', dict()) is None
    assert startup._implied_type('optim_wrapper', dict(optimizer=dict(type='SGD'))) == \
        'OptimWrapper'
    assert startup._implied_type('optim_wrapper', dict(optimizer={}, constructor='Mine')) is None
    cfg = Config.fromfile(str(CONFIGS / 'pdc_resnet18_1xb128_cifar10.py'))  # epoch-based
    assert cfg.train_cfg.by_epoch and 'type' not in cfg.train_cfg
    with pytest.raises(StartupError, match=r"train_cfg.max_iters: 'max_iters' is not a key of "
                       r"train_cfg nor an argument of its type 'EpochBasedTrainLoop' \(close "
                       r'matches: max_epochs'):
        check_cfg_options(cfg, {'train_cfg.max_iters': 100})
    # the option that switches the loop counts: an iteration-based loop takes max_iters
    check_cfg_options(cfg, {'train_cfg.by_epoch': False, 'train_cfg.max_iters': 100})
    with pytest.raises(StartupError, match=r"val_cfg.fp61: 'fp61' is not a key of val_cfg nor "
                       r"an argument of its type 'ValLoop' \(close matches: fp16\)"):
        check_cfg_options(cfg, {'val_cfg.fp61': True})
    check_cfg_options(cfg, {'val_cfg.fp16': True, 'test_cfg.fp16': True})


@pytest.mark.parametrize('options, message', [
    (['train_cfg.max_iters=0'], 'train_cfg.max_iters must be a whole number >= 1 (the '
     'iterations to train), got 0. Set it in the config or with --cfg-options '
     'train_cfg.max_iters=N'),
    (['train_cfg.max_iters=-5', 'train_cfg.val_interval=2.5'],
     'train_cfg.max_iters must be a whole number >= 1 (the iterations to train), got -5; '
     'train_cfg.val_interval must be a whole number >= 1 (validate every this many epochs, or '
     'iterations in an iteration-based loop), got 2.5. Set it in the config or with '
     '--cfg-options train_cfg.max_iters=N train_cfg.val_interval=N'),
    (['train_cfg.val_interval=0'], 'train_cfg.val_interval must be a whole number >= 1 '
     '(validate every this many epochs, or iterations in an iteration-based loop), got 0.'),
    (['train_cfg.val_begin=0'], 'train_cfg.val_begin must be a whole number >= 1 (the first '
     'epoch, or iteration, after which to validate), got 0.'),
    (['train_cfg.max_iters=1e3x'], "train_cfg.max_iters must be a whole number >= 1 (the "
     "iterations to train), got '1e3x'."),
])
def test_train_loop_lengths_and_intervals_must_be_positive(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture, options: List[str],
        message: str) -> None:
    lines = run_main(tools[0], [FASHION, '--work-dir', str(tmp_path), '--cfg-options', *options],
                     capsys)
    assert len(lines) == 1 and lines[0].startswith(f'tools/train.py: error: {message}'), lines
    cfg = Config.fromfile(FASHION)
    for value in (1, 1400, 2.0):  # whole numbers, also as floats (mmengine takes them)
        cfg.train_cfg.max_iters = value
        startup.check_train_loop(cfg)
    for value in (True, None, float('nan'), float('inf'), [3]):
        cfg.train_cfg.max_iters = value
        with pytest.raises(StartupError, match=rf'train_cfg.max_iters must be a whole number '
                           rf'>= 1 \(the iterations to train\), got {re.escape(repr(value))}'):
            startup.check_train_loop(cfg)
    startup.check_train_loop(Config(dict(train_cfg=None)))  # no training loop: nothing to check


def test_cfg_options_unknown_argument_of_a_strict_type() -> None:
    cfg = Config.fromfile(FASHION)
    with pytest.raises(StartupError, match=r"model.bakbone: 'bakbone' is not a key of model nor "
                       r"an argument of its type 'ImageClassifier' \(close matches: backbone"):
        check_cfg_options(cfg, {'model.bakbone': 1})
    assert len(cfg.param_scheduler) == 2
    with pytest.raises(StartupError, match=r"param_scheduler is a list of 2; '3' is not an "
                       'index of it'):
        check_cfg_options(cfg, {'param_scheduler.3.end': 1})


def test_an_argument_a_model_part_does_not_take_is_one_line(tools, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    """A key of the model or of one of its typed parts (backbone, neck, head) that the type does
    not take, e.g. a typo in one's own config file, was a TypeError traceback from deep in the
    Runner's build (naming PolyResNetBase for a backbone); tools/train.py and tools/test.py now
    name it in one line with close matches before anything is built. (Every shipped config
    passes the check: test_keys_that_mmengine_ignores_are_warned_about loads them all.)"""
    train, test = tools
    backbone = tmp_path / 'backbone_typo.py'
    backbone.write_text(f"_base_ = [{FASHION!r}]\nmodel = dict(backbone=dict(depht=8))\n")
    assert run_main(train, [str(backbone), '--work-dir', str(tmp_path / 'w')], capsys) == [
        f"tools/train.py: error: model.backbone.depht of config {str(backbone)!r}: 'depht' is "
        "not an argument of model.backbone.type 'PDCResNetCIFAR' (close matches: depth)"]
    neck = tmp_path / 'neck_typo.py'
    neck.write_text(f"_base_ = [{FASHION!r}]\nmodel = dict(neck=dict(dimm=2))\n")
    assert run_main(test, [str(neck), str(tmp_path / 'x.pth'), '--work-dir',
                           str(tmp_path / 'w')], capsys) == [
        f"tools/test.py: error: model.neck.dimm of config {str(neck)!r}: 'dimm' is not an "
        "argument of model.neck.type 'GlobalAveragePooling' (close matches: dim)"]
    top = tmp_path / 'model_typo.py'
    top.write_text(f"_base_ = [{FASHION!r}]\nmodel = dict(hed=None)\n")
    with pytest.raises(StartupError, match=r"model.hed of config .*: 'hed' is not an argument "
                       r"of model.type 'ImageClassifier' \(close matches: head"):
        check_model_config(load_config(str(top)), str(top))


def test_a_key_deeper_in_the_model_that_its_type_does_not_take_is_named() -> None:
    """Typed dicts below the model's direct parts are checked too: a block option, a plugin, a
    detector's mask head, a loss inside a cascade's list of heads. Dicts whose type is not a
    model (the train_cfg's assigners, init_cfg) and types taking **kwargs are not."""
    def refused(config: str, key: str, value: object) -> str:
        cfg = load_config(str(CONFIGS / config))
        cfg.merge_from_dict({key: value})
        with pytest.raises(StartupError) as error:
            check_model_config(cfg, config)
        return str(error.value)

    assert refused('pdc_resnet8_1xb128-1400i_fashion-mnist.py', 'model.backbone.block_cfg.degre',
                   3).endswith("'degre' is not an argument of model.backbone.block_cfg.type "
                               "'PDCBlock' (close matches: degree)")
    assert refused('pdc-nl3_resnet8_1xb128-1400i_fashion-mnist.py',
                   'model.backbone.plugins.0.cfg.reductoin', 2).startswith(
        'model.backbone.plugins.0.cfg.reductoin of config')
    assert refused('mask-rcnn_pdc-resnet18_fpn_1x_coco.py', 'model.roi_head.mask_head.num_convz',
                   2).endswith("'num_convz' is not an argument of model.roi_head.mask_head.type "
                               "'FCNMaskHead' (close matches: num_convs)")
    cascade = load_config(str(CONFIGS / 'cascade-mask-rcnn_pdc-resnet18_fpn_1x_coco.py'))
    cascade.model.roi_head.bbox_head[1].loss_cls.use_sigmod = True
    with pytest.raises(StartupError, match=r"model\.roi_head\.bbox_head\.1\.loss_cls\.use_sigmod "
                       r".*'CrossEntropyLoss' \(close matches: use_sigmoid"):
        check_model_config(cascade, 'cascade')
    # not models, or taking **kwargs: left to their builders
    for config, key in (('mask-rcnn_pdc-resnet18_fpn_1x_coco.py',
                         'model.train_cfg.rpn.assigner.anything'),
                        ('mask-rcnn_pdc-resnet18_fpn_1x_coco.py',
                         'model.roi_head.bbox_head.anything'),
                        ('pdc_resnet8_1xb128-1400i_fashion-mnist.py', 'model.init_cfg')):
        cfg = load_config(str(CONFIGS / config))
        cfg.merge_from_dict({key: dict(type='Kaiming', layer='Conv2d')} if key.endswith(
            'init_cfg') else {key: 1})
        check_model_config(cfg, config)


def test_a_cfg_option_without_equals_is_a_usage_error_in_every_tool(
        capsys: pytest.CaptureFixture) -> None:
    """``--cfg-options train_cfg.max_epochs 2`` (a space for the "=") ended in mmengine's
    ValueError traceback from inside argparse in all six tools that take --cfg-options; now a
    usage error (status 2) naming the item and the option as it was probably meant."""
    cases = [(['train_cfg.max_epochs', '2'], 'train_cfg.max_epochs', 'train_cfg.max_epochs=2'),
             (['train_cfg.max_epochs=', '2'], '2', 'train_cfg.max_epochs=2'),
             (['model.head.topk', '=1'], 'model.head.topk', 'model.head.topk=1'),
             (['a=1', 'b'], 'b', 'train_cfg.max_epochs=2')]
    tools_argv = {'train': [FASHION], 'test': [FASHION, 'x.pth'],
                  'det_inference': ['a.jpg', FASHION, 'x.pth'],
                  'analysis_tools/get_flops': [FASHION], 'analysis_tools/poly_degree': [FASHION],
                  'model_zoo/run_suite': ['--seeds', '0']}
    for name, argv in tools_argv.items():
        tool = load_tool(name)
        for items, bad, fix in cases:
            with pytest.raises(SystemExit) as exit_info:
                tool.parse_args([*argv, '--cfg-options', *items])
            assert exit_info.value.code == 2, name
            assert capsys.readouterr().err.splitlines()[-1].endswith(
                f"error: argument --cfg-options: {bad!r} is not KEY=VALUE: write each option as "
                f'one word, without spaces around "=", e.g. {fix}'), (name, items)
    args = load_tool('train').parse_args([FASHION, '--cfg-options', 'train_cfg.max_epochs=2',
                                          'model.head.topk=[1,5]'])
    assert args.cfg_options == {'train_cfg.max_epochs': 2, 'model.head.topk': [1, 5]}


def test_a_config_that_is_no_config_file_is_named_as_what_it_is(tmp_path: Path) -> None:
    """A checkpoint given as the config (CONFIG and CHECKPOINT swapped), a folder, another text
    file, or a config that is not UTF-8: each was a traceback (mmengine's "Only py/yml/yaml/json
    type are supported now!" naming no file, a UnicodeDecodeError) or "does not exist"."""
    checkpoint = tmp_path / 'epoch_1.pth'
    torch.save({'state_dict': {}}, checkpoint)
    with pytest.raises(StartupError) as error:
        load_config(str(checkpoint))
    assert str(error.value) == (
        f"config {str(checkpoint)!r} is not a config file (.py, .json, .yaml, .yml): it is a "
        'torch checkpoint (a zip archive); give a config, e.g. one of configs/*.py (did CONFIG '
        'and CHECKPOINT change places?)')
    notes = tmp_path / 'notes.txt'
    notes.write_text('my training notes\nlr 0.1\n')
    with pytest.raises(StartupError, match=r"^config '.*notes\.txt' is not a config file .*: it "
                       r"is a text file \(it starts 'my training notes'\); give a config, e\.g\. "
                       r'one of configs/\*\.py$'):
        load_config(str(notes))
    with pytest.raises(StartupError, match=r"^config '.*' is a directory, not a config file"):
        load_config(str(tmp_path))
    latin1 = tmp_path / 'latin1.py'
    latin1.write_bytes(b'# caf\xe9\nx = 1\n')
    with pytest.raises(StartupError) as error:
        load_config(str(latin1))
    assert str(error.value) == (f'config file {str(latin1)!r} (at byte offset 5) is not UTF-8 '
                                'text (invalid continuation byte: byte 0xe9); save it as UTF-8')
    child = tmp_path / 'child.py'
    child.write_text("_base_ = ['latin1.py']\n")
    with pytest.raises(StartupError, match=r"^config file '.*child\.py' or one of its _base_ "
                       r'files is not UTF-8 text'):
        load_config(str(child))


def test_a_visualizer_backend_without_its_package_is_one_line(tools, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture
                                                              ) -> None:
    """docs/en/analysis_tools.md's TensorBoard config without tensorboard installed (the set-up
    does not install it) ended in an ImportError traceback from inside the Runner and left a
    work_dir holding only the dumped config; both tools now refuse it at start-up."""
    import importlib.util
    assert importlib.util.find_spec('tensorboard') is None  # as analysis_tools.md says
    train, test = tools
    config = tmp_path / 'my_pdc_tb.py'
    config.write_text(f"_base_ = [{FASHION!r}]\nvisualizer = dict(vis_backends=[dict(type="
                      "'LocalVisBackend'), dict(type='TensorboardVisBackend')])\n")
    expected = ("visualizer.vis_backends.1 (type 'TensorboardVisBackend') needs the Python "
                f"package 'tensorboard', which is not installed for {sys.executable}: install it "
                f"there (e.g. {sys.executable} -m pip install tensorboard), or leave that "
                "backend out")
    work_dir = tmp_path / 'work'
    assert run_main(train, [str(config), '--work-dir', str(work_dir)], capsys) == [
        f'tools/train.py: error: {expected}']
    assert not work_dir.exists()
    assert run_main(test, [str(config), str(tmp_path / 'x.pth'), '--work-dir', str(work_dir)],
                    capsys) == [f'tools/test.py: error: {expected}']


@pytest.mark.parametrize('config, options', [
    (FASHION, ['train_cfg.max_iters=2', 'model.backbone.stage_channels=[8,16]',
               'model.backbone.init_cfg.type=Pretrained', 'model.backbone.init_cfg.prefix=b.',
               'test_dataloader.dataset.indices=10', 'env_cfg.dist_cfg.timeout=10',
               'default_hooks.checkpoint.by_epoch=False', 'randomness.seed=0',
               'optim_wrapper.optimizer.lr=0.01', 'load_from=x.pth', 'compile_model=True',
               'train_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False',
               'default_hooks.logger.interval=1', 'custom_hooks.0.priority=ABOVE_NORMAL',
               'optim_wrapper.paramwise_cfg.norm_decay_mult=0']),
    (str(CONFIGS / 'pdc_resnet18_1xb128_cifar10.py'),
     ['train_cfg.max_epochs=2', 'train_cfg.val_interval=1', 'auto_scale_lr.enable=True']),
    (str(CONFIGS / 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py'),
     ['model.backbone.init_cfg.checkpoint=c.pth', 'param_scheduler.0.end=4',
      'model.test_cfg.rcnn.score_thr=0', 'val_dataloader.num_workers=0']),
])
def test_legitimate_cfg_options_are_accepted(config: str, options: List[str]) -> None:
    """The overrides the tests, tools and docs use (existing keys, and new keys that the
    configured type takes) pass the check and merge."""
    from mmengine.config import DictAction
    parsed = {}
    for option in options:
        key, value = option.split('=', 1)
        parsed[key] = DictAction._parse_iterable(value)
    cfg = Config.fromfile(config)
    check_cfg_options(cfg, parsed)
    cfg.merge_from_dict(parsed)


def test_syntax_error_in_the_config_itself(tmp_path: Path) -> None:
    config = tmp_path / 'bad.py'
    config.write_text("model = dict(type='ImageClassifier'\nx = 1\n")
    with pytest.raises(StartupError) as error:
        load_config(str(config))
    assert str(error.value).startswith(f'syntax error in config file {config}, line 1: ')


def test_config_that_raises_names_its_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / 'raises.py'
    config.write_text('a = 1\nb = undefined_name + 1\n')
    with pytest.raises(StartupError, match=rf"error in config file {config}, line 2: "
                       "NameError: name 'undefined_name' is not defined"):
        load_config(str(config))


@pytest.mark.parametrize('case', ['file', 'not-writable'])
def test_work_dir_file_or_not_writable(tools, tmp_path: Path, case: str,
                                       capsys: pytest.CaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    work_dir = tmp_path / 'work'
    if case == 'file':
        work_dir.write_text('')
        expected = f"work_dir '{work_dir}' is a file, not a directory; remove it or choose"
    else:  # root may write anywhere: the write probe is made to fail as without permission
        def denied(*args, **kwargs):
            raise PermissionError(13, 'Permission denied')
        monkeypatch.setattr(startup.tempfile, 'mkstemp', denied)
        expected = (f"work_dir '{work_dir}' is not writable (Permission denied); choose "
                    'another with --work-dir DIR')
    lines = run_main(tools[0], [FASHION, '--work-dir', str(work_dir)], capsys)
    assert lines[0].startswith(f'tools/train.py: error: {expected}'), lines


def test_missing_resume_and_load_from_checkpoints(tools, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    (tmp_path / 'epoch_3.pth').write_bytes(b'')
    missing = tmp_path / 'epoch_2.pth'
    lines = run_main(tools[0], [FASHION, '--work-dir', str(tmp_path), '--resume', str(missing)],
                     capsys)
    assert lines == [f"tools/train.py: error: --resume '{missing}' does not exist (close "
                     'matches: epoch_3.pth); give an existing checkpoint, or --resume without '
                     'a path for the newest one of the work_dir']
    lines = run_main(tools[0], [FASHION, '--work-dir', str(tmp_path), '--cfg-options',
                                f'load_from={missing}'], capsys)
    assert lines[0].startswith(f"tools/train.py: error: load_from '{missing}' does not exist")


def test_resume_path_and_another_load_from_are_refused(tools, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    """--resume sets load_from; a --cfg-options load_from that names another file (or None)
    would silently win over it. The same file is accepted (then the missing file is named)."""
    resume, other = tmp_path / 'epoch_2.pth', tmp_path / 'other' / 'epoch_9.pth'
    args = [FASHION, '--work-dir', str(tmp_path), '--resume']
    lines = run_main(tools[0], [*args, str(resume), '--cfg-options', f'load_from={other}'],
                     capsys)
    assert lines == [f"tools/train.py: error: --resume '{resume}' and --cfg-options "
                     f"load_from='{other}' name different checkpoints: --resume PATH resumes "
                     'from PATH (it sets load_from). Give --resume PATH alone to resume a run, '
                     'or load_from=PATH without --resume to start a new run from its weights']
    lines = run_main(tools[0], [*args, str(resume), '--cfg-options', 'load_from=None'], capsys)
    assert lines[0].startswith(f"tools/train.py: error: --resume '{resume}' and --cfg-options "
                               'load_from=None name different checkpoints'), lines
    lines = run_main(tools[0], [*args, '--cfg-options', f'load_from={other}'], capsys)
    assert lines == ['tools/train.py: error: --resume without a path resumes from the newest '
                     f"checkpoint of the work_dir, but --cfg-options load_from='{other}' names "
                     f'another one; to resume from it, give --resume {other}, and drop load_from '
                     'from --cfg-options']
    # the same file, also spelt differently: accepted, and the next check names the missing file
    lines = run_main(tools[0], [*args, str(resume), '--cfg-options',
                                f'load_from={tmp_path}/./epoch_2.pth'], capsys)
    assert lines[0].startswith(f"tools/train.py: error: --resume '{resume}' does not exist"), \
        lines
    resume.write_bytes(b'')
    lines = run_main(tools[0], [*args, str(resume), '--non-strict'], capsys)
    assert lines == ['tools/train.py: error: --non-strict applies to load_from, not to '
                     '--resume: a resumed checkpoint must fit the model (its optimizer state '
                     'continues). Drop --non-strict, or start a new run from its weights with '
                     '--cfg-options load_from=PATH --non-strict in another --work-dir']


def test_test_tool_refuses_a_second_checkpoint_and_an_out_file_it_cannot_write(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """tools/test.py tests CHECKPOINT: a --cfg-options load_from of another file would be
    tested instead. --out must have a suffix that mmengine writes the chosen item with."""
    checkpoint, other = tmp_path / 'epoch_1.pth', tmp_path / 'epoch_2.pth'
    lines = run_main(tools[1], [FASHION, str(checkpoint), '--work-dir', str(tmp_path),
                                '--cfg-options', f'load_from={other}'], capsys)
    assert lines == [f"tools/test.py: error: --cfg-options load_from='{other}' names another "
                     f"checkpoint than CHECKPOINT '{checkpoint}': tools/test.py tests CHECKPOINT "
                     '(it sets load_from); drop load_from from --cfg-options']
    lines = run_main(tools[1], [FASHION, str(checkpoint), '--work-dir', str(tmp_path),
                                '--cfg-options', f'load_from={checkpoint}'], capsys)
    assert lines[0].startswith(f"tools/test.py: error: CHECKPOINT '{checkpoint}' does not "
                               'exist'), lines  # the same file: accepted

    def usage_error(argv: List[str]) -> str:
        with pytest.raises(SystemExit) as exit_info:
            tools[1].parse_args([FASHION, str(checkpoint), *argv])
        assert exit_info.value.code == 2
        prefix, message = capsys.readouterr().err.splitlines()[-1].split(' error: ', 1)
        assert prefix == 'tools/test.py:'  # as the tool's other start-up errors
        return message

    assert usage_error(['--out', 'results.json']) == (
        "--out 'results.json': the predictions (--out-item pred, the default) are written as a "
        "pickle by mmengine's DumpResults: give a file ending in .pkl or .pickle (or add "
        '--out-item metrics to write the metrics, e.g. as .json)')
    assert usage_error(['--out', 'm.txt', '--out-item', 'metrics']) == (
        "--out 'm.txt': the metrics (--out-item metrics) are written by mmengine.dump, which "
        'takes the format from the suffix: give a file ending in .json, .pickle, .pkl, .yaml '
        'or .yml')
    assert usage_error(['--out', 'm.JSON', '--out-item', 'metrics']).startswith("--out 'm.JSON'")
    assert usage_error(['--out', str(tmp_path), '--out-item', 'metrics']) == (
        f"--out '{tmp_path}' is a directory; give the path of a file to write")
    for argv in (['--out', 'p.pkl'], ['--out', 'p.pickle', '--out-item', 'pred'],
                 *(['--out', f'm.{ext}', '--out-item', 'metrics']
                   for ext in ('json', 'yaml', 'yml', 'pkl', 'pickle'))):
        assert tools[1].parse_args([FASHION, str(checkpoint), *argv]).out == argv[1]


def test_check_no_earlier_run_names_the_folder_the_files_and_the_options(tmp_path: Path) -> None:
    startup.check_no_earlier_run(str(tmp_path / 'new'))  # nothing there yet
    (tmp_path / '20260101_000000').mkdir()  # a log folder, a lock and a config: no checkpoint
    (tmp_path / '.mmpoly-run.lock').write_text('')
    (tmp_path / 'cfg.py').write_text('')
    (tmp_path / 'dir.pth').mkdir()
    startup.check_no_earlier_run(str(tmp_path))
    for name in ['last_checkpoint'] + [f'epoch_{i}.pth' for i in range(1, 7)]:
        (tmp_path / name).write_text('')
    with pytest.raises(StartupError) as error:
        startup.check_no_earlier_run(str(tmp_path))
    assert str(error.value) == (
        f"work_dir '{tmp_path}' holds the checkpoints of an earlier run (epoch_1.pth, "
        'epoch_2.pth, epoch_3.pth, epoch_4.pth, epoch_5.pth and 2 more); a new run there would '
        'overwrite them and mix its checkpoints with theirs. To continue that run, add '
        '--resume; for a new run, choose another folder with --work-dir DIR (or move this one '
        'away)')
    assert startup.earlier_run_files(str(tmp_path))[-1] == 'last_checkpoint'


def test_distributed_ranks_other_than_0_are_quiet(tools, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 waits to be ended by the launcher; if that does not happen, it reports too."""
    missing = str(tmp_path / 'nope.py')
    monkeypatch.setenv('RANK', '1')
    monkeypatch.setattr(startup, 'QUIET_RANK_WAIT_S', 0.5)
    start = time.monotonic()
    lines = run_main(tools[0], [missing, '--launcher', 'pytorch'], capsys)
    assert time.monotonic() - start >= 0.5
    assert lines == [f"tools/train.py: error (rank 1; the job was not ended after rank 0): "
                     f"config file {missing!r} does not exist; give the path of a config file, "
                     'e.g. one of configs/*.py']
    assert run_main(tools[0], [missing], capsys)[0].startswith('tools/train.py: error: config')
    monkeypatch.setenv('RANK', '0')
    assert len(run_main(tools[0], [missing, '--launcher', 'pytorch'], capsys)) == 1
    monkeypatch.setenv(startup.TRACEBACK_ENV, '1')
    lines = run_main(tools[0], [missing, '--launcher', 'pytorch'], capsys)
    assert lines[0].startswith('tools/train.py: error: config') and 'Traceback' in lines[1]


def test_imagenet_configs_check_their_data(tools, tmp_path: Path,
                                           capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lines = run_main(tools[1], [IMAGENET, str(tmp_path / 'x.pth'), '--work-dir',
                                str(tmp_path)], capsys)
    assert lines[0].startswith("tools/test.py: error: CHECKPOINT '")
    (tmp_path / 'x.pth').write_bytes(b'')
    lines = run_main(tools[1], [IMAGENET, str(tmp_path / 'x.pth'), '--work-dir', str(tmp_path)],
                     capsys)
    assert lines[0] == ("tools/test.py: error: LocalImageNet: data_root 'data/imagenet' "
                        f"(= {tmp_path / 'data/imagenet'}) does not exist."), lines
    assert '--cfg-options test_dataloader.dataset.data_root=DIR' in lines[-1]

    make_imagenet(tmp_path / 'data/imagenet')
    (tmp_path / 'data/imagenet/meta/val.txt').unlink()
    (tmp_path / 'flat').mkdir()
    cfg = Config.fromfile(IMAGENET)
    assert cfg.train_dataloader.dataset.type == 'LocalImageNet'
    LocalImageNet.check_data(cfg.train_dataloader.dataset)  # complete: no error
    # val/ has class folders: its labels come from them without meta/val.txt
    LocalImageNet.check_data(cfg.val_dataloader.dataset)
    for dataset, message in [
            (dict(data_root='data/imagenet', split='val', data_prefix='../../flat'),
             "'data/imagenet/meta/val.txt' does not exist and 'data/imagenet/../../flat' has "
             'no class folders to take the labels from'),
            (dict(data_root='data/imagenet', split='test'),
             "'data/imagenet/test' (split 'test') does not exist"),
            (dict(data_root='data/imagenet', split='train', ann_file='meta/nope.txt'),
             "ann_file 'data/imagenet/meta/nope.txt' does not exist")]:
        with pytest.raises(FileNotFoundError) as error:
            LocalImageNet.check_data(dataset)
        assert str(error.value).startswith(f'LocalImageNet: {message}.\n'), str(error.value)
    dataset = LocalImageNet(data_root='data/imagenet', split='train', lazy_init=True)
    dataset.full_init()  # the check passes inside the dataset too, and mmpretrain reads it
    assert len(dataset) == 2 and dataset.get_data_info(1)['gt_label'] == 1
    with pytest.raises(FileNotFoundError, match="'data/imagenet/meta/val.txt' does not exist"):
        LocalImageNet(data_root='data/imagenet', split='val', data_prefix='../../flat')


def test_keys_that_mmengine_ignores_are_warned_about(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each top-level mmcv 1.x key or typo of a read key with no effect gets one warning,
    before any start-up error; a key whose value the config uses (a variable) or that is None
    gets none, nor does rank 1."""
    config = tmp_path / 'ignored.py'
    config.write_text(f'_base_ = [{IMAGENET!r}]\n'
                      "lr_config = dict(policy='step', step=[30, 60])\n"
                      'evaluation = dict(interval=1, metric="accuracy")\n'
                      "param_schedulr = [dict(type='CosineAnnealingLR', T_max=7)]\n"
                      'data = dict(samples_per_gpu=64)\n'
                      'channel_last = True\n'
                      "runner = dict(type='EpochBasedTrainLoop', max_epochs=7)\n"
                      'train_cfg = runner\n'
                      'cudnn_benchmark = False\n'  # used: env_cfg.cudnn_benchmark
                      'env_cfgs = dict(cudnn_benchmark=cudnn_benchmark)\n'
                      'env_cfg = env_cfgs\n'
                      'resume_from = None\n'
                      'default_hook = None\n')
    monkeypatch.chdir(tmp_path)  # the ImageNet data is missing: the run stops at start-up
    lines = run_main(tools[0], [str(config), '--work-dir', str(tmp_path / 'work')], capsys)
    legacy = ("is an mmcv 1.x key that mmengine's Runner does not read: it has no effect on this "
              'run. Use {} instead, and remove {!r}')
    typo = ("is read by nothing (mmengine's Runner reads {0!r}): it has no effect on this run. "
            'Is it a typo of {0!r}?')
    expected = {
        'lr_config': legacy.format('param_scheduler', 'lr_config'),
        'evaluation': legacy.format('train_cfg.val_interval, val_evaluator and '
                                    'default_hooks.checkpoint.save_best', 'evaluation'),
        'param_schedulr': typo.format('param_scheduler'),
        'data': legacy.format('train_dataloader, val_dataloader and test_dataloader', 'data'),
        'channel_last': typo.format('channels_last'),
    }
    assert lines[:5] == [f"tools/train.py: warning: config key '{key}' {why}"
                         for key, why in expected.items()], lines
    assert lines[5].startswith('tools/train.py: error: LocalImageNet: data_root'), lines
    assert not any('warning' in line for line in lines[6:]), lines
    lines = run_main(tools[1], [str(config), str(tmp_path / 'x.pth')], capsys)
    assert lines[:5] == [f"tools/test.py: warning: config key '{key}' {why}"
                         for key, why in expected.items()], lines
    assert lines[5].startswith("tools/test.py: error: CHECKPOINT '"), lines
    cfg = Config.fromfile(str(config))
    # 'runner' and 'env_cfgs' are used: merged into the base's train_cfg and env_cfg
    assert cfg.train_cfg.max_epochs == 7 and cfg.train_cfg != cfg.runner
    assert cfg.env_cfg != cfg.env_cfgs
    assert startup.warn_ignored_keys(cfg, 'x') == list(expected)
    capsys.readouterr()
    monkeypatch.setenv('RANK', '1')
    assert startup.warn_ignored_keys(cfg, 'x', 'pytorch') == list(expected)
    assert capsys.readouterr().err == ''
    # none of the shipped configs has such a key (and every one of them passes the model check
    # of tools/train.py and tools/test.py: test_an_argument_a_model_part_does_not_take_is_one_line)
    shipped_configs = sorted(CONFIGS.glob('*.py'))
    assert len(shipped_configs) > 100
    for shipped in shipped_configs:
        shipped_cfg = Config.fromfile(str(shipped))
        assert startup.warn_ignored_keys(shipped_cfg, 'x') == [], shipped
        check_model_config(shipped_cfg, str(shipped))
        startup.check_optimizer(shipped_cfg)
        startup.check_dataloaders(shipped_cfg, ['train_dataloader', 'val_dataloader',
                                                'test_dataloader'])


def test_bad_learning_rates_and_batch_sizes_are_one_line(tools, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    """torch refused a negative lr or momentum, and a batch size of 0, with a traceback once the
    Runner was built; a NaN lr trained until the first non-finite weight."""
    train, test = tools
    work = str(tmp_path / 'w')
    for option, message in [
            ('optim_wrapper.optimizer.lr=-0.1', 'optim_wrapper.optimizer.lr must be a finite '
             'number >= 0, got -0.1'),
            ('optim_wrapper.optimizer.lr=nan', 'optim_wrapper.optimizer.lr must be a finite '
             'number >= 0, got nan'),
            ('optim_wrapper.optimizer.momentum=-1', 'optim_wrapper.optimizer.momentum must be '
             'a finite number >= 0, got -1'),
            ('train_dataloader.batch_size=0', 'train_dataloader.batch_size must be a whole '
             'number >= 1 (the samples per step of each process), got 0'),
            ('val_dataloader.batch_size=2.5', 'val_dataloader.batch_size must be a whole number '
             '>= 1 (the samples per step of each process), got 2.5')]:
        assert run_main(train, [FASHION, '--work-dir', work, '--cfg-options', option],
                        capsys) == [f'tools/train.py: error: {message}']
    assert run_main(test, [FASHION, str(tmp_path / 'x.pth'), '--work-dir', work,
                           '--cfg-options', 'test_dataloader.batch_size=-4'], capsys) == [
        'tools/test.py: error: test_dataloader.batch_size must be a whole number >= 1 (the '
        'samples per step of each process), got -4']


def test_edit_distance() -> None:
    distance = startup._edit_distance
    assert [distance(a, b) for a, b in [('', ''), ('abc', ''), ('', 'ab'), ('kitten', 'sitting'),
                                        ('param_schedulr', 'param_scheduler'),
                                        ('conv_cfg', 'env_cfg'), ('test_pipeline', 'tta_pipeline'),
                                        ('flaw', 'lawn')]] == [0, 3, 2, 3, 1, 2, 3, 2]


@pytest.mark.parametrize('package, config, keys', [
    ('mmdet', 'guided_anchoring/ga-fast-rcnn_r50-caffe_fpn_1x_coco.py',
     ['data', 'optimizer_config']),
    ('mmpretrain', 'hornet/hornet-tiny_8xb128_in1k.py', ['data']),
    ('mmpretrain', 'vision_transformer/vit-base-p16_4xb544-ipu_in1k.py',
     ['data', 'runner', 'fp16']),
    # cudnn_benchmark = True in _base_/models/ssd300.py; env_cfg.cudnn_benchmark stays False
    ('mmdet', 'ssd/ssd300_coco.py', ['cudnn_benchmark']),
    ('mmpretrain', 'lenet/lenet5_mnist.py', []),  # resume_from = None: nothing lost
    ('mmdet', 'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py', []),
    ('mmpretrain', 'resnet/resnet18_8xb32_in1k.py', []),
])
def test_upstream_configs_with_keys_mmengine_ignores(
        package: str, config: str, keys: List[str], capsys: pytest.CaptureFixture) -> None:
    """Configs that mmdet 3.3 and mmpretrain 1.2 ship with keys mmengine ignores (a warning, not
    an error: the run goes on), and three without."""
    import importlib
    root = Path(importlib.import_module(package).__file__).parent / '.mim' / 'configs'
    assert startup.warn_ignored_keys(Config.fromfile(str(root / config)), 'x') == keys
    assert capsys.readouterr().err.count('x: warning: config key') == len(keys)


def test_a_distributed_launcher_without_its_environment_is_one_message(tmp_path: Path) -> None:
    """``--launcher pytorch`` outside torchrun: the missing variables and how to start the job,
    as one error line with exit status 1, from both tools."""
    import torch
    checkpoint = tmp_path / 'weights.pth'
    torch.save(dict(meta={}, state_dict={}), checkpoint)
    expected = ("error: --launcher pytorch needs the environment variables ['RANK', "
                "'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'], which are not set; start the job "
                'with tools/dist_train.sh / python -m torch.distributed.run')
    for tool, extra in (('train.py', []), ('test.py', [str(checkpoint)])):
        code, lines = run_tool([str(TOOLS / tool), FASHION, *extra, '--work-dir',
                                str(tmp_path / tool), '--launcher', 'pytorch'])
        assert code == 1, lines
        assert lines[-1] == f'tools/{tool}: {expected}', lines
        assert not any('Traceback' in line for line in lines), lines


def test_compile_options_merge_into_compile_and_a_typo_is_one_message(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--compile`` (compile_model=True) with ``--cfg-options compile_model.backend=eager``: the
    key goes into a dict of the defaults (mmengine cannot merge a key into True); an unknown
    torch.compile option is refused before the Runner is built."""
    train_tool = tools[0]
    args = train_tool.parse_args([FASHION, '--work-dir', str(tmp_path / 'w'), '--compile',
                                  '--cfg-options', 'compile_model.backend=eager'])
    cfg = train_tool.merge_args(load_config(FASHION), args)
    assert cfg.compile_model == dict(backend='eager')
    args = train_tool.parse_args([FASHION, '--work-dir', str(tmp_path / 'w'), '--compile'])
    assert train_tool.merge_args(load_config(FASHION), args).compile_model is True
    lines = run_main(train_tool, [FASHION, '--work-dir', str(tmp_path / 'w'), '--compile',
                                  '--cfg-options', 'compile_model.backnd=eager'], capsys)
    assert lines[-1] == ("tools/train.py: error: compile_model: unknown torch.compile option(s) "
                         "['backnd']; allowed: ['backend', 'mode', 'dynamic', 'fullgraph', "
                         "'options']"), lines
    # mmengine's compile beside it: one message before the Runner is built (no work_dir made)
    lines = run_main(train_tool, [FASHION, '--work-dir', str(tmp_path / 'w'), '--compile',
                                  '--cfg-options', 'compile=True'], capsys)
    assert lines[-1] == ("tools/train.py: error: compile_model and mmengine's compile are both "
                         "set: mmengine's compile=True compiles train_step with the optimizer "
                         "step (it recompiles on every learning-rate change); keep "
                         "compile_model only"), lines
    assert not (tmp_path / 'w').exists()


def test_dist_cfg_keys_are_the_launchers_and_the_process_groups(
        tools, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A typo in env_cfg.dist_cfg is refused by both tools before anything starts (one process
    would ignore it; a distributed job fails on it in init_process_group)."""
    import inspect

    import torch.distributed
    allowed = startup.dist_cfg_keys()
    passed_on = set(inspect.signature(torch.distributed.init_process_group).parameters)
    assert {'backend', 'init_backend', 'port', 'timeout', 'init_method'} <= set(allowed)
    assert set(allowed) - {'init_backend', 'port'} == \
        {name for name in passed_on - {'rank', 'world_size'} if not name.startswith('_')}
    cfg = Config.fromfile(FASHION)
    startup.check_dist_cfg(cfg)  # the configs' own dist_cfg
    cfg.merge_from_dict({'env_cfg.dist_cfg.timeout': 10,
                         'env_cfg.dist_cfg.init_backend': 'torch'})
    startup.check_dist_cfg(cfg)
    checkpoint = tmp_path / 'weights.pth'
    checkpoint.write_bytes(b'')
    for tool, extra in ((tools[0], []), (tools[1], [str(checkpoint)])):
        lines = run_main(tool, [FASHION, *extra, '--work-dir', str(tmp_path / 'w'),
                                '--cfg-options', 'env_cfg.dist_cfg.timeot=10'], capsys)
        assert lines[-1].endswith(
            'error: env_cfg.dist_cfg.timeot: not an option of mmengine.dist.init_dist or '
            'torch.distributed.init_process_group (close matches: timeout). Allowed: '
            + ', '.join(allowed)), lines
