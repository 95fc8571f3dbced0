"""tools/det_inference.py's outputs appear complete or not at all: mmdet's DetInferencer wrote
``vis/`` and ``preds/`` straight into ``--out-dir``, so a run that failed half-way left drawn
images and predictions that looked like results (and half of an earlier run's files replaced)."""
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import cv2
import numpy as np
import pytest
from helpers import CONFIGS, disk_full_at_fsync, load_tool, save_detector_checkpoint

from mmpoly.fileio import TEMP_SUFFIX
from mmpoly.utils.startup import StartupError

DETECTOR = CONFIGS / 'mask-rcnn_resnet18_fpn_1x_coco.py'
#: Resize the 48×64 test images to at most 64×48 instead of 1333×800: a second per image on CPU.
FAST = ['--cfg-options', 'test_dataloader.dataset.pipeline.1.scale=(64,48)']


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The detector's initial weights, saved as a checkpoint that fits it (80 classes)."""
    return save_detector_checkpoint(DETECTOR, tmp_path_factory.mktemp('det') / 'det.pth')


def _image(path: Path, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.random.RandomState(seed).randint(0, 255, (48, 64, 3),
                                                                      np.uint8))
    return path


def _tree(folder: Path) -> Dict[str, bytes]:
    """Every file under ``folder`` (hidden ones included): relative path -> contents."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob('*'))
            if p.is_file()}


def _earlier_run(out: Path) -> Dict[str, bytes]:
    """An output folder holding an earlier run's files of the names ``a`` gets, and another."""
    (out / 'vis').mkdir(parents=True)
    (out / 'preds').mkdir()
    (out / 'vis' / 'a.jpg').write_bytes(b'earlier drawing')
    (out / 'preds' / 'a.json').write_text('{"scores": [0.9]}')
    (out / 'notes.txt').write_text('not an output of the tool')
    return _tree(out)


def test_a_run_into_a_new_folder_leaves_complete_files_and_no_temporary_folder(
        tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('det_inference')
    images = [_image(tmp_path / 'in' / 'a.jpg'), _image(tmp_path / 'in' / 'b.png', seed=1)]
    out = tmp_path / 'results' / 'out'  # its parent does not exist either
    assert tool.main([*map(str, images), str(DETECTOR), str(checkpoint), '--out-dir', str(out),
                      *FAST]) == []
    assert sorted(os.listdir(tmp_path / 'results')) == ['out']  # no temporary folder left
    assert sorted(_tree(out)) == ['preds/a.json', 'preds/b.json', 'vis/a.jpg', 'vis/b.png']
    for image in images:
        drawn = cv2.imread(str(out / 'vis' / image.name))
        assert drawn.shape == (48, 64, 3)
        pred = json.loads((out / 'preds' / f'{image.stem}.json').read_text())
        assert pred['scores'] == [] and pred['labels'] == []
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())  # a new folder's mode
    printed = capsys.readouterr().out
    assert f'{out / "vis" / "b.png"} is the image as it was' in printed
    assert 'replaced' not in printed


def _umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def test_a_run_into_an_existing_folder_replaces_same_named_files_whole_and_keeps_others(
        tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('det_inference')
    image = _image(tmp_path / 'a.jpg')
    out = tmp_path / 'out'
    earlier = _earlier_run(out)
    tool.main([str(image), str(DETECTOR), str(checkpoint), '--out-dir', str(out), *FAST])
    after = _tree(out)
    assert sorted(after) == ['notes.txt', 'preds/a.json', 'vis/a.jpg']  # no temporary folder
    assert after['notes.txt'] == earlier['notes.txt']
    assert cv2.imread(str(out / 'vis' / 'a.jpg')).shape == (48, 64, 3)
    assert json.loads(after['preds/a.json'])['scores'] == []
    assert f'replaced 2 file(s) of the same names from an earlier run in {out}' \
        in capsys.readouterr().out


@pytest.mark.parametrize('existing', [True, False], ids=['existing-out-dir', 'new-out-dir'])
def test_a_run_failing_after_writing_a_file_leaves_the_output_folder_as_it_was(
        existing: bool, tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """The inferencer fails on the second image, after writing the first one's drawing and
    predictions: before, those landed in --out-dir (over the earlier run's)."""
    tool = load_tool('det_inference')
    build = tool.build_inferencer
    written: List[List[str]] = []

    def failing_on_the_second_image(*args: Any, **kwargs: Any) -> Any:
        inferencer = build(*args, **kwargs)
        visualize = inferencer.visualize

        def visualize_or_fail(*v_args: Any, img_out_dir: str, **v_kwargs: Any) -> Any:
            if inferencer.num_visualized_imgs == 1:
                written.append(sorted(_tree(Path(img_out_dir))))
                raise RuntimeError('simulated failure on the second image')
            return visualize(*v_args, img_out_dir=img_out_dir, **v_kwargs)

        inferencer.visualize = visualize_or_fail
        return inferencer

    monkeypatch.setattr(tool, 'build_inferencer', failing_on_the_second_image)
    images = [_image(tmp_path / 'in' / 'a.jpg'), _image(tmp_path / 'in' / 'b.jpg', seed=1)]
    out = tmp_path / 'work' / 'out'
    (tmp_path / 'work').mkdir()
    earlier = _earlier_run(out) if existing else None
    with pytest.raises(RuntimeError, match='simulated failure on the second image'):
        tool.main([*map(str, images), str(DETECTOR), str(checkpoint), '--out-dir', str(out),
                   *FAST])
    assert written == [['preds/a.json', 'vis/a.jpg']]  # the first image's files were written
    if existing:
        assert _tree(out) == earlier and sorted(os.listdir(out)) == ['notes.txt', 'preds', 'vis']
    else:
        assert not out.exists()
    assert os.listdir(tmp_path / 'work') == (['out'] if existing else [])
    assert f'the run failed; nothing was written to --out-dir {out} (left as it was)' \
        in capsys.readouterr().err


def test_an_undecodable_second_image_is_refused_before_any_output(
        tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture) -> None:
    """A JPEG cut off after its header passes OpenCV's reader check but does not decode (mmdet
    would stop mid-run on mmcv's bare 'failed to load image'): refused up front, by name."""
    tool = load_tool('det_inference')
    first = _image(tmp_path / 'in' / 'a.jpg')
    broken = tmp_path / 'in' / 'b.jpg'
    broken.write_bytes(first.read_bytes()[:20])
    out = tmp_path / 'out'
    earlier = _earlier_run(out)
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(first), str(broken), str(DETECTOR), str(checkpoint), '--out-dir',
                   str(out), *FAST])
    assert exit_info.value.code == 2
    assert (f"input {str(broken)!r} does not decode (a truncated or damaged image file?)"
            in capsys.readouterr().err)
    assert _tree(out) == earlier and sorted(os.listdir(out)) == ['notes.txt', 'preds', 'vis']
    assert sorted(os.listdir(tmp_path)) == ['in', 'out']


def test_a_full_disk_while_writing_the_outputs_leaves_the_output_folder_as_it_was(
        tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """The first drawing fails to reach the disk (mmpoly's atomic local backend writes it):
    the run fails, and neither the earlier outputs nor a temporary folder are left changed."""
    from mmpoly.fileio import DiskFullError
    tool = load_tool('det_inference')
    image = _image(tmp_path / 'a.jpg')
    out = tmp_path / 'out'
    earlier = _earlier_run(out)
    build = tool.build_inferencer

    def build_then_fill_the_disk(*args: Any, **kwargs: Any) -> Any:
        inferencer = build(*args, **kwargs)  # loading the checkpoint writes nothing
        disk_full_at_fsync(monkeypatch)
        return inferencer

    monkeypatch.setattr(tool, 'build_inferencer', build_then_fill_the_disk)
    with pytest.raises(DiskFullError, match=r'No space left on device while writing .*a\.jpg'):
        tool.main([str(image), str(DETECTOR), str(checkpoint), '--out-dir', str(out), *FAST])
    assert f'the run failed; nothing was written to --out-dir {out} (left as it was)' \
        in capsys.readouterr().err
    assert _tree(out) == earlier and sorted(os.listdir(out)) == ['notes.txt', 'preds', 'vis']


def _not_reached(*args: Any, **kwargs: Any) -> None:
    raise AssertionError('a blocked output must be refused before any model is built')


@pytest.mark.parametrize('blocker, message', [
    ('vis', 'is a file, not the folder that vis/a.jpg goes into'),
    ('preds/a.json/', 'is a folder, where the output file preds/a.json goes'),
])
def test_an_output_path_taken_by_something_else_is_refused_up_front(
        blocker: str, message: str, tmp_path: Path, checkpoint: Path,
        capsys: pytest.CaptureFixture) -> None:
    """A file ``vis`` or a folder ``preds/a.json`` used to fail after the first image (the
    drawing already written)."""
    tool = load_tool('det_inference')
    tool.build_inferencer = _not_reached
    image = _image(tmp_path / 'a.jpg')
    out = tmp_path / 'out'
    if blocker.endswith('/'):
        (out / blocker).mkdir(parents=True)
    else:
        out.mkdir()
        (out / blocker).write_text('something else')
    before = sorted(str(p.relative_to(out)) for p in out.rglob('*'))
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(image), str(DETECTOR), str(checkpoint), '--out-dir', str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: --out-dir '{out}': {out / blocker.rstrip('/')} {message}; move it away or " \
        'choose another --out-dir' in err
    assert sorted(str(p.relative_to(out)) for p in out.rglob('*')) == before


@pytest.mark.parametrize('existing', [True, False], ids=['existing-out-dir', 'new-out-dir'])
def test_an_out_dir_where_the_temporary_folder_cannot_be_made_is_refused_up_front(
        existing: bool, tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('det_inference')
    tool.build_inferencer = _not_reached
    out = tmp_path / 'out'
    if existing:
        out.mkdir()

    mkdtemp = tempfile.mkdtemp

    def denied(*args: Any, **kwargs: Any) -> str:
        if kwargs.get('suffix') != TEMP_SUFFIX:  # mmengine's, loading the config
            return mkdtemp(*args, **kwargs)
        assert Path(kwargs['dir']) == (out if existing else tmp_path)  # out's file system
        raise PermissionError(13, 'Permission denied')

    monkeypatch.setattr(tempfile, 'mkdtemp', denied)
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(_image(tmp_path / 'a.jpg')), str(DETECTOR), str(checkpoint),
                   '--out-dir', str(out)])
    assert exit_info.value.code == 1
    what = 'cannot be written to' if existing else 'cannot be created'
    assert f"tools/det_inference.py: error: --out-dir '{out}' {what} (Permission denied); " \
        'choose another folder' in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == (['a.jpg', 'out'] if existing else ['a.jpg'])


def test_a_move_failing_half_way_says_where_the_other_outputs_are(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one failure left after the checks (e.g. a permission denied on the second file):
    nothing is lost silently, the message names what was moved and where the rest is."""
    tool = load_tool('det_inference')
    out = tmp_path / 'out'
    out.mkdir()
    staging = Path(tool.make_staging_folder(str(out)))
    assert staging.parent == out and staging.name.startswith('.det_inference.')
    for rel in ('vis/a.jpg', 'preds/a.json'):
        (staging / rel).parent.mkdir(exist_ok=True)
        (staging / rel).write_text(rel)
    replace = os.replace
    calls: List[str] = []

    def replace_once(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise PermissionError(13, 'Permission denied')
        replace(src, dst)

    monkeypatch.setattr(os, 'replace', replace_once)
    with pytest.raises(StartupError) as error:
        tool.publish(str(staging), str(out))
    assert str(error.value) == (
        f"moving the outputs into --out-dir '{out}' failed at {out / 'vis' / 'a.jpg'} "
        f'(Permission denied): 1 of 2 files were moved; the others are in {staging}')
    assert (out / 'preds' / 'a.json').read_text() == 'preds/a.json'
    assert (staging / 'vis' / 'a.jpg').read_text() == 'vis/a.jpg'
