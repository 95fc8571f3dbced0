"""Bad inputs of the detection inference tool, the model hub registration, the model zoo suite
and the plotting / paper-table tools: each is refused with a message that names the option, the
value and what is allowed (not a raw error from deep inside torch, mmengine or mmdet, nor
silently accepted)."""
import os
from pathlib import Path
from typing import Any, List

import cv2
import numpy as np
import pytest
import torch
from helpers import CONFIGS, REPO, load_tool, save_detector_checkpoint


DETECTOR = CONFIGS / 'mask-rcnn_resnet18_fpn_1x_coco.py'
CLASSIFIER = CONFIGS / 'pdc3_resnet8_1xb128-1400i_fashion-mnist.py'
CLASSIFIER_CHECKPOINT = next((REPO / 'checkpoints' / 'fashion-mnist').glob('pdc3_resnet8_*.pth'))
ZOO_CONFIG = 'resnet8_1xb128-1400i_fashion-mnist'


def _not_reached(*args: Any, **kwargs: Any) -> None:
    raise AssertionError('a bad option must be refused before any model is built')


def _image(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.random.RandomState(0).randint(0, 255, (48, 64, 3), np.uint8))
    return path


@pytest.fixture(scope='module')
def detector_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The detector's initial weights, saved as a checkpoint that fits it (80 COCO classes)."""
    return save_detector_checkpoint(DETECTOR, tmp_path_factory.mktemp('det') / 'det.pth')


# --------------------------------------------------------------------------- det_inference


def _usage_error(argv: List[str], capsys: pytest.CaptureFixture) -> str:
    """Run det_inference with ``argv``; it must exit with status 2 before any model is built."""
    tool = load_tool('det_inference')
    tool.build_inferencer = _not_reached
    with pytest.raises(SystemExit) as exit_info:
        tool.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'Traceback' not in err and err.count('error:') == 1
    return err


@pytest.mark.parametrize('option, message', [
    (['--palette', 'foo'], "--palette 'foo' is not a palette; allowed: coco, voc, citys, random, "
     'none, red, green, blue, cyan, yellow, magenta, white, black'),
    (['--device', 'gpu'], "--device 'gpu': not a torch device; e.g. cpu, cuda, cuda:0"),
])
def test_det_inference_refuses_a_bad_palette_or_device(tmp_path: Path, option: List[str],
                                                       message: str,
                                                       capsys: pytest.CaptureFixture) -> None:
    """They used to end in a KeyError of mmcv's colour table / a RuntimeError of torch."""
    image = _image(tmp_path / 'a.jpg')
    err = _usage_error([str(image), str(DETECTOR), 'unused.pth', *option], capsys)
    assert f': error: {message}\n' in err


def test_det_inference_refuses_cuda_without_a_gpu(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    image = _image(tmp_path / 'a.jpg')
    err = _usage_error([str(image), str(DETECTOR), 'unused.pth', '--device', 'cuda:0'], capsys)
    assert "error: --device 'cuda:0': CUDA is not available on this machine; use --device cpu" \
        in err


def test_det_inference_refuses_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture
                                          ) -> None:
    """A missing input used to end in a raw FileNotFoundError; a file that is no image and an
    empty folder in an AssertionError of mmcv, or in nothing done at all."""
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'notes.txt').write_text('no image')
    cases = {
        'missing.jpg': "error: input 'missing.jpg' does not exist",
        str(tmp_path / 'notes.txt'): f"error: input '{tmp_path / 'notes.txt'}' is not an image "
        'OpenCV can read',
        str(tmp_path / 'empty'): f"error: input folder '{tmp_path / 'empty'}' holds no image "
        '(files ending in .jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, .webp)',
    }
    for path, message in cases.items():
        assert message in _usage_error([path, str(DETECTOR), 'unused.pth'], capsys)


def test_det_inference_refuses_inputs_whose_outputs_collide(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture
                                                            ) -> None:
    """Two images of one name (in two folders, or a.jpg and a.png) wrote the same vis/ image or
    preds/ JSON: the second silently replaced the first."""
    first, second = _image(tmp_path / 'd1' / 'x.jpg'), _image(tmp_path / 'd2' / 'x.jpg')
    err = _usage_error([str(first.parent), str(second.parent), str(DETECTOR), 'unused.pth'],
                       capsys)
    assert f"error: inputs '{first}' and '{second}' have the same name 'x': their outputs " \
        '(vis/ and preds/x.json) would overwrite each other; rename one or run them ' \
        'separately' in err
    other = _image(tmp_path / 'd2' / 'x.png')
    err = _usage_error([str(first), str(other), str(DETECTOR), 'unused.pth'], capsys)
    assert "have the same name 'x'" in err


def test_det_inference_refuses_an_out_dir_that_is_a_file(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    image, out = _image(tmp_path / 'a.jpg'), tmp_path / 'out'
    out.write_text('')
    err = _usage_error([str(image), str(DETECTOR), 'unused.pth', '--out-dir', str(out)], capsys)
    assert f"error: --out-dir '{out}' is a file, not a folder" in err


@pytest.mark.parametrize('config, checkpoint, cfg_options, message', [
    ('missing.py', None, [], "config file 'missing.py' does not exist"),
    (str(CLASSIFIER), str(CLASSIFIER_CHECKPOINT), [],
     f"config {CLASSIFIER}: its model (type 'ImageClassifier') is not an mmdet detector; give "
     'a detection config, e.g. configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py'),
    (str(DETECTOR), 'missing.pth', [], "CHECKPOINT 'missing.pth' does not exist"),
    (str(DETECTOR), str(CLASSIFIER_CHECKPOINT), ['model.test_cfg.rcnn.score_th=0'],
     'unknown --cfg-options key: model.test_cfg.rcnn.score_th: model.test_cfg.rcnn has no key '
     "'score_th' (close matches: score_thr)"),
])
def test_det_inference_checks_config_checkpoint_and_cfg_options_before_building(
        tmp_path: Path, config: str, checkpoint: str, cfg_options: List[str], message: str,
        capsys: pytest.CaptureFixture) -> None:
    """One message, exit status 1 (as tools/test.py): a missing file used to be a raw
    FileNotFoundError, a classifier config a KeyError of mmdet's registry, and a mistyped
    --cfg-options key was silently ignored."""
    tool = load_tool('det_inference')
    tool.build_inferencer = _not_reached
    image = _image(tmp_path / 'a.jpg')
    argv = [str(image), config, checkpoint or str(CLASSIFIER_CHECKPOINT),
            '--out-dir', str(tmp_path / 'out')]
    if cfg_options:
        argv += ['--cfg-options', *cfg_options]
    with pytest.raises(SystemExit) as exit_info:
        tool.main(argv)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert f'tools/det_inference.py: error: {message}' in err and 'Traceback' not in err
    assert not (tmp_path / 'out').exists()


def test_det_inference_refuses_a_checkpoint_that_does_not_fit(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture
                                                              ) -> None:
    """A classifier's checkpoint given for a detector: mmdet loaded what fitted, warned, and
    detected with random weights (exit status 0)."""
    tool = load_tool('det_inference')
    image = _image(tmp_path / 'a.jpg')
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(image), str(DETECTOR), str(CLASSIFIER_CHECKPOINT),
                   '--out-dir', str(tmp_path / 'out')])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert f'tools/det_inference.py: error: CHECKPOINT {CLASSIFIER_CHECKPOINT} does not fit ' \
        'the model of the config:\n' in err
    assert 'model key(s) missing from the checkpoint:' in err and 'Traceback' not in err
    assert not (tmp_path / 'out' / 'vis').exists()


def test_det_inference_reads_several_folders_with_a_fitting_checkpoint(
        tmp_path: Path, detector_checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    """Several folders used to be handed to mmdet as image files (IsADirectoryError); a fitting
    checkpoint passes the strict check; a palette with too few colours is refused."""
    tool = load_tool('det_inference')
    first, second = _image(tmp_path / 'd1' / 'x.jpg'), _image(tmp_path / 'd2' / 'y.png')
    (tmp_path / 'd1' / 'notes.txt').write_text('not an image: left out, as mmdet does')
    out = tmp_path / 'out'
    assert tool.main([str(first.parent), str(second.parent), str(DETECTOR),
                      str(detector_checkpoint), '--out-dir', str(out)]) == []
    assert sorted(p.name for p in (out / 'vis').iterdir()) == ['x.jpg', 'y.png']
    assert sorted(p.name for p in (out / 'preds').iterdir()) == ['x.json', 'y.json']
    assert f'{out / "vis" / "x.jpg"} is the image as it was' in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(first), str(DETECTOR), str(detector_checkpoint), '--out-dir',
                   str(tmp_path / 'out2'), '--palette', 'citys'])
    assert exit_info.value.code == 1
    assert "error: --palette 'citys' has fewer colours than the model's 80 classes; choose " \
        'another palette' in capsys.readouterr().err


# --------------------------------------------------------------------------- model hub


def _index(folder: Path, models: str) -> str:
    (folder / 'metafile.yml').write_text('Models:\n' + models)
    index = folder / 'model-index.yml'
    index.write_text('Import:\n  - metafile.yml\n')
    return str(index)


def test_register_model_hub_names_a_model_without_a_name(tmp_path: Path) -> None:
    """It used to fail with AttributeError: 'NoneType' object has no attribute 'lower'."""
    from mmpoly.utils import register_model_hub
    index = _index(tmp_path, '  - Name: my_net\n    Config: a.py\n  - Config: b.py\n')
    with pytest.raises(ValueError, match=f"a model of {tmp_path / 'metafile.yml'} \\(Config "
                       f"'b.py'\\) has no Name; every model needs a Name \\(its hub name\\)"):
        register_model_hub(index)


def test_register_model_hub_refuses_a_name_registered_by_another_index(tmp_path: Path) -> None:
    """Another index's model of an mmpoly name silently replaced mmpoly's model in the hub
    (mmpretrain's own registration refuses such a conflict)."""
    from mmpretrain.apis.model import ModelHub

    from mmpoly.utils import mmpoly_model_names, model_index_path, register_model_hub
    name = mmpoly_model_names()[-1]
    before = ModelHub._models_dict[name]
    index = _index(tmp_path, f'  - Name: my_new_net\n    Config: a.py\n'
                   f'  - Name: {name.upper()}\n    Config: b.py\n')
    with pytest.raises(ValueError, match=f"model name '{name}' of {tmp_path / 'metafile.yml'} "
                       f'is registered already, from .*metafile.yml; rename the model'):
        register_model_hub(index)
    assert ModelHub._models_dict[name] is before and 'my_new_net' not in ModelHub._models_dict
    # the same index again, by another path spelling, is no conflict
    assert register_model_hub(os.path.relpath(model_index_path())) == mmpoly_model_names()


# --------------------------------------------------------------------------- run_suite


@pytest.mark.parametrize('options, message', [
    (['--configs', ZOO_CONFIG, f'{ZOO_CONFIG}.py'],
     f'--configs names {ZOO_CONFIG} more than once; each run would be trained again over the '
     'one before (give each once)'),
    (['--seeds', '0', '1', '0'], '--seeds names 0 more than once'),
])
def test_run_suite_refuses_a_run_named_twice(options: List[str], message: str,
                                             capsys: pytest.CaptureFixture) -> None:
    """It planned (and would train) the same run twice, the second over the first."""
    tool = load_tool('model_zoo/run_suite')
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args(['--dry-run', *options])
    assert exit_info.value.code == 2
    assert f': error: {message}' in capsys.readouterr().err


def test_run_suite_checks_cfg_options_before_planning(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    """A mistyped key passed --dry-run, and failed every training run one after the other."""
    tool = load_tool('model_zoo/run_suite')
    monkeypatch.setattr(tool, 'run_one', _not_reached)
    assert tool.main(['--configs', ZOO_CONFIG, '--seeds', '0', '--work-root', str(tmp_path),
                      '--cfg-options', 'optim_wrapper.optimizer.lrr=0.1']) == 2
    assert f"error: {ZOO_CONFIG}: unknown --cfg-options key: optim_wrapper.optimizer.lrr: 'lrr' " \
        "is not a key of optim_wrapper.optimizer nor an argument of its type 'SGD' (close " \
        'matches: lr)' in capsys.readouterr().err
    assert tool.cfg_options_problem(ZOO_CONFIG, {'optim_wrapper.optimizer.lr': 1000}) is None


# --------------------------------------------------------------------------- plotting, tables


def _regime_run(root: Path, wrapper_cfg: str) -> Path:
    work_dir = root / 'run1'
    (work_dir / '20250101_000000' / 'vis_data').mkdir(parents=True)
    (work_dir / '20250101_000000' / 'vis_data' / 'scalars.json').write_text(
        '{"accuracy/top1": 61.5, "step": 3}\n')
    (work_dir / 'run1.py').write_text(f'train_dataloader = dict(dataset={wrapper_cfg})\n')
    return work_dir


def test_plot_data_regimes_refuses_an_out_suffix_matplotlib_cannot_write(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """It used to read every run, then fail in matplotlib's savefig (ValueError)."""
    tool = load_tool('analysis_tools/plot_data_regimes')
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(tmp_path), '--out', str(tmp_path / 'plot.txt')])
    assert exit_info.value.code == 2
    assert f'error: --out {tmp_path / "plot.txt"}: matplotlib cannot write .txt files; allowed ' \
        'suffixes: ' in capsys.readouterr().err
    assert tool.parse_args([str(tmp_path), '--out', 'plot.pdf']).out == 'plot.pdf'


def test_plot_data_regimes_uses_the_wrapper_default(tmp_path: Path) -> None:
    """A LimitedDataset left at its default images_per_class (50) ended in a TypeError."""
    tool = load_tool('analysis_tools/plot_data_regimes')
    _regime_run(tmp_path, "dict(type='LimitedDataset', dataset=dict(type='CIFAR10'))")
    (run, ) = tool.collect_runs([str(tmp_path)])
    assert (run.regime, run.x, run.accuracy) == ('images_per_class', 50.0, 61.5)


def test_paper_table_refuses_a_configs_root_that_is_no_folder(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture
                                                              ) -> None:
    """Every row used to be measured and reported as a build failure."""
    tool = load_tool('analysis_tools/paper_table')
    with pytest.raises(SystemExit) as exit_info:
        tool.main(['--no-flops', '--configs-root', str(tmp_path / 'missing')])
    assert exit_info.value.code == 2
    assert f"error: --configs-root {tmp_path / 'missing'}: not a folder (the folder the rows' " \
        'config paths, e.g. resnet18_1xb128_cifar100.py, are relative to)' \
        in capsys.readouterr().err


# --------------------------------------------------------------------------- zoo results file


def test_zoo_results_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    """It used to be a raw JSONDecodeError that named no file."""
    from mmpoly.zoo.fashion_mnist import load_results
    path = tmp_path / 'zoo_results.json'
    path.write_text('{"models": ')
    with pytest.raises(ValueError, match=f'{path}: not a JSON results file \\(Expecting value'):
        load_results(path)


def test_zoo_results_entry_with_weights_needs_their_top1() -> None:
    """It used to be KeyError: 'weights_top1'."""
    from mmpoly.zoo.metafile import _metrics
    with pytest.raises(ValueError, match="results-file entry with weights 'x.pth' needs "
                       'weights_top1, the top-1 of those weights \\(a number\\); got None'):
        _metrics({'weights': 'x.pth', 'top1': [90.0]})
    assert _metrics({'weights': 'x.pth', 'weights_top1': 90.123})['Top 1 Accuracy'] == 90.12
