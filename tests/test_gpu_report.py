"""tools/analysis_tools/gpu_report.sh and gpu_tables.py: the report's JSON and its tables (no
GPU: a dry run on the CPU, and reports assembled from recorded steps)."""
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
from helpers import FASHION_MNIST, REPO, disk_full_at_fsync, load_tool

SCRIPT = REPO / 'tools' / 'analysis_tools' / 'gpu_report.sh'


@pytest.fixture(scope='module')
def gen():
    return load_tool('analysis_tools/gpu_tables')


def _bench(train: float, infer: float, passed: bool) -> Dict[str, Any]:
    """A benchmark.py --json result with one model against its baseline."""
    def model(config, baseline, ratios, speed):
        return dict(config=config, baseline=baseline, ratios=ratios,
                    train_images_per_s=speed, infer_images_per_s=2 * speed)
    return dict(
        baseline='configs/resnet18_8xb32_in1k.py', settings=dict(batch_size=32),
        models=[model('configs/resnet18_8xb32_in1k.py', True,
                      dict(train=1.0, infer=1.0, memory=1.0, flops=1.0), 1000.0),
                model('configs/pdc_resnet18_8xb32_in1k.py', False,
                      dict(train=train, infer=infer, memory=1.2, flops=1.08), 1000.0 * train)],
        checks=[dict(config='configs/pdc_resnet18_8xb32_in1k.py', target='min_train_ratio',
                     ratio='train', value=train, limit=0.92, passed=passed)])


def _record(gen, parts: Path, name: str, result=None, status='ok', seconds=3) -> None:
    if result is not None:
        (parts / f'{name}.json').write_text(json.dumps(result))
    gen.write_part(str(parts), name, status, seconds)


def test_report_and_tables(gen, tmp_path):
    parts = tmp_path / 'parts'
    parts.mkdir()
    _record(gen, parts, 'mmcv_check', dict(mmcv='2.1.0', cuda_ops=True,
                                           build_time='mmcv 2.1.0 cuda 9.0 build: 301 s (...)'))
    # compiled before benchmark.py recorded its inductor options (the layout default), and after
    older = _bench(0.95, 0.99, True)
    older['settings'].update(compile=True, compile_backend='inductor')
    _record(gen, parts, 'bench:gpu-in1k-pdc:fp32:compiled', older)
    newer = _bench(0.90, 0.97, False)
    newer['settings'].update(compile=True, compile_backend='inductor',
                             compile_options={'force_layout_optimization': True})
    _record(gen, parts, 'bench:gpu-in1k-pdc:bf16:compiled', newer)
    _record(gen, parts, 'bench:gpu-in1k-pdc:fp32:eager',  # --eager drops the targets
            dict(_bench(0.38, 0.51, True), checks=[]))
    _record(gen, parts, 'bench:gpu-in1k-pdc:bf16:eager', status='failed (exit 1)')
    profiled = _bench(0.93, 0.98, True)
    for entry, kernels, busy in zip(profiled['models'], (261, 651), (0.5, 0.25)):
        entry['profile'] = dict(steps=3, ops=100.0, kernels=float(kernels), gpu_ms=6.0,
                                gpu_busy=busy, costliest=[])
    _record(gen, parts, 'bench:gpu-in1k-pdc:fp32:cudagraphs', profiled)
    _record(gen, parts, 'bench:gpu-in1k-pdc:bf16:compiled-cl', _bench(0.97, 1.01, True))
    _record(gen, parts, 'bench:gpu-in1k-pdc:fp32:cudagraphs-cl', _bench(0.94, 1.02, True))

    def convs(config, train_s, macs):
        return dict(config=config, calls=2, macs=macs, train_s=train_s, forward_s=train_s / 3,
                    shapes=[dict(text='60->15 1x1 s1 @56x56', calls=2, train_s=train_s / 2,
                                 train_gmacs=123.4)])
    _record(gen, parts, 'convs:gpu-in1k-pdc:fp32', dict(
        settings=dict(channels_last=True, batch_size=32),
        models=[convs('configs/resnet18_8xb32_in1k.py', 0.004, 100),
                convs('configs/pdc_resnet18_8xb32_in1k.py', 0.006, 92)]))
    _record(gen, parts, 'finetune', seconds=120)
    _record(gen, parts, 'finetune_eval', {'coco/bbox_mAP': 0.412, 'coco/segm_mAP': 0.388})
    _record(gen, parts, 'bench:gpu-cifar100-families:fp32:compiled', status='skipped',
            seconds=0)
    report = gen.collect(str(parts), 'cpu', 540, 533)
    assert [s['name'] for s in report['steps']][:2] == [
        'mmcv_check', 'bench:gpu-in1k-pdc:fp32:compiled']  # in the order they ran
    assert report['steps'][4]['result'] is None and report['budget_s'] == 540
    import torch
    assert (report['torch'], report['cuda']) == (torch.__version__, torch.version.cuda)

    text = gen.tables(report)
    first = text.splitlines()[0]
    assert first.startswith('Measured on ') and f"torch {torch.__version__}" in first
    assert f'CUDA {torch.version.cuda}' in first and report['date'] in first
    assert 'mmcv 2.1.0: CUDA ops yes; build: mmcv 2.1.0 cuda 9.0 build: 301 s' in text
    header = next(line for line in text.splitlines() if line.startswith('| model'))
    # the four columns always, CUDA-graphs and channels-last runs beside them; targets of each
    # checked run
    assert header == ('| model | FLOP ideal | fp32 compiled | bf16 compiled | fp32 eager | '
                      'bf16 eager | fp32 cudagraphs | fp32 cudagraphs-cl | bf16 compiled-cl | '
                      'memory fp32 compiled | targets (fp32 compiled / bf16 compiled / fp32 '
                      'cudagraphs / fp32 cudagraphs-cl / bf16 compiled-cl) |')
    row = next(line for line in text.splitlines()
               if line.startswith('| pdc_resnet18_8xb32_in1k.py'))
    assert row == ('| pdc_resnet18_8xb32_in1k.py | 1.08× | 0.95× / 0.99× | 0.90× / 0.97× | '
                   '0.38× / 0.51× | not run | 0.93× / 0.98× | 0.94× / 1.02× | 0.97× / 1.01× | '
                   '1.20× | train ≥ 0.92: met / train ≥ 0.92: **missed** / train ≥ 0.92: met / '
                   'train ≥ 0.92: met / train ≥ 0.92: met |')
    assert 'fp32 compiled 1000 / 2000 images/s' in text
    assert ("Compiled before the channels-last layout default (inductor's own rule laid out "
            "each graph; it leaves a graph NCHW when a convolution over 1×1 halves its "
            "channels, as PDC-comp's factors do): fp32 compiled.") in text
    assert ('Profile, fp32 cudagraphs, per training step: resnet18_8xb32_in1k.py 261 kernels, '
            'GPU busy 6.0 ms (50 % of the step); pdc_resnet18_8xb32_in1k.py 651 kernels, GPU '
            'busy 6.0 ms (25 % of the step).') in text
    assert 'COCO bbox mAP 0.412, segm mAP 0.388' in text and '(120 s)' in text
    assert ('| gpu-in1k-pdc:fp32, channels-last, batch 32 | pdc_resnet18_8xb32_in1k.py | '
            '6.00 ms | 1.50× / 0.92× | 60->15 1x1 s1 @56x56 ×2: 6.00 ms, 123 GMAC/s |') in text
    assert ('| gpu-in1k-pdc:fp32, channels-last, batch 32 | resnet18_8xb32_in1k.py | 4.00 ms | '
            'baseline |') in text
    assert ('Steps not completed: bench:gpu-in1k-pdc:bf16:eager (failed (exit 1)); '
            'bench:gpu-cifar100-families:fp32:compiled (skipped).') in text

    written = gen.split(report, str(tmp_path / 'gpu'))
    names = sorted(Path(p).name for p in written)
    date = report['date'][:10]
    assert names == [f'{date}_gpu-in1k-pdc_{run}.json'
                     for run in ('bf16_compiled-cl', 'bf16_compiled', 'fp32_compiled',
                                 'fp32_cudagraphs-cl', 'fp32_cudagraphs', 'fp32_eager')]
    assert json.loads(Path(written[0]).read_text())['models'][1]['ratios']['train'] == 0.95

    # `tables --out` writes the tables complete or not at all (as every file of the report)
    report_file = tmp_path / 'report.json'
    report_file.write_text(json.dumps(report))
    tables_file = tmp_path / 'tables.md'
    assert gen.main(['tables', str(report_file), '--out', str(tables_file)]) == 0
    assert tables_file.read_text() == text
    tables_file.write_text('previous')
    with pytest.MonkeyPatch.context() as patch:
        disk_full_at_fsync(patch, min_bytes=len(text.encode()))  # all the tables are written
        with pytest.raises(OSError, match='No space left'):
            gen.main(['tables', str(report_file), '--out', str(tables_file)])
    assert tables_file.read_text() == 'previous'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['gpu', 'parts', 'report.json',
                                                          'tables.md']


def test_restore_keeps_completed_steps(gen, tmp_path):
    """--resume: completed steps are kept with their results, in order; failed and skipped
    steps, the mmcv install and the compile warm-up run again; the Fashion-COCO steps only
    together; a report of another machine is refused."""
    parts = tmp_path / 'parts'
    parts.mkdir()
    _record(gen, parts, 'mmcv', seconds=200)
    _record(gen, parts, 'mmcv_check', dict(mmcv='2.1.0', cuda_ops=False, build_time=None))
    _record(gen, parts, 'warm_compile:1', seconds=90)
    _record(gen, parts, 'bench:gpu-in1k-pdc:fp32:compiled', _bench(0.95, 0.99, True))
    _record(gen, parts, 'bench:gpu-in1k-pdc:bf16:compiled', _bench(0.90, 0.97, False),
            status='targets missed')
    _record(gen, parts, 'bench:gpu-cifar-pdc-comp:fp32:compiled',
            status='failed (exit 124, stopped at the budget)')
    _record(gen, parts, 'fashion_coco')
    _record(gen, parts, 'finetune', seconds=120)
    _record(gen, parts, 'finetune_eval', status='skipped', seconds=0)
    report = gen.collect(str(parts), 'cpu', 540, 533)

    again = tmp_path / 'again'
    again.mkdir()
    kept = gen.restore(report, str(again), 'cpu')
    assert kept == ['533', 'bench:gpu-in1k-pdc:fp32:compiled',
                    'bench:gpu-in1k-pdc:bf16:compiled']
    gen.write_part(str(again), 'bench:gpu-cifar-pdc-comp:fp32:compiled', 'ok', 30)
    resumed = gen.collect(str(again), 'cpu', 540, 600)
    assert [s['name'] for s in resumed['steps']] == [
        'bench:gpu-in1k-pdc:fp32:compiled', 'bench:gpu-in1k-pdc:bf16:compiled',
        'bench:gpu-cifar-pdc-comp:fp32:compiled']
    assert resumed['steps'][1] == report['steps'][4]  # status, seconds and result kept
    assert resumed['date'] == report['date']  # the environment of the first run,
    assert len(resumed['resumed']) == 1 and resumed['resumed'][0] >= report['date']
    assert f"{report['date']} (continued with --resume on {resumed['resumed'][0]})" in \
        gen.tables(resumed).splitlines()[0]  # and the date of the run that continued it
    # split names each benchmark file by the day of the run that measured it
    dated = dict(resumed, steps=[dict(step, result=dict(step['result'], settings=dict(
        batch_size=32, date=f'2026-12-0{i + 1}T10:00:00Z'))) for i, step in
        enumerate(resumed['steps'][:2])])
    assert sorted(Path(path).name for path in gen.split(dated, str(tmp_path / 'split'))) == [
        '2026-12-01_gpu-in1k-pdc_fp32_compiled.json', '2026-12-02_gpu-in1k-pdc_bf16_compiled.json']

    report['steps'][-1]['status'] = 'ok'  # the Fashion-COCO steps completed: kept together
    third = tmp_path / 'third'
    third.mkdir()
    assert gen.restore(report, str(third), 'cpu')[-3:] == ['fashion_coco', 'finetune',
                                                           'finetune_eval']
    with pytest.raises(SystemExit, match="measured with torch '1.0'"):
        gen.restore(dict(report, torch='1.0'), str(tmp_path), 'cpu')


def test_warm_runs_commands_side_by_side(gen, tmp_path):
    """warm: each command runs once, ``jobs`` at a time; it succeeded if it wrote its JSON,
    whatever its exit status (a benchmark that misses a target exits 1)."""
    import sys
    folder = tmp_path / 'warm'
    folder.mkdir()
    script = ('import sys, time, pathlib; time.sleep(1); '
              'pathlib.Path(sys.argv[1]).write_text("{}"); sys.exit(int(sys.argv[2]))')
    for i, code in enumerate(('0', '1', '0')):
        (folder / f'{i}.cmd').write_text(
            '\0'.join([sys.executable, '-c', script, str(folder / f'{i}.json'), code]) + '\0')
    import time
    start = time.time()
    assert gen.warm(str(folder), jobs=3)
    assert time.time() - start < 2.9  # side by side: not 3 s one after another
    (folder / '3.cmd').write_text('\0'.join([sys.executable, '-c', 'raise SystemExit(2)']) + '\0')
    assert not gen.warm(str(folder), jobs=2)  # no 3.json: a failure
    assert (folder / '3.log').is_file()


def test_bad_options(tmp_path):
    for args, message in ((['--device', 'tpu'], "--device must be cuda or cpu, got 'tpu'"),
                          (['--budget-s', '9m'], "--budget-s must be a whole number"),
                          (['--bogus'], "unknown option '--bogus'"),
                          (['--resume', '--out', '/nonexistent/out'],
                           'has no report.json to resume')):
        proc = subprocess.run(['bash', str(SCRIPT), *args], capture_output=True, text=True)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    # the Fashion-COCO step's files are checked before anything runs (the first H200 report
    # found them missing six minutes in)
    proc = subprocess.run(['bash', str(SCRIPT), '--device', 'cpu', '--out',
                           str(tmp_path / 'out'), '--fashion-mnist', str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert (f'--fashion-mnist: {tmp_path} has no train-images-idx3-ubyte(.gz)' in proc.stderr
            and 'pass it as --fashion-mnist DIR' in proc.stderr), proc.stderr
    assert not (tmp_path / 'out' / 'report.json').exists()
    # on the CPU it runs the Python tools/select_python.sh picks, as the launch scripts do
    env = {k: v for k, v in os.environ.items() if k != 'PYTHON'}
    proc = subprocess.run(['bash', str(SCRIPT), '--device', 'cpu', '--out', str(tmp_path / 'o2')],
                          capture_output=True, text=True, timeout=60,
                          env={**env, 'MMPOLY_VENV': str(tmp_path / 'no-venv')})
    assert proc.returncode == 2, proc.stderr
    assert f'MMPOLY_VENV={tmp_path / "no-venv"} has no bin/python' in proc.stderr, proc.stderr
    for jobs in ('0', 'many'):
        proc = subprocess.run(['bash', str(SCRIPT)], capture_output=True, text=True,
                              env={**os.environ, 'WARM_JOBS': jobs})
        expected = f"WARM_JOBS must be a positive whole number, got '{jobs}'"
        assert proc.returncode == 2 and expected in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not (FASHION_MNIST / 'train-images-idx3-ubyte.gz').is_file(),
                    reason='tools/setup_env.sh installs Fashion-MNIST')
def test_cpu_dry_run(tmp_path):
    """The whole script on the CPU at tiny sizes: every step runs and is recorded."""
    out = tmp_path / 'out'
    proc = subprocess.run(['bash', str(SCRIPT), '--device', 'cpu', '--quick', '--out', str(out)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ,
                               'PYTHON': os.environ.get('PYTHON', '') or sys.executable})
    log = (out / 'gpu_report.log').read_text() if (out / 'gpu_report.log').is_file() else ''
    assert proc.returncode == 0, proc.stderr[-3000:] + log[-3000:]
    report = json.loads((out / 'report.json').read_text())
    steps = {s['name']: s for s in report['steps']}
    # the Fashion-COCO training beside the compile warm-up, then the targets, then the rest
    assert list(steps) == ['mmcv_check', 'fashion_coco', 'finetune', 'finetune_eval',
                           'warm_compile:1', 'bench:gpu-in1k-pdc:fp32:compiled',
                           'bench:mask-rcnn:fp32:compiled', 'convs:gpu-in1k-pdc:fp32',
                           'bench:gpu-in1k-pdc:bf16:eager-cl']
    convs = steps['convs:gpu-in1k-pdc:fp32']['result']  # conv_shapes.py, channels-last
    assert convs['settings']['channels_last'] and convs['settings']['batch_size'] == 2
    assert [m['calls'] for m in convs['models']] == [20, 44]  # ResNet18, PDC-ResNet18
    compiled = steps['bench:gpu-in1k-pdc:fp32:compiled']['result']
    # benchmark.py exits 1 on a missed target: recorded as such, the run goes on
    assert steps['bench:gpu-in1k-pdc:fp32:compiled']['status'] == (
        'ok' if compiled['passed'] else 'targets missed')
    assert all(s['status'] == 'ok' for name, s in steps.items()
               if name != 'bench:gpu-in1k-pdc:fp32:compiled'), steps
    assert compiled['settings']['compile'] and compiled['settings']['device'] == 'cpu'
    assert compiled['settings']['compile_backend'] == 'aot_eager'
    assert [c['target'] for c in compiled['checks']] == ['min_train_ratio']  # the GPU target
    # profiled (--profile): operators per step on the CPU, PDC's more than ResNet18's
    base_ops, pdc_ops = (m['profile']['ops'] for m in compiled['models'])
    assert pdc_ops > base_ops > 0 and compiled['models'][1]['profile']['kernels'] is None
    eager = steps['bench:gpu-in1k-pdc:bf16:eager-cl']['result']
    assert not eager['settings']['compile'] and eager['settings']['amp'] == 'bfloat16'
    assert eager['settings']['channels_last'] and not compiled['settings']['channels_last']
    assert eager['checks'] == []
    detector = steps['bench:mask-rcnn:fp32:compiled']['result']
    assert [m['flops_part'] for m in detector['models']] == ['backbone', 'backbone']
    # the fine-tuning on the CPU samples the RoIs and proposals the detector tests do
    (finetune, ) = [line for line in log.splitlines() if '] finetune: ' in line and
                    'tools/train.py' in line]
    protocol = load_tool('detection_protocol')
    fewer_rois = protocol.fewer_rois_options(
        str(REPO / 'configs' / 'mask-rcnn_pdc-resnet18_fpn_1x_coco.py'),
        protocol.PROTOCOLS['short'].det_rois)
    assert finetune.split()[-len(fewer_rois):] == fewer_rois, finetune
    metrics = steps['finetune_eval']['result']
    assert set(metrics) >= {'coco/bbox_mAP', 'coco/segm_mAP'}
    assert (out / 'tables.md').read_text() == load_tool('analysis_tools/gpu_tables').tables(
        report)

    # a second run on the same --out is refused; --resume runs only mmcv_check again
    again = subprocess.run(['bash', str(SCRIPT), '--device', 'cpu', '--quick', '--out', str(out)],
                           capture_output=True, text=True)
    assert again.returncode == 2 and 'already holds a report.json: pass --resume' in again.stderr
    resumed = subprocess.run(['bash', str(SCRIPT), '--device', 'cpu', '--quick', '--out',
                              str(out), '--resume'], capture_output=True, text=True, timeout=300,
                             env={**os.environ,
                                  'PYTHON': os.environ.get('PYTHON', '') or sys.executable})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report2 = json.loads((out / 'report.json').read_text())
    assert [s['name'] for s in report2['steps']] == [
        n for n in steps if n not in ('mmcv_check', 'warm_compile:1')] + ['mmcv_check']
    assert report2['elapsed_s'] >= report['elapsed_s']
    assert 'finetune: completed in the resumed report' in resumed.stderr
