"""Run a trained mmpoly detector on images and save them with boxes, masks and labels drawn.

mmdet's ``DetInferencer`` does the work (its visualiser draws; predictions go to JSON)::

    python tools/det_inference.py IMAGE [IMAGE ...] CONFIG CHECKPOINT --out-dir outputs
    # -> outputs/vis/<image>.jpg (drawn),
    #    outputs/preds/<image>.json (boxes, labels, scores, RLE masks)

The detector's ImageNet classifier checkpoint is not needed: the detector checkpoint holds the
backbone.

The outputs appear only when the whole run succeeded. DetInferencer writes them into a temporary
folder on the file system of ``--out-dir``: next to it if it does not exist yet (the folder is
then renamed to ``--out-dir``), else inside it (its files are then moved into ``--out-dir`` one
by one with ``os.replace``: each replaces a file of the same name from an earlier run whole, the
tool says how many it replaced, and other files are kept). A run that fails or is interrupted
removes the temporary folder and leaves ``--out-dir`` as it was.

Checked before the model is built: the inputs (images that decode, folders holding some; no two
with the same name, whose outputs would overwrite each other), ``--palette``, ``--device``,
``--out-dir`` (a folder, whose ``vis`` and ``preds``, if there, are folders without a folder of
an output file's name), the config (a detector's), ``--cfg-options`` keys and the checkpoint,
which must fit the model (mmdet would load what fits and detect with the rest left random).
Every input is decoded once up front exactly as the run decodes it: by ``mmcv.imfrombytes`` with
the ``color_type`` and ``imdecode_backend`` of the config's test ``LoadImageFromFile`` (after
``--cfg-options``), and as mmdet's visualiser reads it (mmcv's default backend, colour). OpenCV's
``imread`` returns the top part of a truncated JPEG, ``imdecode`` (mmcv's) returns nothing.
"""
import argparse
import json
import os
import os.path as osp
import re
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mmengine.config import Config

from mmpoly.fileio import TEMP_SUFFIX, fsync_dir
from mmpoly.utils.startup import (CfgOptionsAction, StartupError, check_cfg_options,
                                  check_checkpoint, load_config, startup_errors)

PROG = 'tools/det_inference.py'
#: The files of a folder that are read as images (mmdet's DetInferencer's suffixes; any case).
IMG_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp')
#: --palette names of mmdet's ``get_palette``, then the one-colour names of mmcv's ``Color``.
PALETTES = ('coco', 'voc', 'citys', 'random', 'none', 'red', 'green', 'blue', 'cyan', 'yellow',
            'magenta', 'white', 'black')


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('inputs', nargs='+', help='image files or folders of images')
    parser.add_argument('config', help='the detection config the checkpoint was trained with')
    parser.add_argument('checkpoint', help='the detector checkpoint')
    parser.add_argument('--out-dir', default='outputs', help='where vis/ and preds/ go')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='draw only detections scoring at least this (default 0.3)')
    parser.add_argument('--device', default='cpu', help='e.g. cpu, cuda:0')
    parser.add_argument(
        '--cfg-options', nargs='+', action=CfgOptionsAction, default={},
        help='override config settings, key=value pairs, e.g. model.test_cfg.rcnn.score_thr=0 '
        '(the detector keeps boxes scoring at least 0.05 by default, whatever --score-thr is)')
    parser.add_argument('--palette', default='none',
                        help="box colours: 'coco', 'voc', 'citys', 'random' or 'none' (the "
                        "config's or checkpoint's)")
    args = parser.parse_args(argv)
    if not 0 <= args.score_thr <= 1:
        parser.error(f'--score-thr must be in [0, 1], got {args.score_thr}')
    if args.palette not in PALETTES:
        parser.error(f'--palette {args.palette!r} is not a palette; allowed: '
                     f'{", ".join(PALETTES)}')
    problem = _device_problem(args.device)
    if problem:
        parser.error(f'--device {args.device!r}: {problem}')
    if osp.exists(args.out_dir) and not osp.isdir(args.out_dir):
        parser.error(f'--out-dir {args.out_dir!r} is a file, not a folder')
    try:
        args.images = list_images(args.inputs, image_decoders(args.config, args.cfg_options))
    except ValueError as error:
        parser.error(str(error))
    problem = output_conflict(args.out_dir, output_files(args.images))
    if problem:
        parser.error(f'--out-dir {args.out_dir!r}: {problem}')
    return args


def _device_problem(device: str) -> Optional[str]:
    """Why torch cannot run on ``device`` (None if it can, as far as can be told up front)."""
    import torch
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        return 'not a torch device; e.g. cpu, cuda, cuda:0'
    if parsed.type == 'cuda':
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return 'CUDA is not available on this machine; use --device cpu'
        if parsed.index is not None and parsed.index >= count:
            return f'this machine has {count} CUDA device(s): cuda:0 to cuda:{count - 1}'
    elif parsed.type != 'cpu':  # xpu, mps, meta, …: run only where torch says it is available
        checks = [getattr(module, 'is_available', None) for module in
                  (getattr(torch, parsed.type, None), getattr(torch.backends, parsed.type, None))]
        if not any(callable(check) and check() for check in checks):
            return (f'torch has no available {parsed.type!r} device on this machine; use '
                    '--device cpu, or cuda / cuda:N on a machine with a GPU')
    return None


#: How mmcv's ``LoadImageFromFile`` decodes when the config does not say: ``(color_type,
#: imdecode_backend)``, its defaults.
DEFAULT_DECODER = ('color', 'cv2')


def image_decoders(config: str, cfg_options: Dict[str, Any]) -> List[Tuple[str, str]]:
    """How a run of ``config`` (with ``cfg_options`` merged) decodes an input image: ``(flag,
    backend)`` of ``mmcv.imfrombytes`` for the test pipeline's ``LoadImageFromFile`` (its
    ``color_type`` and ``imdecode_backend``), then for mmdet's visualiser, which decodes the
    file again with mmcv's default backend in colour. A config that does not load (reported
    later, by name) is taken to use the defaults, :data:`DEFAULT_DECODER`."""
    from mmcv.image import io as mmcv_io
    loader: Tuple[str, str] = DEFAULT_DECODER
    try:
        cfg = Config.fromfile(config)
        if cfg_options:
            cfg.merge_from_dict(cfg_options)
        pipeline = cfg.test_dataloader.dataset.pipeline
    except Exception:  # the config's problems are reported after the arguments' (main)
        pipeline = []
    for transform in pipeline:
        kind = transform.get('type') if hasattr(transform, 'get') else None
        name = kind if isinstance(kind, str) else getattr(kind, '__name__', '')
        if name.split('.')[-1] == 'LoadImageFromFile':
            loader = (transform.get('color_type', DEFAULT_DECODER[0]),
                      transform.get('imdecode_backend', DEFAULT_DECODER[1]))
            break
    visualiser = ('color', mmcv_io.imread_backend)
    return [loader] if visualiser == loader else [loader, visualiser]


def decode_problem(image: str, decoders: Sequence[Tuple[str, str]]) -> Optional[str]:
    """Why ``image`` does not decode as each of ``decoders`` (``(flag, backend)`` of
    ``mmcv.imfrombytes``, :func:`image_decoders`) decodes it (None if it does)."""
    import cv2
    import mmcv
    with open(image, 'rb') as f:
        content = f.read()
    for flag, backend in decoders:
        if backend == 'cv2' and not cv2.haveImageReader(image):
            return 'is not an image OpenCV can read'
        try:
            decoded = mmcv.imfrombytes(content, flag=flag, backend=backend)
            reason = None if decoded is not None and decoded.size else 'returns no image'
        except Exception as error:  # pillow, turbojpeg and tifffile raise on damaged files
            reason = f'fails: {type(error).__name__}: {error}'
        if reason:
            return (f'does not decode (a truncated or damaged image file?): '
                    f'mmcv.imfrombytes(flag={flag!r}, backend={backend!r}), as the run would '
                    f'read it, {reason}')
    return None


def list_images(inputs: Sequence[str],
                decoders: Sequence[Tuple[str, str]] = (DEFAULT_DECODER, )) -> List[str]:
    """The image files of ``inputs`` (files, and the images of folders, not recursive), in order.

    Raises:
        ValueError: an input does not exist, does not decode as each of ``decoders`` decodes it
            (:func:`decode_problem`: every image is decoded once up front, as the run decodes
            it, so that a damaged one stops the run before any output), or a folder holds no
            image; or two images have the same file name without its suffix (their drawn
            images or their predictions, ``preds/<name>.json``, would overwrite each other).
    """
    images: List[str] = []
    for path in inputs:
        if osp.isdir(path):
            found = [osp.join(path, name) for name in sorted(os.listdir(path))
                     if name.lower().endswith(IMG_EXTENSIONS)
                     and osp.isfile(osp.join(path, name))]
            if not found:
                raise ValueError(f'input folder {path!r} holds no image (files ending in '
                                 f'{", ".join(IMG_EXTENSIONS)})')
            images += found
        elif not osp.isfile(path):
            raise ValueError(f'input {path!r} does not exist')
        else:
            images.append(path)
    for image in images:  # decoded as the run will decode it: a damaged file fails now
        problem = decode_problem(image, decoders)
        if problem:
            raise ValueError(f'input {image!r} {problem}')
    by_name: Dict[str, str] = {}
    for image in images:
        name = osp.splitext(osp.basename(image))[0]
        if name in by_name:
            raise ValueError(f'inputs {by_name[name]!r} and {image!r} have the same name '
                             f'{name!r}: their outputs (vis/ and preds/{name}.json) would '
                             'overwrite each other; rename one or run them separately')
        by_name[name] = image
    return images


def output_files(images: Sequence[str]) -> List[str]:
    """The files DetInferencer writes for ``images``, relative to the output folder."""
    names = [osp.basename(image) for image in images]
    return ([f'vis/{name}' for name in names]
            + [f'preds/{osp.splitext(name)[0]}.json' for name in names])


def output_conflict(out_dir: str, files: Sequence[str]) -> Optional[str]:
    """Why ``files`` (relative paths) cannot be moved into ``out_dir``: a folder on their way is
    a file, or a file's name is taken by a folder (None if nothing is in the way)."""
    for rel in files:
        parts = rel.split('/')
        for depth in range(1, len(parts)):
            folder = osp.join(out_dir, *parts[:depth])
            if osp.exists(folder) and not osp.isdir(folder):
                return (f'{folder} is a file, not the folder that {rel} goes into; move it away '
                        'or choose another --out-dir')
        if osp.isdir(osp.join(out_dir, rel)):
            return (f'{osp.join(out_dir, rel)} is a folder, where the output file {rel} goes; '
                    'move it away or choose another --out-dir')
    return None


def make_staging_folder(out_dir: str) -> str:
    """A new temporary folder on the file system of ``out_dir``, for the outputs to be written
    into: inside ``out_dir`` when it exists (its files are moved out one by one), else next to
    it, with a new folder's usual mode (it is renamed to ``out_dir``). Missing parent folders of
    ``out_dir`` are created."""
    if osp.isdir(out_dir):
        return tempfile.mkdtemp(prefix='.det_inference.', suffix=TEMP_SUFFIX, dir=out_dir)
    target = osp.abspath(out_dir)
    os.makedirs(osp.dirname(target), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f'.{osp.basename(target)}.', suffix=TEMP_SUFFIX,
                               dir=osp.dirname(target))
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    return staging


def _staged_files(staging: str) -> List[str]:
    """The files under ``staging``, as sorted paths relative to it with ``/`` separators."""
    files = []
    for folder, _, names in os.walk(staging):
        rel = osp.relpath(folder, staging)
        files += [name if rel == '.' else f'{rel}/{name}'.replace(os.sep, '/')
                  for name in names]
    return sorted(files)


def publish(staging: str, out_dir: str) -> int:
    """Move the finished outputs of ``staging`` into ``out_dir`` and remove ``staging``; return
    how many earlier files of ``out_dir`` they replaced.

    The files are on the disk already (mmpoly's atomic local backend, installed by
    ``mmpoly.engine``, flushes each file DetInferencer writes). A missing ``out_dir`` becomes
    ``staging``, renamed; into an existing one the files go one by one with ``os.replace``, each
    replacing a file of the same name whole, after checking that nothing is in their way.

    Raises:
        StartupError: something is in the way (found before any file is moved: ``staging`` is
            removed and ``out_dir`` left as it was), or a move failed (the message says how
            many files were moved and keeps ``staging``, which holds the others).
    """
    files = _staged_files(staging)
    if not osp.lexists(out_dir):
        try:
            os.rename(staging, out_dir)
        except OSError as error:
            raise StartupError(f'the outputs could not be moved to --out-dir {out_dir!r} '
                               f'({error.strerror}); they are in {staging}') from error
        fsync_dir(osp.dirname(osp.abspath(out_dir)))
        return 0
    problem = output_conflict(out_dir, files)
    if problem:
        shutil.rmtree(staging, ignore_errors=True)
        raise StartupError(f'--out-dir {out_dir!r}: {problem} (it appeared during the run; '
                           f'nothing was written to {out_dir})')
    replaced = sum(osp.lexists(osp.join(out_dir, rel)) for rel in files)
    for moved, rel in enumerate(files):
        target = osp.join(out_dir, rel)
        try:
            os.makedirs(osp.dirname(target), exist_ok=True)
            os.replace(osp.join(staging, rel), target)
        except OSError as error:
            raise StartupError(f'moving the outputs into --out-dir {out_dir!r} failed at '
                               f'{target} ({error.strerror}): {moved} of {len(files)} files '
                               f'were moved; the others are in {staging}') from error
    for folder in sorted({osp.dirname(osp.join(out_dir, rel)) for rel in files}):
        fsync_dir(folder)
    shutil.rmtree(staging)
    return replaced


def _detector_problem(cfg: Config) -> Optional[str]:
    """Why the config's model is not an mmdet detector that DetInferencer can run."""
    from mmdet.models.detectors import BaseDetector
    from mmdet.registry import MODELS
    model_type = (cfg.get('model') or {}).get('type')
    cls = MODELS.get(model_type) if isinstance(model_type, str) else model_type
    if not (isinstance(cls, type) and issubclass(cls, BaseDetector)):
        return (f'its model (type {model_type!r}) is not an mmdet detector; give a detection '
                'config, e.g. configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py')
    pipeline = ((cfg.get('test_dataloader') or {}).get('dataset') or {}).get('pipeline')
    if not pipeline:
        return 'it has no test_dataloader.dataset.pipeline (the test transforms inference uses)'
    return None


def _strip_module(state: Dict[str, Any]) -> Dict[str, Any]:
    """Keys without the ``module.`` prefix of a wrapped model (as mmengine loads them)."""
    return {re.sub(r'^module\.', '', key): value for key, value in state.items()}


def build_inferencer(cfg: Config, checkpoint: str, device: str, palette: str) -> Any:
    """mmdet's DetInferencer of ``cfg`` with ``checkpoint`` loaded strictly: a checkpoint whose
    keys or shapes do not fit the model (mmdet would load what fits, warn, and detect with the
    rest left random) raises a ValueError that lists the differences."""
    from mmdet.apis import DetInferencer

    from mmpoly.fileio import compare_state_dicts

    class StrictDetInferencer(DetInferencer):

        def _load_weights_to_model(self, model: Any, checkpoint_dict: Optional[dict],
                                   config: Any) -> None:
            if checkpoint_dict is not None:
                state = checkpoint_dict.get('state_dict', checkpoint_dict)
                if not isinstance(state, dict):
                    raise ValueError(f'CHECKPOINT {checkpoint} holds no state_dict (got '
                                     f'{type(state).__name__})')
                mismatch = compare_state_dicts(model.state_dict(), _strip_module(state))
                if mismatch:
                    raise ValueError(f'CHECKPOINT {checkpoint} does not fit the model of the '
                                     f'config:\n{mismatch.describe()}')
            super()._load_weights_to_model(model, checkpoint_dict, config)

    inferencer = StrictDetInferencer(model=cfg, weights=checkpoint, device=device,
                                     palette=palette, show_progress=False)
    classes = inferencer.model.dataset_meta.get('classes') or ()
    if palette in ('coco', 'voc', 'citys'):
        from mmdet.visualization.palette import get_palette
        try:
            get_palette(palette, len(classes))
        except AssertionError:
            raise ValueError(f'--palette {palette!r} has fewer colours than the model\'s '
                             f'{len(classes)} classes; choose another palette') from None
    return inferencer


def main(argv: Optional[Sequence[str]] = None) -> List[str]:
    """Draw the predictions; return the paths of the images with at least one detection drawn
    (each scoring at least ``--score-thr``)."""
    args = parse_args(argv)
    from mmpoly.engine import STARTUP_REFUSALS
    from mmpoly.utils import register_all_modules
    with startup_errors(PROG):
        register_all_modules(init_default_scope=False)
        config = load_config(args.config)
        check_checkpoint(args.checkpoint, 'CHECKPOINT', 'give the detector checkpoint file '
                         '(e.g. work_dirs/CONFIG_NAME/epoch_N.pth)')
        if args.cfg_options:
            check_cfg_options(config, args.cfg_options)
            config.merge_from_dict(args.cfg_options)
        problem = _detector_problem(config)
        if problem:
            raise StartupError(f'config {args.config}: {problem}')
        try:
            staging = make_staging_folder(args.out_dir)
        except OSError as error:
            what = 'cannot be written to' if osp.isdir(args.out_dir) else 'cannot be created'
            raise StartupError(f'--out-dir {args.out_dir!r} {what} ({error.strerror}); '
                               'choose another folder') from error
    try:
        with startup_errors(PROG):
            try:
                inferencer = build_inferencer(config, args.checkpoint, args.device,
                                              args.palette)
            except (ValueError, *STARTUP_REFUSALS) as error:
                raise StartupError(str(error)) from error
        try:
            inferencer(args.images, out_dir=staging, pred_score_thr=args.score_thr,
                       no_save_pred=False)
            drawn, lines = _summary(staging, args.out_dir, args.images, args.score_thr)
        except BaseException:
            print(f'{PROG}: the run failed; nothing was written to --out-dir {args.out_dir} '
                  '(left as it was)', file=sys.stderr, flush=True)
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    with startup_errors(PROG):
        replaced = publish(staging, args.out_dir)
    for line in lines:
        print(line)
    if replaced:
        print(f'replaced {replaced} file(s) of the same names from an earlier run in '
              f'{args.out_dir}')
    return drawn


def _summary(staging: str, out_dir: str, images: Sequence[str],
             score_thr: float) -> Tuple[List[str], List[str]]:
    """The images of ``out_dir`` (once the outputs of ``staging`` are there) with at least one
    detection drawn, and a line on each image to print."""
    drawn, lines = [], []
    for path in images:
        name = osp.basename(path)
        if not osp.isfile(osp.join(staging, 'vis', name)):
            continue
        image = osp.join(out_dir, 'vis', name)
        scores = _scores(osp.join(staging, 'preds', osp.splitext(name)[0] + '.json'))
        kept = sum(score >= score_thr for score in scores)
        if kept:
            lines.append(f'drawn: {image} ({kept} of {len(scores)} detections score >= '
                         f'{score_thr:g})')
            drawn.append(image)
        else:
            best = f'best score {max(scores):.3g}' if scores else 'the model returned none'
            lines.append(f'nothing drawn: no detection scores >= --score-thr {score_thr:g} '
                         f'({best}); {image} is the image as it was')
    return drawn, lines


def _scores(pred_file: str) -> List[float]:
    """The scores of every prediction DetInferencer saved (it saves them unthresholded)."""
    with open(pred_file) as f:
        return [float(score) for score in json.load(f)['scores']]


if __name__ == '__main__':
    main()
    sys.exit(0)
