"""Gaps of the detection and deployment tools found by an audit: each bad input is one usage
error (status 2) that names the option, the value and what is allowed, refused before anything
is written; results are published only when they are results; the docs say what the tools do.

det_inference.py checked its inputs with ``cv2.imread``, which returns the top of a truncated
JPEG, while the run decodes with ``mmcv.imfrombytes`` (``cv2.imdecode``), which returns nothing:
the run failed mid-way. make_fashion_coco.py wrote the whole set before finding that a
``--configs`` entry had no mask head, and ended in tracebacks for an OUT that is a file, a
negative ``--seed`` and a ``--fashion-mnist-root`` without the data (leaving an empty folder).
detection_protocol.py ended in tracebacks for missing files, work_dirs and cases, and had no
``--seed``. onnx_zoo_parity.py overwrote the published results with those of a failing run.
benchmark.py --onnx crashed on a detector config after building the models. pytorch2onnx.py did
not say what preprocessing its graph expects, and the docs said no BGR→RGB was needed.
"""
import dataclasses
import json
from pathlib import Path
from typing import Any, Dict, List

import cv2
import numpy as np
import pytest
from helpers import CONFIGS, REPO, load_tool
from mmengine.config import Config

DETECTOR = CONFIGS / 'mask-rcnn_resnet18_fpn_1x_coco.py'
FASHION_CLASSIFIER = CONFIGS / 'resnet8_1xb128-1400i_fashion-mnist.py'


def _usage_error(call: Any, capsys: pytest.CaptureFixture) -> str:
    """stderr of ``call()``, which must exit with status 2 and print one error, no traceback."""
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'Traceback' not in err and err.count('error:') == 1, err
    return err


def _not_reached(*args: Any, **kwargs: Any) -> None:
    raise AssertionError('a bad option must be refused before this is reached')


# --------------------------------------------------------------------------- det_inference


def _truncated_jpeg(path: Path) -> Path:
    """A JPEG of a smooth image cut to 50 % of its bytes: OpenCV's ``imread`` returns its top
    part (the old check passed it), ``imdecode`` (mmcv's loader) returns nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:128, 0:160]
    image = np.stack([x * 1.5, y * 2.0, (x + y) * 0.8], axis=-1).astype(np.uint8)
    ok, data = cv2.imencode('.jpg', image)
    assert ok
    path.write_bytes(data.tobytes()[:len(data) // 2])
    return path


def test_det_inference_refuses_a_truncated_jpeg_that_opencv_imread_half_reads(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('det_inference')
    tool.build_inferencer = _not_reached
    good = tmp_path / 'in' / 'a.jpg'
    good.parent.mkdir()
    assert cv2.imwrite(str(good), np.full((48, 64, 3), 128, np.uint8))
    broken = _truncated_jpeg(tmp_path / 'in' / 'b.jpg')
    assert cv2.imread(str(broken)) is not None  # the case the old check let through
    import mmcv
    assert mmcv.imfrombytes(broken.read_bytes()) is None  # and the run then failed on
    out = tmp_path / 'out'
    err = _usage_error(lambda: tool.main([str(good), str(broken), str(DETECTOR), 'unused.pth',
                                          '--out-dir', str(out)]), capsys)
    assert (f"error: input {str(broken)!r} does not decode (a truncated or damaged image "
            "file?): mmcv.imfrombytes(flag='color', backend='cv2'), as the run would read it, "
            'returns no image') in err
    assert not out.exists()


def test_det_inference_decodes_as_the_config_s_loader_does(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The test pipeline's LoadImageFromFile settings (after --cfg-options) decide the decoder,
    and mmdet's visualiser decodes again with mmcv's default backend."""
    tool = load_tool('det_inference')
    assert tool.image_decoders(str(DETECTOR), {}) == [('color', 'cv2')]
    pillow = {'test_dataloader.dataset.pipeline.0.imdecode_backend': 'pillow'}
    assert tool.image_decoders(str(DETECTOR), pillow) == [('color', 'pillow'), ('color', 'cv2')]
    assert tool.image_decoders('missing.py', {}) == [tool.DEFAULT_DECODER]  # reported later
    broken = _truncated_jpeg(tmp_path / 'b.jpg')
    err = _usage_error(lambda: tool.parse_args([
        str(broken), str(DETECTOR), 'unused.pth', '--cfg-options',
        'test_dataloader.dataset.pipeline.0.imdecode_backend=pillow']), capsys)
    assert f"error: input {str(broken)!r} does not decode" in err
    assert "mmcv.imfrombytes(flag='color', backend='pillow')" in err


# --------------------------------------------------------------------------- make_fashion_coco


@pytest.fixture(scope='module')
def coco_tool() -> Any:
    return load_tool('dataset_converters/make_fashion_coco')


def test_make_fashion_coco_refuses_a_config_without_a_mask_head_before_writing(
        tmp_path: Path, coco_tool: Any, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / 'faster-rcnn_coco.py'
    config.write_text("_base_ = 'mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py'\n")
    out = tmp_path / 'set'
    err = _usage_error(lambda: coco_tool.main([str(out), '--train', '1', '--val', '1',
                                               '--configs', str(config)]), capsys)
    assert (f'error: --configs: {config}: its model has no roi_head.mask_head: Fashion-COCO '
            'configs are made for instance segmentation detectors') in err
    assert not out.exists()


@pytest.mark.parametrize('case', ['out-is-a-file', 'out-under-a-file', 'negative-seed',
                                  'seed-too-large', 'missing-fashion-mnist',
                                  'fashion-mnist-root-without-data'])
def test_make_fashion_coco_checks_out_seed_and_data_before_creating_anything(
        case: str, tmp_path: Path, coco_tool: Any, capsys: pytest.CaptureFixture) -> None:
    afile = tmp_path / 'afile'
    afile.write_text('not a folder')
    empty = tmp_path / 'empty'
    empty.mkdir()
    out = tmp_path / 'set'
    options = {
        'out-is-a-file': ([str(afile)], f"OUT '{afile}' is a file, not a folder; choose "
                          'another folder'),
        'out-under-a-file': ([str(afile / 'set')], f"OUT '{afile / 'set'}' cannot be created: "
                             f'{afile} is a file, not a folder'),
        'negative-seed': ([str(out), '--seed', '-1'],
                          '--seed must be a whole number from 0 to 4294967295, got -1'),
        'seed-too-large': ([str(out), '--seed', str(2**32)],
                           f'--seed must be a whole number from 0 to 4294967295, got {2**32}'),
        'missing-fashion-mnist': ([str(out), '--fashion-mnist-root', str(tmp_path / 'no')],
                                  f"--fashion-mnist-root '{tmp_path / 'no'}' does not exist; on "
                                  'Debian/Ubuntu: apt-get install dataset-fashion-mnist'),
        'fashion-mnist-root-without-data': (
            [str(out), '--fashion-mnist-root', str(empty)],
            f"--fashion-mnist-root '{empty}' lacks train-images-idx3-ubyte.gz, "
            'train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz'),
    }
    argv, message = options[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    err = _usage_error(lambda: coco_tool.main([*argv, '--train', '1', '--val', '1',
                                               '--configs']), capsys)
    assert f'error: {message}' in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not any(empty.iterdir())


def test_generated_config_s_top_level_pipelines_are_its_dataloaders(coco_tool: Any) -> None:
    """They kept the COCO config's Resize 1333×800 while the dataloaders resize to the set's
    size: a reader of the config was misled."""
    cfg = coco_tool.fashion_config(str(DETECTOR), (128, 160))
    assert cfg.train_pipeline == cfg.train_dataloader.dataset.pipeline
    assert cfg.test_pipeline == cfg.test_dataloader.dataset.pipeline
    assert cfg.test_pipeline == cfg.val_dataloader.dataset.pipeline
    scales = [t.scale for t in (*cfg.train_pipeline, *cfg.test_pipeline) if t.type == 'Resize']
    assert scales == [(160, 128), (160, 128)]
    assert '1333' not in cfg.pretty_text


# --------------------------------------------------------------------------- detection_protocol


@pytest.fixture(scope='module')
def protocol() -> Any:
    return load_tool('detection_protocol')


def test_detection_protocol_bad_files_and_cases_are_usage_errors(
        tmp_path: Path, protocol: Any, capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / 'results.json'
    results.write_text(json.dumps(dict(protocol=protocol.PROTOCOLS['short'].to_json(),
                                       cases={}, pretrain={}, findings={})))
    missing = tmp_path / 'nowhere.json'
    cases = {
        ('table', str(missing)): f"RESULTS '{missing}' does not exist; allowed: a results.json "
        'of a run, or the work_dir of a run',
        ('table', str(results), '--write', str(tmp_path / 'missing.md')):
        f"--write '{tmp_path / 'missing.md'}' does not exist; give the page holding the table "
        'block',
        ('report', str(tmp_path / 'nowhere')): f"WORK_DIR '{tmp_path / 'nowhere'}' does not "
        'exist; give the work_dir of a `tools/detection_protocol.py run` (its --work-dir)',
        ('training-split', str(tmp_path)): f'WORK_DIR: {tmp_path} is not a protocol work_dir: '
        'no protocol.json',
        ('run', '--case', 'bogus', '--work-dir', str(tmp_path / 'w')):
        "--case bogus: not a case of protocol 'full'; allowed: mask-rcnn_resnet18_pretrained, ",
        ('run', '--protocol', 'short', '--backbone', 'pdc-resnet18', '--work-dir',
         str(tmp_path / 'w')): "--backbone pdc-resnet18: not in protocol 'short'; allowed: "
        'resnet18',
    }
    for argv, message in cases.items():
        assert f'error: {message}' in _usage_error(lambda: protocol.main(list(argv)), capsys)
    assert not (tmp_path / 'w').exists()
    page = tmp_path / 'page.md'
    page.write_text('no table block here\n')
    err = _usage_error(lambda: protocol.main(['table', str(results), '--write', str(page)]),
                       capsys)
    assert f"error: --write '{page}' has no {protocol.TABLE_START} ..." in err
    assert page.read_text() == 'no table block here\n'
    assert not (tmp_path / protocol.RESULTS_NEXT_TO_PAGE).exists()


def test_detection_protocol_run_takes_a_seed(
        tmp_path: Path, protocol: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """The docs report the short protocol with seeds 0, 1 and 2; ``run`` had no --seed."""
    ran: List[Any] = []
    monkeypatch.setattr(protocol.ProtocolRun, 'run',
                        lambda self, backbones, cases: ran.append((self.p, self.work_dir)))
    monkeypatch.chdir(tmp_path)
    protocol.main(['run', '--protocol', 'short', '--seed', '2'])
    (short, work_dir), = ran
    assert short == dataclasses.replace(protocol.PROTOCOLS['short'], seed=2)
    assert work_dir == str(tmp_path / 'work_dirs' / 'detection_protocol_short_seed2')
    run = protocol.ProtocolRun(short, str(tmp_path / 'w'))
    assert 'randomness.seed=2' in run.pretrain_options()
    run.check_protocol()  # protocol.json records the seed; the work_dir is read back with it
    assert json.loads((tmp_path / 'w' / 'protocol.json').read_text())['seed'] == 2
    again = protocol.ProtocolRun.of_work_dir(str(tmp_path / 'w'))
    assert again.p == short and again.results()['protocol']['seed'] == 2
    assert protocol.render_table(again.results()).startswith('Protocol `short` (seed 2)')
    ran.clear()
    protocol.main(['run', '--protocol', 'short', '--seed', '0'])  # the protocol's own seed
    assert ran == [(protocol.PROTOCOLS['short'],
                    str(tmp_path / 'work_dirs' / 'detection_protocol_short'))]
    err = _usage_error(lambda: protocol.main(['run', '--seed', '-1']), capsys)
    assert "error: argument --seed: '-1'; allowed: a whole number from 0 to 4294967295" in err
    # a work_dir started with another seed is refused up front, by option
    err = _usage_error(lambda: protocol.main(['run', '--protocol', 'short', '--work-dir',
                                              str(tmp_path / 'w')]), capsys)
    assert (f"error: --work-dir '{tmp_path / 'w'}' was started under another protocol (differs "
            'in seed; there: seed=2)') in err


# --------------------------------------------------------------------------- onnx_zoo_parity


def _zoo_results(passed: bool) -> Dict[str, Any]:
    model = dict(name='resnet8_1xb128-1400i_fashion-mnist', config='c.py', weights='w.pth',
                 input_shape=[1, 28, 28], num_images=10000, metafile_top1=90.0,
                 onnx_top1=90.0 if passed else 89.5, pytorch_top1=90.0,
                 agreeing_predictions=10000 if passed else 9990, max_abs_logit_diff=1e-5,
                 max_rel_logit_diff=1e-6)
    return dict(note='test', command='test', versions={}, opset=20, models=[model],
                passed=passed)


@pytest.mark.parametrize('passed', [False, True], ids=['failing', 'passing'])
def test_onnx_zoo_parity_publishes_only_a_passing_run(
        passed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('deployment/onnx_zoo_parity')
    published = tmp_path / 'onnx_parity.json'
    published.write_text('{"published": true}\n')
    page = tmp_path / 'deployment.md'
    page.write_text(f'{tool.TABLE_START}\nthe published table\n{tool.TABLE_END}\n')
    monkeypatch.setattr(tool, 'RESULTS_FILE', published)
    monkeypatch.setattr(tool, 'DOCS_PAGE', page)
    monkeypatch.setattr(tool, 'run', lambda *args: _zoo_results(passed))
    failed = tmp_path / 'failed' / 'results.json'
    code = tool.main(['--update-docs', '--failed-out', str(failed)])
    printed = capsys.readouterr().out
    if passed:
        assert code == 0 and not failed.exists()
        assert json.loads(published.read_text())['passed'] is True
        assert 'the published table' not in page.read_text()
        return
    assert code == 1
    assert published.read_text() == '{"published": true}\n'
    assert 'the published table' in page.read_text()
    assert json.loads(failed.read_text()) == _zoo_results(False)
    assert (f'FAIL: 1 of 1 models did not pass (resnet8_1xb128-1400i_fashion-mnist); their '
            f'results are in {failed}; {published} and {page} were left as they were') in printed


def test_onnx_zoo_parity_checks_failed_out_before_running(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('deployment/onnx_zoo_parity')
    monkeypatch.setattr(tool, 'run', _not_reached)
    err = _usage_error(lambda: tool.main(['--failed-out', str(tmp_path)]), capsys)
    assert f"error: --failed-out '{tmp_path}': is a folder; give the JSON file" in err
    # a partial run writes no results: --failed-out there did nothing, without a word
    failed = str(tmp_path / 'f.json')
    err = _usage_error(lambda: tool.main(['--num-images', '4', '--failed-out', failed]), capsys)
    assert (f"error: --failed-out {failed!r} has no effect with --models or --num-images: only "
            'the full run writes its results') in err


# --------------------------------------------------------------------------- benchmark --onnx


def test_benchmark_onnx_refuses_a_detector_config_before_building_models(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('analysis_tools/benchmark')
    monkeypatch.setattr(tool, 'build_model', _not_reached)
    err = _usage_error(lambda: tool.main([str(DETECTOR), '--baseline', str(FASHION_CLASSIFIER),
                                          '--onnx']), capsys)
    assert (f'error: --onnx: {DETECTOR} is a detector (MaskRCNN); --onnx times classifiers '
            'only') in err
    assert 'tools/deployment/pytorch2onnx.py' in err
    assert tool.parse_args([str(FASHION_CLASSIFIER), '--baseline', str(FASHION_CLASSIFIER),
                            '--onnx']).onnx  # classifiers pass


# --------------------------------------------------------------------------- pytorch2onnx


def test_pytorch2onnx_prints_the_preprocessing_its_graph_expects(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('deployment/pytorch2onnx')
    assert tool.main([str(FASHION_CLASSIFIER), '--out', str(tmp_path / 'm.onnx')]) == 0
    assert ('the graph expects: float32 (N, 1, 28, 28); channels 1, as the test pipeline gives '
            'it; normalised: (pixel - mean) / std per channel, pixels 0-255, mean [72.94], std '
            '[90.02]') in capsys.readouterr().out
    from mmpoly.deploy import load_model
    cfg, model = load_model(str(CONFIGS / 'resnet18_8xb32_in1k.py'))
    expected = tool.expected_input(cfg, model, (3, 224, 224))
    assert 'channels RGB (the config reads images as BGR, as OpenCV does, and its data ' \
        'preprocessor flips them to RGB' in expected
    assert 'mean [123.675, 116.28, 103.53], std [58.395, 57.12, 57.375]' in expected


def test_deployment_docs_state_the_channel_order_of_the_shipped_configs() -> None:
    """docs/en/deployment.md said no BGR→RGB was needed for the shipped configs; the detection
    and ImageNet configs flip OpenCV's BGR to RGB (checked by loading each)."""
    page = (REPO / 'docs' / 'en' / 'deployment.md').read_text(encoding='utf-8')
    assert 'no BGR→RGB for the shipped configs' not in page
    flipping = {}
    for pattern, key in (('*_coco.py', 'bgr_to_rgb'), ('*_in1k.py', 'to_rgb')):
        for path in sorted(CONFIGS.glob(pattern)):
            cfg = Config.fromfile(str(path))
            pre = cfg.model.get('data_preprocessor') or cfg.get('data_preprocessor')
            flipping[path.name] = pre.get(key)
    assert sum(name.endswith('_coco.py') for name in flipping) == 4
    assert sum(name.endswith('_in1k.py') for name in flipping) == 8
    assert all(flipping.values()), flipping
    assert 'the 4 detection configs (`data_preprocessor.bgr_to_rgb=True`) and the 8 ImageNet ' \
        'configs (`*_8xb32_in1k.py`, `to_rgb=True`) read image files as BGR (OpenCV) and flip ' \
        'them, so the graph takes **RGB**' in ' '.join(page.split())
