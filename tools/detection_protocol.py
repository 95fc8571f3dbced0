"""The paper's pretrain → fine-tune detection protocol (arXiv:2104.07916, appendix, COCO table) at
CPU scale, on offline data, through the shipped configs, in one resumable command::

    python tools/detection_protocol.py run                       # the full protocol
    python tools/detection_protocol.py run --protocol short      # the slow test's short version
    python tools/detection_protocol.py run --seed 1              # another seed, its own work_dir
    # on 2 cores: two lanes side by side, one thread each (the last one writes the report)
    python tools/detection_protocol.py run --backbone resnet18 --threads 1 &
    python tools/detection_protocol.py run --backbone pdc-resnet18 --threads 1
    python tools/detection_protocol.py report WORK                # the report of a run so far
    python tools/detection_protocol.py table WORK/results.json --write docs/en/detection.md

Stages, each leaving ``WORK/stages/<stage>.json`` when it is finished (a rerun skips it; a stage
that was stopped resumes from its newest checkpoint with ``tools/train.py --resume``, after
running with ``tools/test.py`` the validation it was stopped during, if any):

1. ``data``: Fashion-MNIST in mmpretrain's ImageNet layout
   (``tools/dataset_converters/fashion_mnist_to_imagenet.py``) and the Fashion-COCO instance
   segmentation set with the four detectors' configs
   (``tools/dataset_converters/make_fashion_coco.py``).
2. ``pretrain-<classifier>``: ``configs/resnet18_8xb32_in1k.py`` and
   ``configs/pdc_resnet18_8xb32_in1k.py`` with only the data (root, 10 classes), the image size
   and the schedule length overridden (milestones at 30/60/90 % as the 100-epoch recipe; learning
   rate scaled to the real batch with ``--auto-scale-lr``, the configs' own rule).
3. ``finetune-<case>``: the four shipped detection configs on Fashion-COCO with the 1× schedule's
   shape (linear warm-up, lr ×0.1 after 8/12 and 11/12 of the epochs). Pretrained: the backbone
   comes from the classifier's final checkpoint (BN statistics recomputed by RecomputeBNHook).
   From scratch: no checkpoint, every stage trained and BN statistics learnt (``init_cfg=None``,
   ``frozen_stages=-1``, ``norm_eval=False``), everything else the same.
4. ``report``: ``WORK/results.json``, loss / AP / accuracy curves, the predictions of the
   pretrained ResNet18 and PDC-ResNet18 Mask R-CNNs on the same validation images
   (``report/predictions.jpg``), and the AP of those two on as many training images as the
   validation split has. ``report WORK`` draws it for the stages finished so far, without
   ``results.json`` (``training-split WORK`` only scores the training images).

The protocol (sizes, iterations, seeds, what counts as "better") is fixed in :data:`PROTOCOLS`
before any run; ``run`` refuses a work_dir started under a different protocol.
"""
import argparse
import dataclasses
import fcntl
import glob
import json
import os
import os.path as osp
import re
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
TOOLS = osp.join(REPO, 'tools')
#: the shipped detection configs the Fashion-COCO configs are generated from
CLASSIFIERS = {'resnet18': 'resnet18_8xb32_in1k.py', 'pdc-resnet18': 'pdc_resnet18_8xb32_in1k.py'}
TABLE_START = '<!-- detection-protocol-table:start -->'
TABLE_END = '<!-- detection-protocol-table:end -->'
#: ``table --write PAGE`` keeps the results JSON under this name next to the page
RESULTS_NEXT_TO_PAGE = 'detection_protocol.json'
METRICS = ('bbox_mAP', 'bbox_mAP_50', 'segm_mAP', 'segm_mAP_50')
#: the predictions grid of the report: pixels between its images, height of a row's caption
GRID_GAP, GRID_CAPTION = 4, 24
#: the environment of the stages' processes (``run --threads`` sets their thread count)
CHILD_ENV = dict(os.environ)


@dataclasses.dataclass(frozen=True)
class Case:
    """One fine-tuning run: a detection config with a backbone, pretrained or from scratch."""

    detector: str  # 'mask-rcnn' or 'cascade-mask-rcnn'
    backbone: str  # a key of CLASSIFIERS
    pretrained: bool

    @property
    def name(self) -> str:
        return f'{self.detector}_{self.backbone}_{"pretrained" if self.pretrained else "scratch"}'

    @property
    def config(self) -> str:
        """The generated Fashion-COCO version of the shipped config."""
        return f'{self.detector}_{self.backbone}_fpn_1x_fashion-coco.py'

    @property
    def shipped_config(self) -> str:
        """The config in configs/ that :attr:`config` is generated from."""
        return osp.join(REPO, 'configs', f'{self.detector}_{self.backbone}_fpn_1x_coco.py')


MASK_RCNN_CASES = tuple(Case('mask-rcnn', b, p) for b in CLASSIFIERS for p in (True, False))
CASCADE_CASES = tuple(Case('cascade-mask-rcnn', b, True) for b in CLASSIFIERS)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """Everything a run depends on. Change it only before a run, never towards a result."""

    name: str
    seed: int
    # classifier pretraining on Fashion-MNIST in the ImageNet layout
    classifiers: Tuple[str, ...]
    imagenet_train: Optional[int]  # images (None: all 60,000)
    imagenet_val: Optional[int]  # from the test split (None: all 10,000)
    image_size: int  # RandomResizedCrop / CenterCrop side (the recipe's 224)
    pretrain_epochs: int  # the recipe's 100, lr ×0.1 at 30/60/90 % of them
    pretrain_batch: int  # per process (the config's 32)
    # fine-tuning on Fashion-COCO
    coco_train: int
    coco_val: int
    coco_size: Tuple[int, int]  # (H, W)
    det_epochs: int  # the 1× schedule's 12 (lr ×0.1 after 8/12 and 11/12 of them)
    det_batch: int  # per process (the config's 2)
    warmup_iters: int  # the 1× schedule's 500 of 90k iterations, scaled
    val_interval: int  # epochs between validations (AP curve points)
    det_rois: int  # RoIs sampled per image in each R-CNN stage (the configs' 512; a CPU's time)
    det_proposals: int  # RPN proposals kept in training (the configs' 2,000)
    cases: Tuple[Case, ...]
    # the comparisons: "better" = a higher bbox mAP by at least this (one seed, no error bars)
    better_margin: float
    # the targets for the pretrained PDC-ResNet18 Mask R-CNN
    target_bbox_map: float
    target_segm_map: float
    prediction_images: int  # validation images drawn for both backbones
    num_workers: int

    def det_milestones(self) -> List[int]:
        return [round(self.det_epochs * 8 / 12), round(self.det_epochs * 11 / 12)]

    def pretrain_milestones(self) -> List[int]:
        return sorted({max(1, round(self.pretrain_epochs * f)) for f in (0.3, 0.6, 0.9)})

    def to_json(self) -> dict:
        """The protocol as its JSON file holds it (tuples as lists, cases by name)."""
        out = dataclasses.asdict(self)
        out['cases'] = [c.name for c in self.cases]
        return json.loads(json.dumps(out))


PROTOCOLS: Dict[str, Protocol] = {
    # Sized from step times measured on a 2-core AVX2 EPYC (2 threads, before any run):
    # pretraining at 64×64, 32 per step: 0.58 s (ResNet18), 0.63 s (PDC-ResNet18), so 10,000
    # images × 10 epochs = 3,130 steps is about 30 min; Mask R-CNN at 2 images of 256×320 with
    # 64 RoIs: 2.8 s, so 192 images × 12 epochs = 1,152 steps is about an hour; Cascade: 3.8 s.
    'full': Protocol(
        name='full', seed=0, classifiers=tuple(CLASSIFIERS), imagenet_train=10000,
        imagenet_val=2000, image_size=64, pretrain_epochs=10, pretrain_batch=32,
        coco_train=192, coco_val=64, coco_size=(256, 320), det_epochs=12, det_batch=2,
        warmup_iters=100, val_interval=2, det_rois=64, det_proposals=300,
        cases=MASK_RCNN_CASES + CASCADE_CASES, better_margin=0.02, target_bbox_map=0.40,
        target_segm_map=0.35, prediction_images=4, num_workers=2),
    # the slow test (tests/test_detection_protocol.py): the whole pipeline, one pretrained case,
    # 288 fine-tuning steps (after a 12-epoch run of 96 steps, bbox mAP was 0.000; a run had
    # AP50 0.004, 0.032, 0.095 after 96, 192, 288 steps). 32 RoIs an image, not 64: the mask
    # head's 3×3 256→256 convolutions on the positive RoIs took half of a step; a step at one
    # thread fell from 2.2 to 1.6 s and the training-split mAP stayed as high (2026-12-05).
    # 16 RoIs, not 32: a step at one thread, with the other core busy, fell from 1.8 to 1.3 s;
    # the training-split mAP fell from 0.50 to 0.41 and the validation AP50 stayed (seed 0;
    # 2026-12-07). Fewer steps did not keep it: 192 steps with 16 or 32 RoIs fitted the
    # training images as well (bbox mAP 0.40, 0.41) but reached validation AP50 0.005 and 0.011.
    'short': Protocol(
        name='short', seed=0, classifiers=('resnet18', ), imagenet_train=2000,
        imagenet_val=500, image_size=32, pretrain_epochs=5, pretrain_batch=32,
        coco_train=16, coco_val=8, coco_size=(128, 160), det_epochs=36, det_batch=2,
        warmup_iters=10, val_interval=12, det_rois=16, det_proposals=300,
        cases=(Case('mask-rcnn', 'resnet18', True), ), better_margin=0.02,
        target_bbox_map=0.40, target_segm_map=0.35, prediction_images=2, num_workers=0),
}


# --------------------------------------------------------------------------- helpers


def atomic_json(obj: dict, path: str) -> None:
    from mmpoly.engine.saving import atomic_write
    os.makedirs(osp.dirname(path), exist_ok=True)
    atomic_write(json.dumps(obj, indent=2, sort_keys=True) + '\n', path)


def read_scalars(work_dir: str) -> List[dict]:
    """Every line of every ``<timestamp>/vis_data/scalars.json`` of a work_dir, oldest first."""
    records = []
    for path in sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))):
        with open(path) as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def validations(work_dir: str) -> List[dict]:
    """The validation records of a work_dir, oldest first: ``scalars.json`` lines without ``lr``
    (training lines have it), whose ``step`` is the epoch."""
    return [r for r in read_scalars(work_dir) if 'lr' not in r]


def final_validation(work_dir: str, prefix: str, epoch: int) -> dict:
    """The metrics starting with ``prefix`` (e.g. ``'coco/'``) of the validation after
    ``epoch``, the run's last. A run resumed after its validation logs it once more; the newest
    wins.

    An empty COCO evaluation (no detection passed the score threshold: mmdet's CocoMetric then
    logs no metric) is AP 0 by COCO's definition: it is returned as zeros with
    ``empty_evaluation=True``, never as an earlier validation's numbers."""
    rows = [r for r in validations(work_dir) if r.get('step') == epoch]
    if not rows:
        raise RuntimeError(f'{work_dir} logged no validation after epoch {epoch}')
    metrics = {k[len(prefix):]: v for k, v in rows[-1].items() if k.startswith(prefix)}
    if metrics:
        return metrics
    if prefix != 'coco/':
        raise RuntimeError(f'{work_dir}: the validation after epoch {epoch} logged no {prefix}*')
    return dict({m: 0.0 for m in METRICS}, empty_evaluation=True)


def validated_epochs(max_epochs: int, val_interval: int) -> List[int]:
    """The epochs after which mmengine's EpochBasedTrainLoop validates (every ``val_interval``-th
    and the last)."""
    return [e for e in range(1, max_epochs + 1) if e % val_interval == 0 or e == max_epochs]


def resume_point(work_dir: str) -> Optional[Tuple[int, str]]:
    """(epoch, checkpoint) that ``tools/train.py --resume`` starts ``work_dir`` from (mmengine's
    ``last_checkpoint``); None without an existing epoch checkpoint there."""
    path = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(path):
        return None
    with open(path) as f:
        checkpoint = f.read().strip()
    match = re.fullmatch(r'epoch_(\d+)\.pth', osp.basename(checkpoint))
    if match is None or not osp.isfile(checkpoint):
        return None  # tools/train.py --resume says what is wrong with it
    return int(match.group(1)), checkpoint


def test_metrics(config: str, checkpoint: str, out_dir: str, options: List[str],
                 log: str) -> dict:
    """The metrics of ``checkpoint`` by ``tools/test.py config`` (``--cfg-options options``),
    its files under ``out_dir``, its output appended to ``log``."""
    metrics_file = osp.join(out_dir, 'metrics.json')
    os.makedirs(out_dir, exist_ok=True)
    run_stage([sys.executable, osp.join(TOOLS, 'test.py'), config, checkpoint, '--work-dir',
               out_dir, '--out', metrics_file, '--out-item', 'metrics', '--cfg-options',
               *options], log)
    with open(metrics_file) as f:
        return json.load(f)


def coco_subset(ann_file: str, images: int, out: str) -> None:
    """The first ``images`` images of a COCO annotation file (in its order), their annotations
    and all categories, written to ``out``: mmdet's CocoMetric scores every image of its
    ``ann_file``, so a subset needs a file of its own."""
    with open(ann_file) as f:
        coco = json.load(f)
    if not 0 < images <= len(coco['images']):
        raise ValueError(f'images: {images}; allowed: 1 to {len(coco["images"])} ({ann_file})')
    kept = coco['images'][:images]
    ids = {image['id'] for image in kept}
    atomic_json(dict(coco, images=kept,
                     annotations=[a for a in coco['annotations'] if a['image_id'] in ids]), out)


def seconds_per_iter(work_dir: str) -> Optional[float]:
    """The median 'time' of the logged training iterations (mmengine's IterTimerHook)."""
    times = sorted(r['time'] for r in read_scalars(work_dir) if 'time' in r and 'loss' in r)
    return times[len(times) // 2] if times else None


def prediction_grid(drawn: Dict[str, List[str]], out: str) -> None:
    """One JPEG of the drawn predictions: a row per detector (``drawn``: its label → its images,
    the same validation images in the same order for every row) under a caption naming it, a
    column per image, written atomically."""
    import cv2
    import numpy as np

    from mmpoly.engine.saving import atomic_write
    columns = sorted({len(images) for images in drawn.values()})
    if len(columns) != 1:
        raise ValueError(f'drawn: rows of {columns} images; every row needs the same')
    white = (255, 255, 255)
    rows = []
    for label, images in drawn.items():
        tiles = []
        for path in images:
            tile = cv2.imread(path)
            if tile is None:
                raise FileNotFoundError(f'{path}: no image to put in the grid')
            tiles.append(tile)
        height = max(t.shape[0] for t in tiles)
        row = np.concatenate([
            cv2.copyMakeBorder(t, 0, height - t.shape[0], 0, GRID_GAP, cv2.BORDER_CONSTANT,
                               value=white) for t in tiles], axis=1)
        caption = np.full((GRID_CAPTION, row.shape[1], 3), 255, np.uint8)
        cv2.putText(caption, f'{label}: {", ".join(osp.basename(i) for i in images)}',
                    (4, GRID_CAPTION - 7), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1,
                    cv2.LINE_AA)
        rows.append(np.concatenate([caption, row]))
    width = max(r.shape[1] for r in rows)
    grid = np.concatenate([cv2.copyMakeBorder(r, 0, 0, 0, width - r.shape[1],
                                              cv2.BORDER_CONSTANT, value=white) for r in rows])
    ok, data = cv2.imencode('.jpg', grid, [cv2.IMWRITE_JPEG_QUALITY, 90])
    if not ok:
        raise RuntimeError(f'{out}: OpenCV could not encode the grid as JPEG')
    os.makedirs(osp.dirname(out), exist_ok=True)
    atomic_write(data.tobytes(), out)


def run_stage(cmd: List[str], log: str) -> None:
    """Run a tool, its output appended to ``log``; a failure names the command and the log."""
    os.makedirs(osp.dirname(log), exist_ok=True)
    with open(log, 'a') as f:
        f.write(f'\n$ {" ".join(cmd)}\n')
        f.flush()
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=CHILD_ENV)
    if proc.returncode != 0:
        with open(log) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f'stage command failed ({proc.returncode}): {" ".join(cmd)}\n'
                           f'log: {log}\n{tail}')


def fewer_rois_options(config: str, rois: int = 64, proposals: int = 300) -> List[str]:
    """``--cfg-options`` sampling ``rois`` RoIs per image in each R-CNN stage (the configs' 512)
    and keeping ``proposals`` RPN proposals (their 2,000) in training, for a CPU. mmcv's CPU
    RoIAlign runs on one thread: with the configs' numbers it took 57 % of a Cascade Mask R-CNN
    training step at 2 images of 256×320 on a 2-core AVX2 EPYC (12 s a step; 3.3 s with 64 and
    300). The R-CNN stages are read from ``config`` (a list in Cascade)."""
    from mmengine.config import Config
    rcnn = Config.fromfile(config).model.train_cfg.rcnn
    stages = [f'.{i}' for i in range(len(rcnn))] if isinstance(rcnn, list) else ['']
    return [f'model.train_cfg.rcnn{stage}.sampler.num={rois}' for stage in stages] + \
        [f'model.train_cfg.rpn_proposal.max_per_img={proposals}']


def train_cmd(config: str, work_dir: str, options: List[str], extra: Sequence[str] = ()) -> list:
    """tools/train.py, resuming when the work_dir exists (a stopped stage)."""
    cmd = [sys.executable, osp.join(TOOLS, 'train.py'), config, '--work-dir', work_dir, *extra]
    if osp.isdir(work_dir):
        cmd.append('--resume')
    return cmd + ['--cfg-options', *options]


def run_training(config: str, work_dir: str, options: List[str], max_epochs: int,
                 extra: Sequence[str] = ()) -> None:
    """Train (or resume) one stage. A stage stopped after its last epoch's checkpoint, before
    its record was written, is not trained again: ``tools/train.py --resume`` refuses a
    finished run."""
    point = resume_point(work_dir) if osp.isdir(work_dir) else None
    if point is not None and point[0] >= max_epochs:
        print(f'[protocol] {osp.basename(work_dir)}: already trained to epoch {point[0]} of '
              f'{max_epochs} ({osp.basename(point[1])}); not training it again', flush=True)
        return
    run_stage(train_cmd(config, work_dir, options, extra), work_dir + '.log')


# --------------------------------------------------------------------------- stages


class ProtocolRun:
    """The stages of one protocol in one work_dir."""

    def __init__(self, protocol: Protocol, work_dir: str) -> None:
        self.p = protocol
        self.work_dir = osp.abspath(work_dir)
        self.imagenet = osp.join(self.work_dir, 'data', 'fashion_imagenet')
        self.coco = osp.join(self.work_dir, 'data', 'fashion_coco')

    def stage_file(self, stage: str) -> str:
        return osp.join(self.work_dir, 'stages', f'{stage}.json')

    def pretrain_dir(self, backbone: str) -> str:
        return osp.join(self.work_dir, 'pretrain', backbone)

    def finetune_dir(self, case: Case) -> str:
        return osp.join(self.work_dir, 'finetune', case.name)

    def done(self, stage: str) -> Optional[dict]:
        path = self.stage_file(stage)
        if not osp.isfile(path):
            return None
        with open(path) as f:
            return json.load(f)

    def check_protocol(self) -> None:
        """Write the protocol on the first run; refuse a work_dir of another protocol."""
        path = osp.join(self.work_dir, 'protocol.json')
        if osp.isfile(path):
            with open(path) as f:
                fixed = json.load(f)
            if fixed != self.p.to_json():
                changed = sorted(k for k in fixed if fixed[k] != self.p.to_json().get(k))
                raise ValueError(f'{self.work_dir} was started under another protocol (differs '
                                 f'in {changed}); use another --work-dir')
        else:
            atomic_json(self.p.to_json(), path)

    def stage(self, name: str, fn, work_dir: Optional[str] = None) -> dict:
        """Run stage ``name`` (``fn``) unless it is done; record its result with
        ``wall_seconds``, the time of this process. A training stage (``work_dir``) that
        resumes from a checkpoint of an earlier, stopped process records ``resumed: true``:
        its ``wall_seconds`` leaves out the time the earlier processes took."""
        result = self.done(name)
        if result is not None:
            print(f'[protocol] {name}: done, skipped', flush=True)
            return result
        resumed = work_dir is not None and osp.isfile(osp.join(work_dir, 'last_checkpoint'))
        print(f'[protocol] {name}: {"resuming" if resumed else "running"}', flush=True)
        start = time.time()
        result = fn()
        result['wall_seconds'] = round(time.time() - start, 1)
        if work_dir is not None:
            result['resumed'] = resumed
        atomic_json(result, self.stage_file(name))
        return result

    def validate_resume_point(self, config: str, work_dir: str, options: List[str],
                              max_epochs: int, val_interval: int) -> Optional[dict]:
        """Run the validation that a stopped stage missed, before the stage resumes.

        A stage stopped during the validation after epoch e leaves ``epoch_e.pth`` and no record
        of that validation, and ``--resume`` goes on with epoch e + 1: mmengine never validates
        the checkpoint it resumes from. That would leave a gap in the curves and, after the last
        epoch, a stage that cannot be scored. So the validation is run here with tools/test.py
        on that checkpoint (the configs' test split and evaluator are their validation ones) and
        logged as ``<work_dir>/<time>_validation-epoch_<e>/vis_data/scalars.json``: one record
        with ``step`` = e, where :func:`validations` and plot_curves.py read validations.
        Returns that record, or None when nothing was missing."""
        point = resume_point(work_dir)
        if point is None:
            return None
        epoch, checkpoint = point
        if epoch not in validated_epochs(max_epochs, val_interval) or \
                any(r.get('step') == epoch for r in validations(work_dir)):
            return None
        print(f'[protocol] {osp.basename(work_dir)}: the validation after epoch {epoch} was not '
              'logged (the stage was stopped during it); running it on '
              f'{osp.basename(checkpoint)} with tools/test.py', flush=True)
        out_dir = osp.join(work_dir, f'{time.strftime("%Y%m%d_%H%M%S")}_validation-epoch_{epoch}')
        record = dict(test_metrics(config, checkpoint, out_dir, options, work_dir + '.log'),
                      step=epoch)
        from mmpoly.engine.saving import atomic_write
        atomic_write(json.dumps(record) + '\n', osp.join(out_dir, 'vis_data', 'scalars.json'))
        return record

    # data ------------------------------------------------------------------------------------
    def data(self) -> dict:
        sys.path.insert(0, osp.join(TOOLS, 'dataset_converters'))
        import make_fashion_coco
        from fashion_mnist_to_imagenet import write_fashion_imagenet
        if not osp.isdir(self.imagenet):
            write_fashion_imagenet(self.imagenet, dict(train=self.p.imagenet_train,
                                                       val=self.p.imagenet_val),
                                   seed=self.p.seed)
        configs = make_fashion_coco.main([
            self.coco, '--train', str(self.p.coco_train), '--val', str(self.p.coco_val),
            '--image-size', *map(str, self.p.coco_size), '--seed', str(self.p.seed)])
        return dict(imagenet=self.imagenet, coco=self.coco, configs=configs)

    # pretraining -----------------------------------------------------------------------------
    def pretrain_options(self) -> List[str]:
        size, p = self.p.image_size, self.p
        options = ['model.head.num_classes=10', f'train_cfg.max_epochs={p.pretrain_epochs}',
                   f'param_scheduler.milestones={p.pretrain_milestones()}',
                   f'train_dataloader.batch_size={p.pretrain_batch}',
                   f'train_dataloader.dataset.pipeline.1.scale={size}',
                   *(f'{loader}.dataset.pipeline.1.scale={round(size * 256 / 224)}'
                     for loader in ('val_dataloader', 'test_dataloader')),
                   *(f'{loader}.dataset.pipeline.2.crop_size={size}'
                     for loader in ('val_dataloader', 'test_dataloader')),
                   f'randomness.seed={p.seed}', 'default_hooks.logger.interval=20',
                   'default_hooks.checkpoint.max_keep_ckpts=2']
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            options += [f'{loader}.dataset.data_root={self.imagenet}',
                        f'{loader}.num_workers={p.num_workers}',
                        f'{loader}.persistent_workers=False']
        return options

    def pretrain(self, backbone: str) -> dict:
        from mmengine.config import Config
        config = osp.join(REPO, 'configs', CLASSIFIERS[backbone])
        work_dir = self.pretrain_dir(backbone)
        options = self.pretrain_options()
        self.validate_resume_point(config, work_dir, options, self.p.pretrain_epochs,
                                   Config.fromfile(config).train_cfg.get('val_interval', 1))
        run_training(config, work_dir, options, self.p.pretrain_epochs, ['--auto-scale-lr'])
        checkpoint = osp.join(work_dir, f'epoch_{self.p.pretrain_epochs}.pth')
        if not osp.isfile(checkpoint):
            raise RuntimeError(f'pretraining ended without {checkpoint}')
        return dict(checkpoint=checkpoint, work_dir=work_dir,
                    top1=final_validation(work_dir, 'accuracy/', self.p.pretrain_epochs)['top1'],
                    seconds_per_iter=seconds_per_iter(work_dir))

    # fine-tuning -----------------------------------------------------------------------------
    def finetune_options(self, case: Case, checkpoint: Optional[str]) -> List[str]:
        p = self.p
        options = [f'train_cfg.max_epochs={p.det_epochs}',
                   f'train_cfg.val_interval={p.val_interval}',
                   f'param_scheduler.0.end={p.warmup_iters}',
                   f'param_scheduler.1.end={p.det_epochs}',
                   f'param_scheduler.1.milestones={p.det_milestones()}',
                   f'train_dataloader.batch_size={p.det_batch}',
                   f'randomness.seed={p.seed}', 'default_hooks.logger.interval=10',
                   # a checkpoint after each validation (and the last epoch), not each epoch:
                   # the short protocol's 36 checkpoints of 247 MB were 8.9 GB of writes; a
                   # stopped stage loses at most val_interval - 1 epochs
                   f'default_hooks.checkpoint.interval={p.val_interval}',
                   'default_hooks.checkpoint.max_keep_ckpts=2',
                   *fewer_rois_options(case.shipped_config, p.det_rois, p.det_proposals)]
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            options += [f'{loader}.num_workers={p.num_workers}',
                        f'{loader}.persistent_workers=False']
        if case.pretrained:
            options.append(f'model.backbone.init_cfg.checkpoint={checkpoint}')
        else:
            options += ['model.backbone.init_cfg=None', 'model.backbone.frozen_stages=-1',
                        'model.backbone.norm_eval=False']
        return options

    def finetune(self, case: Case, checkpoint: Optional[str]) -> dict:
        config = osp.join(self.coco, case.config)
        work_dir = self.finetune_dir(case)
        options = self.finetune_options(case, checkpoint)
        self.validate_resume_point(config, work_dir, options, self.p.det_epochs,
                                   self.p.val_interval)
        run_training(config, work_dir, options, self.p.det_epochs)
        final = osp.join(work_dir, f'epoch_{self.p.det_epochs}.pth')
        if not osp.isfile(final):
            raise RuntimeError(f'fine-tuning ended without {final}')
        metrics = final_validation(work_dir, 'coco/', self.p.det_epochs)
        return dict(checkpoint=final, work_dir=work_dir,
                    **{m: metrics[m] for m in METRICS if m in metrics},
                    empty_evaluation=metrics.get('empty_evaluation', False),
                    seconds_per_iter=seconds_per_iter(work_dir))

    # report ----------------------------------------------------------------------------------
    def training_split_cases(self) -> List[Case]:
        """The cases also scored on training images: the pretrained Mask R-CNNs (the targets')."""
        return [c for c in self.p.cases if c.detector == 'mask-rcnn' and c.pretrained]

    def training_split_file(self, case: Case) -> str:
        return osp.join(self.work_dir, 'report', 'training_split', f'{case.name}.json')

    def training_split_metrics(self, case: Case) -> dict:
        """COCO metrics of a finished case's final checkpoint on the first ``coco_val`` training
        images (as many as the validation split has), with the test settings of its validation.
        Next to the validation AP, it tells a detector that has not fit its training images yet
        (under-trained: both low) from one that fits them and does not carry it over to new
        images (both apart). Kept in ``report/training_split/<case>.json``; a rerun reads it."""
        path = self.training_split_file(case)
        if osp.isfile(path):
            with open(path) as f:
                return json.load(f)
        finished = self.done(f'finetune-{case.name}')
        if finished is None:
            raise RuntimeError(f'{case.name} has not finished: no final checkpoint to score')
        out_dir = osp.join(self.work_dir, 'report', 'training_split', case.name)
        ann_file = osp.join(out_dir, 'instances_train2017_subset.json')
        coco_subset(osp.join(self.coco, 'annotations', 'instances_train2017.json'),
                    self.p.coco_val, ann_file)
        pretrained = self.done(f'pretrain-{case.backbone}') if case.pretrained else None
        options = self.finetune_options(case, pretrained and pretrained['checkpoint']) + [
            f'test_dataloader.dataset.ann_file={ann_file}',
            'test_dataloader.dataset.data_prefix.img=train2017/',
            f'test_evaluator.ann_file={ann_file}']
        print(f'[protocol] {case.name}: scoring {osp.basename(finished["checkpoint"])} on '
              f'{self.p.coco_val} training images', flush=True)
        metrics = test_metrics(osp.join(self.coco, case.config), finished['checkpoint'], out_dir,
                               options, osp.join(self.work_dir, 'report', 'report.log'))
        result = dict({m: metrics.get(f'coco/{m}', 0.0) for m in METRICS},
                      images=self.p.coco_val,
                      empty_evaluation=not any(k.startswith('coco/') for k in metrics))
        atomic_json(result, path)
        return result

    def report(self, results: dict) -> dict:
        """The report of the finished stages in ``report/``: loss / AP / accuracy curves, the
        predictions of the finished pretrained Mask R-CNNs on the same validation images (one
        grid, ``predictions.jpg``, and each detector's own files) and their scores on training
        images; ``results.json`` once every stage is done. ``report WORK`` draws it for a run
        still going."""
        pretrained, cases = results['pretrain'], results['cases']
        report_dir = osp.join(self.work_dir, 'report')
        log = osp.join(report_dir, 'report.log')
        plot = [sys.executable, osp.join(TOOLS, 'analysis_tools', 'plot_curves.py')]
        if cases:
            run_stage(plot + [*(c['work_dir'] for c in cases.values()), '--labels', *cases,
                              '--metrics', 'loss', 'coco/bbox_mAP', 'coco/segm_mAP', '--out',
                              osp.join(report_dir, 'finetune_curves.png')], log)
        if pretrained:
            run_stage(plot + [*(r['work_dir'] for r in pretrained.values()), '--labels',
                              *pretrained, '--metrics', 'loss', 'accuracy/top1', '--out',
                              osp.join(report_dir, 'pretrain_curves.png')], log)
        with open(osp.join(self.coco, 'annotations', 'instances_val2017.json')) as f:
            names = sorted(i['file_name'] for i in json.load(f)['images'])
        images = [osp.join(self.coco, 'val2017', n) for n in names[:self.p.prediction_images]]
        drawn = {}
        for case in self.training_split_cases():  # the pretrained Mask R-CNNs
            if case.name not in cases:
                continue
            out_dir = osp.join(report_dir, 'predictions', case.name)
            run_stage([sys.executable, osp.join(TOOLS, 'det_inference.py'), *images,
                       osp.join(self.coco, case.config), cases[case.name]['checkpoint'],
                       '--out-dir', out_dir], log)
            drawn[case.name] = [osp.join(out_dir, 'vis', osp.basename(i)) for i in images]
            self.training_split_metrics(case)
        if drawn:
            prediction_grid(drawn, osp.join(report_dir, 'predictions.jpg'))
        results = self.results()
        if results['complete']:
            atomic_json(results, osp.join(self.work_dir, 'results.json'))
        else:
            print(f'[protocol] partial report in {report_dir} (no results.json): stages not '
                  f'done yet: {self.missing_stages()}', flush=True)
        return results

    def stages(self) -> List[str]:
        """Every stage of the protocol, in the order one process runs them."""
        return ['data', *(f'pretrain-{b}' for b in self.p.classifiers),
                *(f'finetune-{c.name}' for c in self.p.cases)]

    def missing_stages(self) -> List[str]:
        """The stages of the protocol not done yet, in :meth:`stages` order."""
        return [s for s in self.stages() if self.done(s) is None]

    def run(self, backbones: Optional[Sequence[str]] = None,
            cases: Optional[Sequence[str]] = None) -> Optional[dict]:
        """Run (or resume) the stages of ``backbones`` (default: all), then the report once
        every stage of the protocol is done; ``None`` while other stages remain.

        ``cases`` (names, default: all) runs only those fine-tuning stages, and of the
        pretraining stages only the ones they need: e.g. the from-scratch cases alone, which
        need none."""
        unknown = sorted(set(backbones or ()) - set(self.p.classifiers))
        if unknown:
            raise ValueError(f'--backbone: {unknown} is not in protocol {self.p.name!r}; '
                             f'allowed: {list(self.p.classifiers)}')
        names = [c.name for c in self.p.cases]
        unknown = sorted(set(cases or ()) - set(names))
        if unknown:
            raise ValueError(f'--case: {unknown} is not in protocol {self.p.name!r}; '
                             f'allowed: {names}')
        lane = set(backbones or self.p.classifiers)
        selected = [c for c in self.p.cases
                    if c.backbone in lane and (cases is None or c.name in cases)]
        if not selected:
            raise ValueError(f'--case {list(cases or ())} with --backbone {sorted(lane)}: no '
                             'case of the protocol is both; allowed: cases of those backbones')
        pretrain = lane if cases is None else {c.backbone for c in selected if c.pretrained}
        os.makedirs(self.work_dir, exist_ok=True)
        self.check_protocol()
        with open(osp.join(self.work_dir, '.data.lock'), 'w') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one lane writes the data, the other waits
            self.stage('data', self.data)
        for backbone in self.p.classifiers:
            if backbone in pretrain:
                self.stage(f'pretrain-{backbone}', lambda b=backbone: self.pretrain(b),
                           self.pretrain_dir(backbone))
        for case in selected:
            if case.pretrained:
                pretrained = self.done(f'pretrain-{case.backbone}')
                checkpoint = pretrained['checkpoint']
            else:
                checkpoint = None
            self.stage(f'finetune-{case.name}',
                       lambda c=case, k=checkpoint: self.finetune(c, k),
                       self.finetune_dir(case))
        results = self.results()
        if not results['complete']:
            print(f'[protocol] report waits for the stages not done yet (another lane or '
                  f'--case): {self.missing_stages()}', flush=True)
            return None
        return self.report(results)

    def results(self) -> dict:
        """The results of the finished stages (``complete``: all of them), as ``results.json``
        holds them."""
        done = {stage: self.done(stage) for stage in self.stages()}
        pretrained = {b: done[f'pretrain-{b}'] for b in self.p.classifiers
                      if done[f'pretrain-{b}'] is not None}
        cases = {c.name: dict(done[f'finetune-{c.name}'], backbone=c.backbone,
                              detector=c.detector, pretrained=c.pretrained)
                 for c in self.p.cases if done[f'finetune-{c.name}'] is not None}
        progress = {}  # the newest validation of each case still training
        for case in self.p.cases:
            work_dir = self.finetune_dir(case)
            if case.name in cases or not osp.isdir(work_dir):
                continue
            rows = [r for r in validations(work_dir) if 'coco/bbox_mAP' in r]
            if rows:
                progress[case.name] = dict(epoch=rows[-1]['step'],
                                           **{m: rows[-1][f'coco/{m}'] for m in METRICS})
        training_split = {}  # the scores on training images computed so far
        for case in self.training_split_cases():
            if osp.isfile(self.training_split_file(case)):
                training_split[case.name] = self.training_split_metrics(case)  # reads the file
        return dict(protocol=self.p.to_json(), pretrain=pretrained, cases=cases,
                    findings=findings(self.p, cases), progress=progress,
                    training_split=training_split, complete=None not in done.values())

    @classmethod
    def of_work_dir(cls, work_dir: str) -> 'ProtocolRun':
        """The run of a work_dir, under the protocol its ``protocol.json`` names."""
        path = osp.join(work_dir, 'protocol.json')
        if not osp.isfile(path):
            raise FileNotFoundError(f'{work_dir} is not a protocol work_dir: no protocol.json')
        with open(path) as f:
            return cls(protocol_of(json.load(f), path), work_dir)


def with_seed(protocol: Protocol, seed: Optional[int]) -> Protocol:
    """``protocol`` run with another ``seed`` (``run --seed``; None: its own): the data, the
    pretraining and the fine-tuning all take it."""
    return protocol if seed is None else dataclasses.replace(protocol, seed=seed)


def protocol_of(fixed: dict, source: str) -> Protocol:
    """The protocol of this version whose JSON is ``fixed`` (read from ``source``), with the
    seed it names (``run --seed``)."""
    for protocol in PROTOCOLS.values():
        seed = fixed.get('seed') if isinstance(fixed, dict) else None
        if isinstance(seed, int) and not isinstance(seed, bool) and \
                with_seed(protocol, seed).to_json() == fixed:
            return with_seed(protocol, seed)
    raise ValueError(f'{source}: its protocol is none of the protocols of this version '
                     f'({sorted(PROTOCOLS)}): it was changed after the run began')


def findings(p: Protocol, cases: Dict[str, dict]) -> dict:
    """The protocol's questions, answered from the measured cases (None where a case is
    missing)."""

    def get(detector: str, backbone: str, pretrained: bool, metric: str) -> Optional[float]:
        case = cases.get(Case(detector, backbone, pretrained).name)
        return None if case is None else case.get(metric)

    out: dict = dict(pretrained_beats_scratch={}, pdc_minus_resnet18={}, targets={})
    for backbone in CLASSIFIERS:
        pre = get('mask-rcnn', backbone, True, 'bbox_mAP')
        scratch = get('mask-rcnn', backbone, False, 'bbox_mAP')
        out['pretrained_beats_scratch'][backbone] = None if None in (pre, scratch) else \
            bool(pre >= scratch + p.better_margin)
    for detector in ('mask-rcnn', 'cascade-mask-rcnn'):
        for metric in ('bbox_mAP', 'segm_mAP'):
            pdc = get(detector, 'pdc-resnet18', True, metric)
            res = get(detector, 'resnet18', True, metric)
            out['pdc_minus_resnet18'][f'{detector}/{metric}'] = None if None in (pdc, res) \
                else round(pdc - res, 4)
    bbox = get('mask-rcnn', 'pdc-resnet18', True, 'bbox_mAP')
    segm = get('mask-rcnn', 'pdc-resnet18', True, 'segm_mAP')
    out['targets'] = {
        f'pdc-resnet18 Mask R-CNN bbox mAP >= {p.target_bbox_map}':
        None if bbox is None else bool(bbox >= p.target_bbox_map),
        f'pdc-resnet18 Mask R-CNN segm mAP >= {p.target_segm_map}':
        None if segm is None else bool(segm >= p.target_segm_map)}
    return out


def merge_results(parts: Sequence[dict], labels: Sequence[str]) -> dict:
    """One results JSON from those of several runs of one protocol, e.g. lanes run on separate
    machines, or a run whose work_dir was lost and the cases it lacks run again in another: the
    union of their pretraining, finished cases and training-split scores, the findings computed
    again from that union. ``labels`` name the parts: ``merged_from`` lists each with the cases
    it finished, once (merging merged results again with one of their parts adds nothing).

    Refuses parts of different protocols, and a case or pretraining finished in two parts with
    different results (one seed each: there is no rule for choosing between them)."""
    if len(parts) != len(labels) or not parts:
        raise ValueError(f'{len(parts)} results with {len(labels)} labels; allowed: one per part')
    fixed = parts[0]['protocol']
    for label, part in zip(labels[1:], parts[1:]):
        if part['protocol'] != fixed:
            changed = sorted(k for k in fixed if fixed[k] != part['protocol'].get(k))
            raise ValueError(f'{label}: protocol {part["protocol"]["name"]!r} differs from '
                             f'that of {labels[0]} in {changed}; only results of one protocol '
                             'merge')
    protocol = protocol_of(fixed, labels[0])
    merged: dict = dict(pretrain={}, cases={}, training_split={}, progress={})
    origin: Dict[Tuple[str, str], str] = {}
    runs: List[dict] = []  # the runs the results come from, each with its finished cases
    for label, part in zip(labels, parts):
        new = False
        for key in ('pretrain', 'cases', 'training_split'):
            for name, value in part.get(key, {}).items():
                if name in merged[key] and merged[key][name] != value:
                    raise ValueError(f'{key}[{name!r}] differs between {origin[key, name]} and '
                                     f'{label}; allowed: a case finished in one of the parts, '
                                     'or the same results in each')
                new |= name not in merged[key]
                merged[key][name], origin[key, name] = value, label
        if new:  # a part that repeats results already merged (merging again) adds no run
            runs += [run for run in part.get('merged_from', [
                dict(source=label, cases=sorted(part.get('cases', {})))]) if run not in runs]
    for part in parts:  # the newest validation of each case that no part finished
        for name, row in part.get('progress', {}).items():
            if name not in merged['cases'] and \
                    row['epoch'] > merged['progress'].get(name, {'epoch': -1})['epoch']:
                merged['progress'][name] = row
    return dict(merged, protocol=fixed, findings=findings(protocol, merged['cases']),
                complete=all(c.name in merged['cases'] for c in protocol.cases) and
                all(b in merged['pretrain'] for b in protocol.classifiers),
                merged_from=runs)


# --------------------------------------------------------------------------- the docs table


def render_table(results: Optional[dict]) -> str:
    """The docs' detection table (Markdown) from a results JSON; a note when there is none."""
    if results is None:
        return ('No run of the full protocol has been recorded yet: run '
                '`python tools/detection_protocol.py run`, then '
                '`python tools/detection_protocol.py table work_dirs/detection_protocol/'
                'results.json --write docs/en/detection.md`.')
    p = results['protocol']
    lines = [f'Protocol `{p["name"]}` (seed {p["seed"]}); Fashion-COCO validation split '
             f'({p["coco_val"]} images).']
    if results['cases']:  # a run still going may have none finished yet
        lines += ['',
                  '| detector | backbone | init | bbox mAP | bbox AP50 | segm mAP | segm AP50 |',
                  '|---|---|---|---|---|---|---|']
    for name in p['cases']:
        case = results['cases'].get(name)
        if case is None:
            continue
        cells = [case['detector'], case['backbone'],
                 'ImageNet-layout pretrained' if case['pretrained'] else 'scratch']
        cells += [f'{case[m]:.3f}' if case.get(m) is not None else '–' for m in METRICS]
        lines.append('| ' + ' | '.join(cells) + ' |')
    f = results['findings']
    lines.append('')
    if results.get('merged_from'):
        runs = results['merged_from']
        lines.append(f'- cases merged from {len(runs)} runs of this protocol: ' + '; '.join(
            f'run {i}: {", ".join(run["cases"]) or "no finished case"}'
            for i, run in enumerate(runs, 1)))
    if results['pretrain']:
        lines.append('- pretraining top-1 (Fashion-MNIST in the ImageNet layout, '
                     f'{p["image_size"]}×{p["image_size"]}, {p["pretrain_epochs"]} epochs): ' +
                     ', '.join(f'{b} {results["pretrain"][b]["top1"]:.2f} %'
                               for b in p['classifiers'] if b in results['pretrain']))
    if not results.get('complete', True):  # results of a run still going (no `complete`: old)
        left = [name for name in p['cases'] if name not in results['cases']]
        lines.append(f'- **partial**: {len(results["cases"])} of {len(p["cases"])} cases '
                     f'finished; not yet: {", ".join(left)}')
        progress = results.get('progress', {})
        for name, row in ((n, progress[n]) for n in p['cases'] if n in progress):
            lines.append(f'- unfinished, {name}: newest validation after epoch {row["epoch"]} '
                         f'of {p["det_epochs"]}: bbox mAP {row["bbox_mAP"]:.3f} (AP50 '
                         f'{row["bbox_mAP_50"]:.3f}), segm mAP {row["segm_mAP"]:.3f}')
    for name in p['cases']:  # in the protocol's order (the JSON's keys are sorted)
        row, val = results.get('training_split', {}).get(name), results['cases'].get(name)
        if row is None or val is None:
            continue
        lines.append(f'- {name} on {row["images"]} of its training images (the same test '
                     f'settings): bbox mAP {row["bbox_mAP"]:.3f} (validation '
                     f'{val["bbox_mAP"]:.3f}), segm mAP {row["segm_mAP"]:.3f} (validation '
                     f'{val["segm_mAP"]:.3f})' +
                     (': the evaluation was empty' if row.get('empty_evaluation') else ''))
    for name in p['cases']:
        if results['cases'].get(name, {}).get('empty_evaluation'):
            lines.append(f'- {name}: no detection passed the test score threshold, so the COCO '
                         f'evaluation was empty (AP 0 by definition)')
    # each group in the order findings() makes it: a stored JSON has its keys sorted
    order = findings(PROTOCOLS['full'], {})

    def in_order(group: str) -> List[Tuple[str, object]]:
        rank = {key: i for i, key in enumerate(order[group])}
        return sorted(f[group].items(), key=lambda item: rank.get(item[0], len(rank)))

    for backbone, beats in in_order('pretrained_beats_scratch'):
        if beats is not None:
            lines.append(f'- {backbone}: pretrained beats scratch (bbox mAP by ≥ '
                         f'{p["better_margin"]}): {"yes" if beats else "no"}')
    for key, diff in in_order('pdc_minus_resnet18'):
        if diff is not None:
            lines.append(f'- PDC-ResNet18 − ResNet18, {key}: {diff:+.3f}')
    for key, met in in_order('targets'):
        if met is not None:
            lines.append(f'- target {key}: {"met" if met else "not met"}')
    return '\n'.join(lines)


def replace_table(text: str, table: str) -> str:
    """``text`` with the part between the table markers replaced by ``table``."""
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f'the page has no {TABLE_START} ... {TABLE_END} block')
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    return f'{head}{TABLE_START}\n{table}\n{TABLE_END}{tail}'


def table_in(text: str) -> str:
    """The table between the markers of a page."""
    return text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip('\n')


# --------------------------------------------------------------------------- command line


def _threads(value: str) -> int:
    """``--threads``: a whole number >= 1 (an argparse type: a usage error otherwise)."""
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise argparse.ArgumentTypeError(f'{value!r}; allowed: a whole number >= 1')
    return threads


def _seed(value: str) -> int:
    """``--seed``: a whole number from 0 to 2**32 - 1 (numpy's and torch's seed range)."""
    try:
        seed = int(value)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**32:
        raise argparse.ArgumentTypeError(f'{value!r}; allowed: a whole number from 0 to '
                                         f'{2**32 - 1}')
    return seed


def default_work_dir(protocol: str, seed: Optional[int]) -> str:
    """``run``'s work_dir without ``--work-dir``: ``work_dirs/detection_protocol``, with
    ``_<protocol>`` for another protocol than ``full`` and ``_seed<N>`` for another seed than
    the protocol's."""
    name = 'detection_protocol' + ('' if protocol == 'full' else f'_{protocol}')
    if seed is not None and seed != PROTOCOLS[protocol].seed:
        name += f'_seed{seed}'
    return osp.join('work_dirs', name)


def _run_problem(args: argparse.Namespace) -> Optional[str]:
    """Why ``run``'s options cannot run (None if they can): a --backbone or --case the
    protocol does not have, none of the cases in both, a work_dir of another protocol."""
    protocol = with_seed(PROTOCOLS[args.protocol], args.seed)
    backbones = list(protocol.classifiers)
    unknown = [b for b in args.backbone or () if b not in backbones]
    if unknown:
        return (f'--backbone {" ".join(unknown)}: not in protocol {protocol.name!r}; allowed: '
                f'{", ".join(backbones)}')
    names = [c.name for c in protocol.cases]
    unknown = [c for c in args.case or () if c not in names]
    if unknown:
        return (f'--case {" ".join(unknown)}: not a case of protocol {protocol.name!r}; '
                f'allowed: {", ".join(names)}')
    lane = set(args.backbone or backbones)
    if not any(c.backbone in lane and (args.case is None or c.name in args.case)
               for c in protocol.cases):
        return (f'--case {" ".join(args.case or ())} with --backbone {" ".join(sorted(lane))}: '
                'no case of the protocol is both; allowed: cases of those backbones')
    path = osp.join(args.work_dir, 'protocol.json')
    if osp.isfile(path):
        try:
            with open(path) as f:
                fixed = json.load(f)
        except (OSError, ValueError) as error:
            return f'--work-dir {args.work_dir!r}: {path} cannot be read ({error})'
        if fixed != protocol.to_json():
            ours = protocol.to_json()
            changed = sorted(k for k in set(fixed) | set(ours) if fixed.get(k) != ours.get(k))
            theirs = ', '.join(f'{k}={fixed.get(k)!r}' for k in changed if k != 'cases')
            return (f'--work-dir {args.work_dir!r} was started under another protocol '
                    f'(differs in {", ".join(changed)}; there: {theirs or "other cases"}); '
                    'use another --work-dir, or the options it was started with')
    elif osp.exists(args.work_dir) and not osp.isdir(args.work_dir):
        return f'--work-dir {args.work_dir!r} is a file, not a folder'
    return None


def _work_dir_problem(work_dir: str, option: str = 'WORK_DIR') -> Optional[str]:
    """Why ``work_dir`` is not a protocol work_dir of this version (None if it is)."""
    fix = 'give the work_dir of a `tools/detection_protocol.py run` (its --work-dir)'
    if not osp.exists(work_dir):
        return f'{option} {work_dir!r} does not exist; {fix}'
    try:
        ProtocolRun.of_work_dir(work_dir)
    except FileNotFoundError as error:
        return f'{option}: {error}; {fix}'
    except (OSError, ValueError) as error:  # unreadable JSON, a protocol of another version
        return f'{option}: {error}'
    return None


def _table_parts(args: argparse.Namespace) -> Tuple[Optional[List[dict]], Optional[str]]:
    """The results of ``table``'s sources, each a results JSON or a protocol work_dir; or why
    one cannot be read."""
    parts = []
    for source in args.results:
        if osp.isdir(source):
            problem = _work_dir_problem(source, 'RESULTS')
            if problem:
                return None, problem
            parts.append(ProtocolRun.of_work_dir(source).results())
            continue
        if not osp.isfile(source):
            return None, (f'RESULTS {source!r} does not exist; allowed: a results.json of a '
                          'run, or the work_dir of a run')
        try:
            with open(source) as f:
                part = json.load(f)
        except (OSError, ValueError) as error:
            return None, f'RESULTS {source!r} is not a readable JSON file ({error})'
        keys = ('protocol', 'cases', 'pretrain', 'findings')
        if not isinstance(part, dict) or not set(keys) <= set(part):
            return None, (f'RESULTS {source!r} is not a results JSON of this tool (it needs '
                          f'the keys {", ".join(keys)})')
        parts.append(part)
    return parts, None


def _page_problem(page: str) -> Optional[str]:
    """Why ``table --write PAGE`` cannot replace the table of ``page`` (None if it can)."""
    if not osp.isfile(page):
        return (f'--write {page!r} does not exist; give the page holding the table block '
                f'({TABLE_START} ... {TABLE_END}), e.g. docs/en/detection.md')
    try:
        with open(page, encoding='utf-8') as f:
            text = f.read()
    except (OSError, ValueError) as error:
        return f'--write {page!r} cannot be read ({error})'
    if TABLE_START not in text or TABLE_END not in text:
        return f'--write {page!r} has no {TABLE_START} ... {TABLE_END} block'
    return None


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line, checked: a bad one is a usage error (status 2) naming the option or
    argument, its value and what is allowed, before any stage runs or anything is written."""
    parser = argparse.ArgumentParser(prog='tools/detection_protocol.py',
                                     description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    run = sub.add_parser('run', help='run (or resume) the protocol')
    run.add_argument('--protocol', choices=sorted(PROTOCOLS), default='full')
    run.add_argument('--work-dir', default=None,
                     help='default work_dirs/detection_protocol[_<protocol>]')
    run.add_argument('--backbone', nargs='+', default=None, choices=sorted(CLASSIFIERS),
                     help="run only this backbone's stages (a lane); on 2 cores two lanes of "
                     "one thread each, started side by side on the same --work-dir, finish "
                     "sooner than one process; the last lane to finish writes the report")
    run.add_argument('--case', nargs='+', default=None, metavar='CASE',
                     help='run only these fine-tuning cases (e.g. '
                     'mask-rcnn_resnet18_scratch) and the pretraining they need')
    run.add_argument('--threads', type=_threads, default=None,
                     help='CPU threads of each stage (OMP_NUM_THREADS; default: torch\'s)')
    run.add_argument('--seed', type=_seed, default=None,
                     help="the seed of the data, the pretraining and the fine-tuning (default: "
                     "the protocol's, 0); recorded in protocol.json and results.json. Another "
                     "seed needs its own work_dir: the default one then ends in _seed<N>")
    for name, text in (
            ('training-split', 'score the finished pretrained Mask R-CNN cases of a work_dir on '
             'training images (the report does it too; this runs it before the other cases '
             'finish)'),
            ('report', "draw the report of a work_dir's finished stages now (curves, "
             'predictions, training-split scores); a complete run writes it by itself')):
        command = sub.add_parser(name, help=text)
        command.add_argument('work_dir')
        command.add_argument('--threads', type=_threads, default=None, help='as for run')
    table = sub.add_parser('table', help="print the docs' table from a results JSON")
    table.add_argument('results', nargs='+',
                       help="results.json of a run, or a run's work_dir (its finished stages, "
                       "while it is still going); several (of one protocol) are merged")
    table.add_argument('--write', metavar='PAGE',
                       help=f'replace the table block of this page and copy the JSON next to it '
                       f'({RESULTS_NEXT_TO_PAGE})')
    args = parser.parse_args(argv)
    if args.command == 'run':
        args.work_dir = args.work_dir or default_work_dir(args.protocol, args.seed)
        problem = _run_problem(args)
    elif args.command in ('training-split', 'report'):
        problem = _work_dir_problem(args.work_dir)
    else:
        problem = _page_problem(args.write) if args.write else None
        if problem is None:
            args.parts, problem = _table_parts(args)
        if problem is None and len(args.parts) > 1:
            try:
                merge_results(args.parts, args.results)
            except ValueError as error:
                problem = f'RESULTS: {error}'
    if problem:
        parser.error(problem)
    return args


def main(argv: Optional[Sequence[str]] = None) -> Optional[dict]:
    args = parse_args(argv)
    if args.command in ('run', 'training-split', 'report') and args.threads is not None:
        CHILD_ENV.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    if args.command == 'training-split':
        run = ProtocolRun.of_work_dir(args.work_dir)
        scored = {c.name: run.training_split_metrics(c) for c in run.training_split_cases()
                  if run.done(f'finetune-{c.name}') is not None}
        print(json.dumps(scored, indent=2))
        return scored
    if args.command == 'report':
        run = ProtocolRun.of_work_dir(args.work_dir)
        return run.report(run.results())
    if args.command == 'run':
        protocol = with_seed(PROTOCOLS[args.protocol], args.seed)
        results = ProtocolRun(protocol, args.work_dir).run(args.backbone, args.case)
        if results is not None:
            print(render_table(results))
        return results
    parts = args.parts
    results = parts[0] if len(parts) == 1 else merge_results(parts, args.results)
    table = render_table(results)
    if args.write:  # the page's table and, next to it, the JSON it was generated from
        from mmpoly.engine.saving import atomic_write
        with open(args.write) as f:
            text = f.read()
        atomic_json(results, osp.join(osp.dirname(args.write), RESULTS_NEXT_TO_PAGE))
        atomic_write(replace_table(text, table), args.write)
    print(table)
    return results


if __name__ == '__main__':
    main()
    sys.exit(0)
