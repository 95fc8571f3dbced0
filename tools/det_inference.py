"""Run a trained mmpoly detector on images and save them with boxes, masks and labels drawn.

mmdet's ``DetInferencer`` does the work (its visualiser draws; predictions go to JSON)::

    python tools/det_inference.py IMAGE [IMAGE ...] CONFIG CHECKPOINT --out-dir outputs
    # -> outputs/vis/<image>.jpg (drawn),
    #    outputs/preds/<image>.json (boxes, labels, scores, RLE masks)

The detector's ImageNet classifier checkpoint is not needed: the detector checkpoint holds the
backbone.
"""
import argparse
import json
import os
import os.path as osp
import sys
from typing import List, Optional, Sequence

from mmengine.config import Config, DictAction


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
        '--cfg-options', nargs='+', action=DictAction, default={},
        help='override config settings, key=value pairs, e.g. model.test_cfg.rcnn.score_thr=0 '
        '(the detector keeps boxes scoring at least 0.05 by default, whatever --score-thr is)')
    parser.add_argument('--palette', default='none',
                        help="box colours: 'coco', 'voc', 'citys', 'random' or 'none' (the "
                        "config's or checkpoint's)")
    args = parser.parse_args(argv)
    if not 0 <= args.score_thr <= 1:
        parser.error(f'--score-thr must be in [0, 1], got {args.score_thr}')
    return args


def main(argv: Optional[Sequence[str]] = None) -> List[str]:
    """Draw the predictions; return the paths of the images with at least one detection drawn
    (each scoring at least ``--score-thr``)."""
    args = parse_args(argv)
    for path in [*args.inputs, args.config, args.checkpoint]:
        if not osp.exists(path):
            raise FileNotFoundError(f'{path} does not exist')
    from mmdet.apis import DetInferencer

    from mmpoly.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    config = Config.fromfile(args.config)
    config.merge_from_dict(args.cfg_options)
    inferencer = DetInferencer(model=config, weights=args.checkpoint, device=args.device,
                               palette=args.palette, show_progress=False)
    inferencer(args.inputs if len(args.inputs) > 1 else args.inputs[0], out_dir=args.out_dir,
               pred_score_thr=args.score_thr, no_save_pred=False)
    images = []
    for path in args.inputs:
        names = sorted(os.listdir(path)) if osp.isdir(path) else [osp.basename(path)]
        images += [osp.join(args.out_dir, 'vis', name) for name in names]
    drawn = []
    for image in images:
        if not osp.isfile(image):
            continue
        scores = _scores(osp.join(args.out_dir, 'preds',
                                  osp.splitext(osp.basename(image))[0] + '.json'))
        kept = sum(score >= args.score_thr for score in scores)
        if kept:
            print(f'drawn: {image} ({kept} of {len(scores)} detections score >= '
                  f'{args.score_thr:g})')
            drawn.append(image)
        else:
            best = f'best score {max(scores):.3g}' if scores else 'the model returned none'
            print(f'nothing drawn: no detection scores >= --score-thr {args.score_thr:g} '
                  f'({best}); {image} is the image as it was')
    return drawn


def _scores(pred_file: str) -> List[float]:
    """The scores of every prediction DetInferencer saved (it saves them unthresholded)."""
    with open(pred_file) as f:
        return [float(score) for score in json.load(f)['scores']]


if __name__ == '__main__':
    main()
    sys.exit(0)
