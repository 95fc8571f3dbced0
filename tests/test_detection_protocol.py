"""The detection protocol tool (tools/detection_protocol.py): the protocol fixed before any run,
the findings and the docs table from a results JSON, the docs page agreeing with its JSON, the
Fashion-MNIST → ImageNet-layout converter, and (slow) the short protocol end to end."""
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers import FASHION_MNIST, REPO, load_tool

protocol = load_tool('detection_protocol')
converter = load_tool('dataset_converters/fashion_mnist_to_imagenet')
DOCS_PAGE = REPO / 'docs' / 'en' / 'detection.md'
needs_fashion_mnist = pytest.mark.skipif(
    not (FASHION_MNIST / 'train-images-idx3-ubyte.gz').is_file(),
    reason='tools/setup_env.sh installs Fashion-MNIST (Debian dataset-fashion-mnist)')


@pytest.mark.slow
@needs_fashion_mnist
def test_short_protocol_produces_a_detector(tmp_path: Path) -> None:
    """First in the file: while this 10-to-15-minute test runs, its xdist worker has the file's
    other tests pending and takes no other file (--dist loadfile) to wait behind it.

    The whole protocol at its short size: ResNet18 pretrained 5 epochs on 2,000 images of
    32×32, then Mask R-CNN fine-tuned 36 epochs (288 steps, 16 RoIs an image) on 16 Fashion-COCO
    images of 128×160. What it must show is a detector that learns: it fits its training images
    (bbox mAP 0.406, 0.582, 0.433 and segm mAP 0.358, 0.526, 0.401 on 8 of them with seeds 0, 1,
    2 on a 2-core AVX2 EPYC, 2026-12-07), its loss falls (4.43 to 1.43 with seed 0, the last
    logged value 0.27 to 0.32 of the first with the three), and its validation finds objects.
    Validation AP on 8 held-out images after this little training is at the level of run-to-run
    noise (bbox AP50 0.055, 0.050, 0.065, segm AP50 0.056, 0.043, 0.082 with the three seeds),
    so it is asserted above zero only; the training-split bars are under half of the lowest
    value measured."""
    work_dir = tmp_path / 'short'
    results = protocol.main(['run', '--protocol', 'short', '--work-dir', str(work_dir),
                             '--threads', '1'])
    assert json.loads((work_dir / 'results.json').read_text()) == results
    assert results['pretrain']['resnet18']['top1'] >= 50
    case = results['cases']['mask-rcnn_resnet18_pretrained']
    # it fits its training images (scored with the validation's test settings)
    scored = results['training_split']['mask-rcnn_resnet18_pretrained']
    assert scored['images'] == 8 and scored['empty_evaluation'] is False, scored
    assert scored['bbox_mAP'] >= 0.16 and scored['segm_mAP'] >= 0.16, scored
    assert (work_dir / 'report' / 'training_split' /
            'mask-rcnn_resnet18_pretrained.json').is_file()
    # its training loss falls: the last logged value is below half the first (one per epoch: the
    # logger's interval of 10 iterations is longer than an epoch of 8)
    losses = [r['loss'] for r in protocol.read_scalars(case['work_dir']) if 'loss' in r]
    assert len(losses) == 36 and losses[-1] < 0.5 * losses[0], losses
    # its validation after each 12 epochs finds objects in the held-out images
    validations = [r for r in protocol.read_scalars(case['work_dir']) if 'coco/bbox_mAP' in r]
    assert [r['step'] for r in validations] == [12, 24, 36]
    assert case['empty_evaluation'] is False
    assert case['bbox_mAP_50'] > 0 and case['segm_mAP_50'] > 0, case
    report = work_dir / 'report'
    assert (report / 'finetune_curves.png').stat().st_size > 10_000
    assert (report / 'pretrain_curves.png').stat().st_size > 10_000
    drawn = sorted((report / 'predictions' / 'mask-rcnn_resnet18_pretrained').glob('vis/*.jpg'))
    assert len(drawn) == protocol.PROTOCOLS['short'].prediction_images
    grid = cv2.imread(str(report / 'predictions.jpg'))  # one row: the one pretrained Mask R-CNN
    assert grid.shape[:2] == (protocol.GRID_CAPTION + 128, len(drawn) * (160 + protocol.GRID_GAP))
    # had the stage been stopped during its last validation, the rerun would run that validation
    # with tools/test.py before resuming: the same numbers as the validation in training
    for scalars in Path(case['work_dir']).glob('*/vis_data/scalars.json'):
        kept = [line for line in scalars.read_text().splitlines()
                if not ('coco/bbox_mAP' in line and json.loads(line)['step'] == 36)]
        scalars.write_text(''.join(line + '\n' for line in kept))
    run = protocol.ProtocolRun.of_work_dir(str(work_dir))
    short = run.p.cases[0]
    record = run.validate_resume_point(
        str(work_dir / 'data' / 'fashion_coco' / short.config), case['work_dir'],
        run.finetune_options(short, results['pretrain']['resnet18']['checkpoint']),
        run.p.det_epochs, run.p.val_interval)
    assert {m: record[f'coco/{m}'] for m in protocol.METRICS} == \
        {m: case[m] for m in protocol.METRICS}
    assert protocol.final_validation(case['work_dir'], 'coco/', 36)['bbox_mAP'] == \
        case['bbox_mAP']


def test_full_protocol_is_the_paper_s_shape() -> None:
    full = protocol.PROTOCOLS['full']
    assert full.det_epochs == 12 and full.det_milestones() == [8, 11]
    assert full.pretrain_milestones() == [3, 6, 9]  # 30/60/90 % of 10 epochs
    assert [c.name for c in full.cases] == [
        'mask-rcnn_resnet18_pretrained', 'mask-rcnn_resnet18_scratch',
        'mask-rcnn_pdc-resnet18_pretrained', 'mask-rcnn_pdc-resnet18_scratch',
        'cascade-mask-rcnn_resnet18_pretrained', 'cascade-mask-rcnn_pdc-resnet18_pretrained']
    for case in full.cases:  # each case is a shipped config on the converter's set
        assert Path(case.shipped_config).is_file()
        assert case.config == Path(case.shipped_config).name.replace('_coco.py',
                                                                     '_fashion-coco.py')


def test_scratch_cases_train_every_stage_and_learn_bn(tmp_path: Path) -> None:
    run = protocol.ProtocolRun(protocol.PROTOCOLS['full'], str(tmp_path))
    pre = run.finetune_options(protocol.Case('mask-rcnn', 'resnet18', True), '/ckpt.pth')
    scratch = run.finetune_options(protocol.Case('mask-rcnn', 'resnet18', False), None)
    assert 'model.backbone.init_cfg.checkpoint=/ckpt.pth' in pre
    assert {'model.backbone.init_cfg=None', 'model.backbone.frozen_stages=-1',
            'model.backbone.norm_eval=False'} <= set(scratch)
    common = set(pre) & set(scratch)  # everything else is the same
    assert set(pre) - common == {'model.backbone.init_cfg.checkpoint=/ckpt.pth'}
    assert 'param_scheduler.1.milestones=[8, 11]' in common


def test_a_work_dir_keeps_its_protocol(tmp_path: Path) -> None:
    protocol.ProtocolRun(protocol.PROTOCOLS['short'], str(tmp_path)).check_protocol()
    protocol.ProtocolRun(protocol.PROTOCOLS['short'], str(tmp_path)).check_protocol()
    with pytest.raises(ValueError, match=r"another protocol \(differs in \[.*'coco_train'"):
        protocol.ProtocolRun(protocol.PROTOCOLS['full'], str(tmp_path)).check_protocol()


def test_a_resumed_stage_says_its_time_is_the_last_process_s(tmp_path: Path) -> None:
    """A training stage that resumes from a stopped process's checkpoint records
    ``resumed: true`` (its wall_seconds leave the earlier processes out); a fresh one false."""
    run = protocol.ProtocolRun(protocol.PROTOCOLS['short'], str(tmp_path))
    fresh = run.stage('pretrain-resnet18', lambda: dict(top1=50.0),
                      run.pretrain_dir('resnet18'))
    assert fresh['resumed'] is False and fresh['wall_seconds'] >= 0
    case = protocol.PROTOCOLS['short'].cases[0]
    Path(run.finetune_dir(case)).mkdir(parents=True)
    Path(run.finetune_dir(case), 'last_checkpoint').write_text('epoch_3.pth')
    resumed = run.stage(f'finetune-{case.name}', lambda: dict(), run.finetune_dir(case))
    assert resumed['resumed'] is True
    assert json.loads(Path(run.stage_file(f'finetune-{case.name}')).read_text()) == resumed
    assert 'resumed' not in run.stage('data', lambda: dict())  # not a training stage


def test_lanes_run_their_backbone_s_stages_and_the_last_one_reports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    full = protocol.PROTOCOLS['full']
    run = protocol.ProtocolRun(full, str(tmp_path))
    with pytest.raises(ValueError, match=r"--backbone: \['resnet50'\] is not in protocol 'full'"):
        run.run(['resnet50'])
    ran, reported = [], []
    monkeypatch.setattr(run, 'data', lambda: ran.append('data') or {})
    monkeypatch.setattr(run, 'pretrain',
                        lambda b: ran.append(b) or dict(checkpoint=f'/{b}.pth', top1=80.0))
    monkeypatch.setattr(run, 'finetune', lambda c, k: ran.append((c.name, k)) or dict(bbox_mAP=0))
    monkeypatch.setattr(run, 'report', lambda r: reported.append(r) or {'done': True})
    assert run.run(['resnet18']) is None  # the other lane's stages remain
    assert ran == ['data', 'resnet18', ('mask-rcnn_resnet18_pretrained', '/resnet18.pth'),
                   ('mask-rcnn_resnet18_scratch', None),
                   ('cascade-mask-rcnn_resnet18_pretrained', '/resnet18.pth')]
    assert 'report waits for the stages not done yet' in capsys.readouterr().out and not reported
    # the table of a run still going: its finished cases, which are not yet, and the newest
    # validation of one that is training
    coco = {f'coco/{m}': v for m, v in zip(protocol.METRICS, (0.1, 0.2, 0.3, 0.4))}
    _write_scalars(tmp_path / 'finetune' / 'mask-rcnn_pdc-resnet18_pretrained', '20261127_0', [
        dict(coco, step=2), dict(lr=0.1, loss=1.0, step=300), dict(time=1.0, step=4)])
    assert '| detector |' not in protocol.render_table(
        protocol.ProtocolRun(full, str(tmp_path / 'new')).results())  # no case finished: no rows
    partial = protocol.main(['table', str(tmp_path)])
    assert not partial['complete'] and len(partial['cases']) == 3
    table = capsys.readouterr().out
    assert '| mask-rcnn | resnet18 | scratch | 0.000 | – | – | – |' in table
    assert '- pretraining top-1 (Fashion-MNIST in the ImageNet layout, 64×64, 10 epochs): ' \
        'resnet18 80.00 %' in table
    assert ('- **partial**: 3 of 6 cases finished; not yet: mask-rcnn_pdc-resnet18_pretrained, '
            'mask-rcnn_pdc-resnet18_scratch, cascade-mask-rcnn_pdc-resnet18_pretrained') in table
    assert ('- unfinished, mask-rcnn_pdc-resnet18_pretrained: newest validation after epoch 2 '
            'of 12: bbox mAP 0.100 (AP50 0.200), segm mAP 0.300') in table
    ran.clear()
    assert run.run(['pdc-resnet18']) == {'done': True}  # data done; the last lane reports
    assert ran[0] == 'pdc-resnet18' and len(ran) == 4
    pretrained, cases = reported[0]['pretrain'], reported[0]['cases']
    assert reported[0]['complete'] and list(pretrained) == ['resnet18', 'pdc-resnet18']
    assert list(cases) == [c.name for c in full.cases]
    assert cases['mask-rcnn_pdc-resnet18_scratch']['pretrained'] is False
    capsys.readouterr()
    for threads in ('0', 'two'):  # a usage error naming the option and what is allowed
        with pytest.raises(SystemExit) as exit_info:
            protocol.main(['run', '--threads', threads, '--work-dir', str(tmp_path / 'none')])
        assert exit_info.value.code == 2
        assert (f"tools/detection_protocol.py run: error: argument --threads: '{threads}'; "
                'allowed: a whole number >= 1') in capsys.readouterr().err
    assert not (tmp_path / 'none').exists()


def test_case_selection_runs_those_cases_and_only_the_pretraining_they_need(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = protocol.ProtocolRun(protocol.PROTOCOLS['full'], str(tmp_path))
    ran = []
    monkeypatch.setattr(run, 'data', lambda: ran.append('data') or {})
    monkeypatch.setattr(run, 'pretrain',
                        lambda b: ran.append(b) or dict(checkpoint=f'/{b}.pth', top1=80.0))
    monkeypatch.setattr(run, 'finetune', lambda c, k: ran.append((c.name, k)) or dict(bbox_mAP=0))
    with pytest.raises(ValueError, match=r"--case: \['mask-rcnn_resnet50_scratch'\] is not in "
                       r"protocol 'full'; allowed: \['mask-rcnn_resnet18_pretrained'"):
        run.run(cases=['mask-rcnn_resnet50_scratch'])
    with pytest.raises(ValueError, match=r"no case of the protocol is both"):
        run.run(['resnet18'], ['mask-rcnn_pdc-resnet18_scratch'])
    assert ran == []
    # a scratch case needs no pretraining
    assert run.run(cases=['mask-rcnn_pdc-resnet18_scratch']) is None
    assert ran == ['data', ('mask-rcnn_pdc-resnet18_scratch', None)]
    ran.clear()  # a pretrained case: its classifier's pretraining first, then the case
    assert run.run(cases=['cascade-mask-rcnn_resnet18_pretrained']) is None
    assert ran == ['resnet18', ('cascade-mask-rcnn_resnet18_pretrained', '/resnet18.pth')]
    args = protocol.parse_args(['run', '--case', 'mask-rcnn_resnet18_scratch',
                                'mask-rcnn_pdc-resnet18_scratch'])
    assert args.case == ['mask-rcnn_resnet18_scratch', 'mask-rcnn_pdc-resnet18_scratch']


def test_table_of_a_work_dir_needs_a_known_protocol(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A usage error of one line (exit 2), not a traceback."""
    with pytest.raises(SystemExit) as info:
        protocol.main(['table', str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and 'not a protocol work_dir: no protocol.json' in err, err
    assert 'Traceback' not in err
    changed = dict(protocol.PROTOCOLS['short'].to_json(), coco_train=17)
    (tmp_path / 'protocol.json').write_text(json.dumps(changed))
    with pytest.raises(SystemExit) as info:
        protocol.main(['table', str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and 'none of the protocols of this version' in err, err


def _write_scalars(work_dir: Path, run: str, records: list) -> None:
    path = work_dir / run / 'vis_data' / 'scalars.json'
    path.parent.mkdir(parents=True)
    path.write_text(''.join(json.dumps(r) + '\n' for r in records))


def test_final_validation_is_the_last_epoch_s_and_an_empty_one_is_zero(tmp_path: Path) -> None:
    train = [dict(lr=0.01, loss=2.0, time=1.0, epoch=e, iter=4 * e, step=4 * e)
             for e in (1, 2, 3)]  # training lines: step = iteration (the 4th is epoch 1's 4)
    coco = dict(zip((f'coco/{m}' for m in protocol.METRICS), (0.3, 0.5, 0.2, 0.4)))
    _write_scalars(tmp_path, '20261127_000000', [
        train[0], dict(coco, time=0.1, step=1), train[1], dict(time=0.1, step=2)])
    # epoch 2's evaluation was empty: zeros, flagged; never epoch 1's numbers
    assert protocol.final_validation(str(tmp_path), 'coco/', 2) == dict(
        {m: 0.0 for m in protocol.METRICS}, empty_evaluation=True)
    assert protocol.final_validation(str(tmp_path), 'coco/', 1)['bbox_mAP'] == 0.3
    with pytest.raises(RuntimeError, match='no validation after epoch 3'):
        protocol.final_validation(str(tmp_path), 'coco/', 3)
    with pytest.raises(RuntimeError, match=r'logged no accuracy/\*'):
        protocol.final_validation(str(tmp_path), 'accuracy/', 2)
    # a resumed run logs epoch 3 in a newer folder; its validation counts
    _write_scalars(tmp_path, '20261127_010000', [train[2], dict(coco, time=0.1, step=3)])
    assert protocol.final_validation(str(tmp_path), 'coco/', 3) == {
        m: v for m, v in zip(protocol.METRICS, (0.3, 0.5, 0.2, 0.4))}
    assert protocol.seconds_per_iter(str(tmp_path)) == 1.0


def test_a_validation_missed_by_a_stop_is_run_before_the_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage stopped during its validation after the last epoch (36 of the short protocol):
    finetune() first runs that validation with tools/test.py on epoch_36.pth, then resumes, and
    the stage is scored by it; the record is where validations() and plot_curves.py read. The
    training is not run again (tools/train.py --resume refuses a finished run); a stage stopped
    before its last epoch resumes."""
    short = protocol.PROTOCOLS['short']
    run = protocol.ProtocolRun(short, str(tmp_path))
    case = short.cases[0]
    work_dir = tmp_path / 'finetune' / case.name
    coco = {f'coco/{m}': v for m, v in zip(protocol.METRICS, (0.1, 0.2, 0.3, 0.4))}
    _write_scalars(work_dir, '20261127_000000', [
        dict(lr=0.01, loss=2.0, time=1.0, epoch=12, iter=96, step=96), dict(coco, step=12),
        dict(lr=0.01, loss=1.0, time=1.0, epoch=36, iter=288, step=288)])
    for epoch in (35, 36):
        (work_dir / f'epoch_{epoch}.pth').write_bytes(b'weights')
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'epoch_36.pth'))
    tested = {f'coco/{m}': v for m, v in zip(protocol.METRICS, (0.25, 0.5, 0.125, 0.375))}
    commands = []

    def fake_stage(cmd, log):
        commands.append(cmd)
        if Path(cmd[1]).name == 'test.py':  # what tools/test.py --out-item metrics writes
            Path(cmd[cmd.index('--out') + 1]).write_text(json.dumps(tested))

    monkeypatch.setattr(protocol, 'run_stage', fake_stage)
    result = run.finetune(case, '/pretrained.pth')
    (test, ) = commands  # the missed validation only: the training had finished
    config = str(tmp_path / 'data' / 'fashion_coco' / case.config)
    assert test[1:4] == [str(Path(protocol.TOOLS) / 'test.py'), config,
                         str(work_dir / 'epoch_36.pth')]
    options = run.finetune_options(case, '/pretrained.pth')
    assert test[test.index('--cfg-options') + 1:] == options
    assert {m: result[m] for m in protocol.METRICS} == dict(zip(protocol.METRICS,
                                                                (0.25, 0.5, 0.125, 0.375)))
    assert result['empty_evaluation'] is False
    (record, ) = work_dir.glob('*_validation-epoch_36/vis_data/scalars.json')
    assert json.loads(record.read_text()) == dict(tested, step=36)
    plot_curves = load_tool('analysis_tools/plot_curves')
    curves = plot_curves.load_run(str(work_dir))
    assert curves.series['coco/bbox_mAP'] == ([12.0, 36.0], [0.1, 0.25])
    assert curves.series['loss'] == ([96.0, 288.0], [2.0, 1.0])
    # nothing is missing now, and nothing was at an epoch without a validation
    assert run.validate_resume_point(config, str(work_dir), options, 36, 12) is None
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'epoch_35.pth'))
    assert run.validate_resume_point(config, str(work_dir), options, 36, 12) is None
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'epoch_34.pth'))  # deleted
    assert protocol.resume_point(str(work_dir)) is None
    assert len(commands) == 1
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'epoch_35.pth'))
    protocol.run_training(config, str(work_dir), options, 36)  # stopped before its last epoch
    train = commands[-1]
    assert Path(train[1]).name == 'train.py' and '--resume' in train
    assert train[train.index('--cfg-options') + 1:] == options
    assert protocol.validated_epochs(12, 5) == [5, 10, 12]


def test_pretrained_mask_rcnns_are_scored_on_training_images_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    full = protocol.PROTOCOLS['full']
    run = protocol.ProtocolRun(full, str(tmp_path))
    run.check_protocol()
    assert [c.name for c in run.training_split_cases()] == [
        'mask-rcnn_resnet18_pretrained', 'mask-rcnn_pdc-resnet18_pretrained']
    ids = [5, 3, *range(100, 168)]  # 70 images, not in id order
    images = [dict(id=i, file_name=f'{i:012d}.jpg', height=8, width=8) for i in ids]
    annotations = [dict(id=10 * i + k, image_id=i, category_id=k) for i in ids
                   for k in range(i % 3 + 1)]
    train_ann = tmp_path / 'data' / 'fashion_coco' / 'annotations' / 'instances_train2017.json'
    train_ann.parent.mkdir(parents=True)
    train_ann.write_text(json.dumps(dict(images=images, annotations=annotations,
                                         categories=[dict(id=0, name='a')], info={})))
    subset = tmp_path / 'subset.json'
    protocol.coco_subset(str(train_ann), 2, str(subset))  # the first two, in the file's order
    written = json.loads(subset.read_text())
    assert written['images'] == images[:2] and written['info'] == {}
    assert sorted(a['id'] for a in written['annotations']) == [30, 50, 51, 52]
    with pytest.raises(ValueError, match=r'images: 71; allowed: 1 to 70'):
        protocol.coco_subset(str(train_ann), 71, str(subset))

    case = run.training_split_cases()[1]
    protocol.atomic_json(dict(checkpoint='/pdc.pth', top1=80.0),
                         run.stage_file('pretrain-pdc-resnet18'))
    with pytest.raises(RuntimeError, match='mask-rcnn_pdc-resnet18_pretrained has not finished'):
        run.training_split_metrics(case)
    protocol.atomic_json(dict(checkpoint='/det/epoch_12.pth', work_dir='/det', bbox_mAP=0.2,
                              bbox_mAP_50=0.4, segm_mAP=0.1, segm_mAP_50=0.3),
                         run.stage_file(f'finetune-{case.name}'))
    commands = []

    def fake_stage(cmd, log):
        commands.append(cmd)
        Path(cmd[cmd.index('--out') + 1]).write_text(json.dumps(
            {f'coco/{m}': v for m, v in zip(protocol.METRICS, (0.5, 0.75, 0.25, 0.625))}))

    monkeypatch.setattr(protocol, 'run_stage', fake_stage)
    assert protocol.main(['training-split', str(tmp_path)]) == {case.name: dict(
        bbox_mAP=0.5, bbox_mAP_50=0.75, segm_mAP=0.25, segm_mAP_50=0.625, images=64,
        empty_evaluation=False)}
    (test, ) = commands  # only the finished case, with its validation's settings but the subset
    assert test[2:4] == [str(tmp_path / 'data' / 'fashion_coco' / case.config),
                         '/det/epoch_12.pth']
    ann_file = tmp_path / 'report' / 'training_split' / case.name / \
        'instances_train2017_subset.json'
    assert test[test.index('--cfg-options') + 1:] == run.finetune_options(case, '/pdc.pth') + [
        f'test_dataloader.dataset.ann_file={ann_file}',
        'test_dataloader.dataset.data_prefix.img=train2017/', f'test_evaluator.ann_file={ann_file}']
    assert json.loads(ann_file.read_text())['images'] == images[:64]
    run.training_split_metrics(case)  # kept: not run again
    assert len(commands) == 1
    results = run.results()
    assert list(results['training_split']) == [case.name]
    assert ('- mask-rcnn_pdc-resnet18_pretrained on 64 of its training images (the same test '
            'settings): bbox mAP 0.500 (validation 0.200), segm mAP 0.250 (validation 0.100)'
            ) in protocol.render_table(results)


def test_report_of_a_run_so_far_draws_its_finished_cases_and_writes_no_results_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    full = protocol.PROTOCOLS['full']
    run = protocol.ProtocolRun(full, str(tmp_path))
    run.check_protocol()
    images = [dict(id=i, file_name=f'{i:012d}.jpg', height=40, width=50) for i in (7, 2, 5, 9, 3)]
    train = [dict(id=i, file_name=f'{i:012d}.jpg', height=40, width=50) for i in range(100, 164)]
    for split, split_images in (('train', train), ('val', images)):
        ann = tmp_path / 'data' / 'fashion_coco' / 'annotations' / f'instances_{split}2017.json'
        ann.parent.mkdir(parents=True, exist_ok=True)
        ann.write_text(json.dumps(dict(images=split_images, annotations=[], categories=[],
                                       info={})))
    for b in full.classifiers:
        protocol.atomic_json(dict(checkpoint=f'/{b}.pth', work_dir=f'/pre/{b}', top1=80.0),
                             run.stage_file(f'pretrain-{b}'))
    finished = ['mask-rcnn_resnet18_pretrained', 'mask-rcnn_pdc-resnet18_pretrained',
                'mask-rcnn_resnet18_scratch']
    for name in finished:
        protocol.atomic_json(dict(checkpoint=f'/{name}/epoch_12.pth', work_dir=f'/{name}',
                                  bbox_mAP=0.2, bbox_mAP_50=0.4, segm_mAP=0.1, segm_mAP_50=0.3),
                             run.stage_file(f'finetune-{name}'))
    commands = []
    colours = {'mask-rcnn_resnet18_pretrained': (0, 0, 255),
               'mask-rcnn_pdc-resnet18_pretrained': (255, 0, 0)}  # BGR: red and blue rows

    def fake_stage(cmd, log):  # what plot_curves.py, det_inference.py and test.py write
        commands.append(cmd)
        if '--out-dir' in cmd:
            out_dir = Path(cmd[cmd.index('--out-dir') + 1])
            (out_dir / 'vis').mkdir(parents=True, exist_ok=True)
            for image in cmd[2:2 + full.prediction_images]:
                canvas = np.zeros((40, 50, 3), np.uint8)
                canvas[:] = colours[out_dir.name]
                assert cv2.imwrite(str(out_dir / 'vis' / Path(image).name), canvas)
        elif cmd[1].endswith('test.py'):
            Path(cmd[cmd.index('--out') + 1]).write_text(json.dumps(
                {f'coco/{m}': 0.5 for m in protocol.METRICS}))

    monkeypatch.setattr(protocol, 'run_stage', fake_stage)
    results = protocol.main(['report', str(tmp_path)])
    assert not results['complete'] and not (tmp_path / 'results.json').exists()
    assert 'partial report' in capsys.readouterr().out
    tools = [Path(c[1]).name for c in commands]
    assert tools == ['plot_curves.py', 'plot_curves.py', 'det_inference.py', 'test.py',
                     'det_inference.py', 'test.py']
    assert commands[0][commands[0].index('--labels') + 1:][:3] == finished[:1] + [
        'mask-rcnn_resnet18_scratch', 'mask-rcnn_pdc-resnet18_pretrained']
    first = sorted(i['file_name'] for i in images)[:full.prediction_images]  # the same images
    for cmd in (commands[2], commands[4]):
        assert [Path(i).name for i in cmd[2:2 + len(first)]] == first
    grid = cv2.imread(str(tmp_path / 'report' / 'predictions.jpg'))
    row = protocol.GRID_CAPTION + 40  # a caption over the 40-pixel-high images
    assert grid.shape[:2] == (2 * row, full.prediction_images * (50 + protocol.GRID_GAP))
    for top, (b, g, r) in ((0, colours['mask-rcnn_resnet18_pretrained']),
                           (row, colours['mask-rcnn_pdc-resnet18_pretrained'])):
        caption = grid[top:top + protocol.GRID_CAPTION]
        assert 0 < (caption < 128).all(axis=2).mean() < 0.2  # dark text on white
        for column in range(full.prediction_images):  # each tile is its row's image
            left = column * (50 + protocol.GRID_GAP)
            tile = grid[top + protocol.GRID_CAPTION + 2:top + row - 2, left + 2:left + 48]
            assert (np.abs(tile.mean(axis=(0, 1)) - (b, g, r)) < 8).all()  # JPEG's rounding
    with pytest.raises(ValueError, match=r'rows of \[1, 2\] images'):
        protocol.prediction_grid(dict(a=['x'], b=['x', 'y']), str(tmp_path / 'bad.png'))
    # a complete run also writes results.json
    protocol.atomic_json({}, run.stage_file('data'))
    for case in full.cases:
        if case.name not in finished:
            protocol.atomic_json(dict(checkpoint='/c.pth', work_dir='/c', bbox_mAP=0.3),
                                 run.stage_file(f'finetune-{case.name}'))
    assert protocol.main(['report', str(tmp_path)])['complete']
    assert json.loads((tmp_path / 'results.json').read_text())['complete']


def _results(values: dict) -> dict:
    full = protocol.PROTOCOLS['full']
    cases = {}
    for case in full.cases:
        bbox = values[case.name]
        cases[case.name] = dict(backbone=case.backbone, detector=case.detector,
                                pretrained=case.pretrained, bbox_mAP=bbox, bbox_mAP_50=bbox + 0.2,
                                segm_mAP=bbox - 0.05, segm_mAP_50=bbox + 0.1)
    return dict(protocol=full.to_json(), pretrain={}, cases=cases,
                findings=protocol.findings(full, cases))


VALUES = {'mask-rcnn_resnet18_pretrained': 0.30, 'mask-rcnn_resnet18_scratch': 0.29,
          'mask-rcnn_pdc-resnet18_pretrained': 0.42, 'mask-rcnn_pdc-resnet18_scratch': 0.20,
          'cascade-mask-rcnn_resnet18_pretrained': 0.35,
          'cascade-mask-rcnn_pdc-resnet18_pretrained': 0.33}


def test_findings_follow_the_fixed_rules() -> None:
    findings = _results(VALUES)['findings']
    # 0.30 vs 0.29 is within the 0.02 margin: not "better"; 0.42 vs 0.20 is
    assert findings['pretrained_beats_scratch'] == {'resnet18': False, 'pdc-resnet18': True}
    assert findings['pdc_minus_resnet18'] == {
        'mask-rcnn/bbox_mAP': 0.12, 'mask-rcnn/segm_mAP': 0.12,
        'cascade-mask-rcnn/bbox_mAP': -0.02, 'cascade-mask-rcnn/segm_mAP': -0.02}
    assert list(findings['targets'].values()) == [True, True]  # 0.42 >= 0.40, 0.37 >= 0.35


def test_table_rows_and_page_round_trip(tmp_path: Path) -> None:
    table = protocol.render_table(_results(VALUES))
    rows = [line for line in table.splitlines() if line.startswith('| mask') or
            line.startswith('| cascade')]
    assert len(rows) == 6
    assert rows[2] == ('| mask-rcnn | pdc-resnet18 | ImageNet-layout pretrained | 0.420 | 0.620 '
                       '| 0.370 | 0.520 |')
    assert '- PDC-ResNet18 − ResNet18, cascade-mask-rcnn/bbox_mAP: -0.020' in table
    # a stored results JSON has sorted keys: the table keeps the protocol's order
    assert protocol.render_table(json.loads(json.dumps(_results(VALUES), sort_keys=True))) == \
        table
    findings = [line for line in table.splitlines() if line.startswith('- ')]
    assert findings[:3] == ['- resnet18: pretrained beats scratch (bbox mAP by ≥ 0.02): no',
                            '- pdc-resnet18: pretrained beats scratch (bbox mAP by ≥ 0.02): yes',
                            '- PDC-ResNet18 − ResNet18, mask-rcnn/bbox_mAP: +0.120']
    assert 'evaluation was empty' not in table
    empty = _results(VALUES)
    empty['cases']['mask-rcnn_resnet18_scratch']['empty_evaluation'] = True
    assert ('- mask-rcnn_resnet18_scratch: no detection passed the test score threshold, so the '
            'COCO evaluation was empty (AP 0 by definition)') in protocol.render_table(empty)
    page = tmp_path / 'detection.md'
    page.write_text(f'intro\n{protocol.TABLE_START}\nold\n{protocol.TABLE_END}\noutro\n')
    results = tmp_path / 'results.json'
    results.write_text(json.dumps(_results(VALUES)))
    protocol.main(['table', str(results), '--write', str(page)])
    text = page.read_text()
    assert text.startswith('intro\n') and text.endswith('\noutro\n')
    assert protocol.table_in(text) == table
    assert json.loads((tmp_path / protocol.RESULTS_NEXT_TO_PAGE).read_text()) == \
        json.loads(results.read_text())


def test_results_of_separate_runs_merge_into_one_table(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    """A run that has the pretrained cases and one that has the scratch cases (e.g. run again
    after the first one's work_dir was lost) give the table of both, with the findings that
    need both; conflicting or foreign results are refused."""
    whole = _results(VALUES)
    pretrained, scratch = (
        dict(whole, cases={n: c for n, c in whole['cases'].items() if c['pretrained'] == kept},
             pretrain=dict(resnet18=dict(top1=80.0)) if kept else {},
             findings={}, complete=False) for kept in (True, False))
    scratch['progress'] = {'mask-rcnn_resnet18_pretrained': dict(epoch=2)}  # finished elsewhere
    paths = []
    for name, part in (('pretrained', pretrained), ('scratch', scratch)):
        paths.append(tmp_path / f'{name}.json')
        paths[-1].write_text(json.dumps(part))
    page = tmp_path / 'detection.md'
    page.write_text(f'{protocol.TABLE_START}\n{protocol.TABLE_END}\n')
    merged = protocol.main(['table', *map(str, paths), '--write', str(page)])
    assert merged['cases'] == whole['cases'] and merged['findings'] == whole['findings']
    assert merged['pretrain'] == {'resnet18': dict(top1=80.0)} and merged['progress'] == {}
    assert not merged['complete']  # pdc-resnet18's pretraining is in neither part
    assert merged['merged_from'] == [
        dict(source=str(paths[0]), cases=sorted(pretrained['cases'])),
        dict(source=str(paths[1]), cases=sorted(scratch['cases']))]
    table = protocol.table_in(page.read_text())
    assert table == capsys.readouterr().out.strip('\n')
    assert '- resnet18: pretrained beats scratch (bbox mAP by ≥ 0.02): no' in table
    assert ('- cases merged from 2 runs of this protocol: run 1: '
            'cascade-mask-rcnn_pdc-resnet18_pretrained, ') in table
    rows = [line for line in table.splitlines() if line.startswith('| ')]
    assert len(rows) == 1 + 6  # the header and the six cases
    # merging the merged results again with one of their parts changes nothing
    again = protocol.merge_results([merged, scratch], ['docs', 'scratch again'])
    assert again == merged
    conflict = dict(scratch, cases=dict(scratch['cases']))
    conflict['cases']['mask-rcnn_resnet18_scratch'] = dict(
        conflict['cases']['mask-rcnn_resnet18_scratch'], bbox_mAP=0.5)
    with pytest.raises(ValueError, match=r"cases\['mask-rcnn_resnet18_scratch'\] differs between "
                       r"scratch and conflict"):
        protocol.merge_results([scratch, conflict], ['scratch', 'conflict'])
    short = dict(scratch, protocol=protocol.PROTOCOLS['short'].to_json())
    with pytest.raises(ValueError, match=r"short: protocol 'short' differs from that of "
                       r"scratch in \[.*'coco_train'"):
        protocol.merge_results([scratch, short], ['scratch', 'short'])
    changed = dict(scratch, protocol=dict(scratch['protocol'], coco_train=17))
    with pytest.raises(ValueError, match=r"changed: its protocol is none of the protocols of "
                       r"this version"):
        protocol.merge_results([changed], ['changed'])


def test_docs_table_agrees_with_its_results_json() -> None:
    """docs/en/detection.md shows the table generated from docs/en/detection_protocol.json, or
    the note that no full run is recorded when that JSON does not exist."""
    stored = DOCS_PAGE.parent / protocol.RESULTS_NEXT_TO_PAGE
    results = json.loads(stored.read_text()) if stored.is_file() else None
    assert protocol.table_in(DOCS_PAGE.read_text()) == protocol.render_table(results)


@needs_fashion_mnist
def test_converter_writes_mmpretrain_s_imagenet_layout(tmp_path: Path) -> None:
    from mmpretrain.datasets import ImageNet

    from mmpoly.datasets import FASHION_MNIST_CLASSES, LocalFashionMNIST
    out = tmp_path / 'fashion_imagenet'
    counts = converter.main([str(out), '--train', '30', '--val', '10', '--seed', '1'])
    assert counts == {'train': 30, 'val': 10}
    folders = sorted(p.name for p in (out / 'train').iterdir())
    assert folders == sorted(converter.class_folder(n) for n in FASHION_MNIST_CLASSES)
    assert 't-shirt-top' in folders
    source = LocalFashionMNIST(split='test')
    dataset = ImageNet(data_root=str(out), split='val', pipeline=[dict(type='LoadImageFromFile')])
    assert len(dataset) == 10
    lines = (out / 'meta' / 'val.txt').read_text().splitlines()
    for i, line in enumerate(lines):
        rel, label = line.split()
        index = int(rel.split('_')[-1][:-len('.png')])
        info = source.get_data_info(index)
        assert int(label) == info['gt_label'] == dataset.get_data_info(i)['gt_label']
        assert rel.startswith(converter.class_folder(FASHION_MNIST_CLASSES[int(label)]) + '/')
        image = dataset[i]['img']  # loaded as 3-channel colour, grey values kept
        assert image.shape == (28, 28, 3)
        assert np.array_equal(image[..., 0], np.asarray(info['img']))
    with pytest.raises(FileExistsError, match='exists'):
        converter.write_fashion_imagenet(str(out), dict(train=5))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith('.')]  # no temporary left
