"""The GPU report's JSON (``gpu_report.sh``) and the docs' GPU tables generated from it.

    python tools/analysis_tools/gpu_tables.py tables benchmarks/gpu/RUN/report.json

``tables`` prints Markdown (device, torch, CUDA and date in its first line): one table of
ratios to ResNet18 per benchmark preset (compiled and eager, fp32 and bf16, with the preset's
targets and whether they were met), the Mask R-CNN training step, the Fashion-COCO AP and the
steps that failed or were skipped; a docs page shows them in a ``<!-- BEGIN gpu-report PATH -->``
block that ``tools/docs/gen_tables.py`` generates (and the docs test checks). ``split REPORT --into
benchmarks/gpu`` writes each benchmark run of a report as a ``benchmark.py --json`` file,
``<date>_<preset>_<precision>_<mode>.json``, which ``tools/docs/gen_tables.py`` turns into the
docs' per-run tables (``speed gpu/*.json``). ``part``, ``collect``, ``mmcv``, ``warm`` (the
compile warm-up) and ``restore`` (``--resume``) are the steps ``gpu_report.sh`` calls.
"""
import argparse
import glob
import json
import os
import os.path as osp
import platform
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence


def _write_text(text: str, path: str) -> None:
    """Write ``text`` to ``path`` complete or not at all: a temporary file in the same folder,
    flushed and fsync-ed, then renamed (this script runs before mmpoly is installed, so it does
    not use ``mmpoly.fileio.atomic_write``)."""
    tmp = f'{path}.tmp{os.getpid()}'
    try:
        with open(tmp, 'w') as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if osp.exists(tmp):
            os.remove(tmp)
        raise


def _write_json(data: Any, path: str) -> None:
    _write_text(json.dumps(data, indent=2), path)


def write_part(parts: str, name: str, status: str, seconds: int) -> str:
    """Record one step's status (``NNN.status.json``, numbered in order); return its path."""
    index = 1 + max((int(osp.basename(path).split('.')[0])
                     for path in glob.glob(osp.join(parts, '*.status.json'))), default=-1)
    path = osp.join(parts, f'{index:03d}.status.json')
    _write_json(dict(name=name, status=status, seconds=seconds), path)
    return path


def _result_of(parts: str, name: str) -> Optional[Dict[str, Any]]:
    """The JSON a step wrote as ``PARTS/<name>.json``, None if it wrote none."""
    path = osp.join(parts, f'{name}.json')
    if not osp.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def environment(device: str) -> Dict[str, Any]:
    """Device name, torch, CUDA, Python and the date (UTC) of this machine."""
    import torch
    cuda = device == 'cuda' and torch.cuda.is_available()
    return dict(device=device,
                device_name=torch.cuda.get_device_name() if cuda else
                (platform.processor() or platform.machine()),
                torch=torch.__version__, cuda=torch.version.cuda, python=platform.python_version(),
                date=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()))


def collect(parts: str, device: str, budget_s: int, elapsed_s: int) -> Dict[str, Any]:
    """The report: the environment and every recorded step with its JSON result (if any)."""
    steps = []
    for path in sorted(glob.glob(osp.join(parts, '*.status.json'))):
        with open(path) as f:
            step = json.load(f)
        step['result'] = _result_of(parts, step['name'])
        steps.append(step)
    env_file = osp.join(parts, 'environment.json')  # once per run: importing torch is slow
    if not osp.isfile(env_file):
        _write_json(environment(device), env_file)
    with open(env_file) as f:
        env = json.load(f)
    return dict(env, budget_s=budget_s, elapsed_s=elapsed_s, steps=steps)


def check_mmcv(out: str, build_time: Optional[str]) -> Dict[str, Any]:
    """What mmcv is installed, whether its ops run on CUDA, and the recorded build time."""
    import mmcv
    import torch
    from mmcv.ops import nms
    info: Dict[str, Any] = dict(mmcv=mmcv.__version__, cuda_ops=False, build_time=None)
    boxes, scores = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.]]), torch.tensor([.9, .8])
    info['cpu_nms_kept'] = len(nms(boxes, scores, 0.5)[1])
    if torch.cuda.is_available():
        try:
            info['cuda_nms_kept'] = len(nms(boxes.cuda(), scores.cuda(), 0.5)[1])
            info['cuda_ops'] = True
        except RuntimeError as error:  # mmcv built without CUDA ops
            info['cuda_ops_error'] = str(error)[:300]
    if build_time and osp.isfile(build_time):
        with open(build_time) as f:
            info['build_time'] = f.read().strip()
    _write_json(info, out)
    return info


def warm(folder: str, jobs: int) -> bool:
    """Run the commands ``folder/<i>.cmd`` (NUL-separated arguments), ``jobs`` at a time, each
    logging to ``<i>.log``; a command succeeded if it wrote ``<i>.json`` (benchmark.py exits 1
    on a missed target, which is no failure here). Print a line for each; return all ok."""
    commands = sorted(glob.glob(osp.join(folder, '*.cmd')),
                      key=lambda path: int(osp.basename(path)[:-4]))
    pending, running, ok = list(commands), [], True
    while pending or running:
        while pending and len(running) < jobs:
            path = pending.pop(0)
            with open(path) as f:
                argv = f.read().split('\0')[:-1]
            log = open(path[:-4] + '.log', 'w')
            running.append((path, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT),
                            log, time.time()))
        time.sleep(0.5)
        for entry in [e for e in running if e[1].poll() is not None]:
            path, proc, log, start = entry
            log.close()
            running.remove(entry)
            done = osp.isfile(path[:-4] + '.json')
            ok = ok and done
            print(f"warm {osp.basename(path)[:-4]}: {'ok' if done else 'FAILED'} (exit "
                  f'{proc.returncode}, {time.time() - start:.0f} s; log {path[:-4]}.log)',
                  flush=True)
            if not done:
                with open(path[:-4] + '.log') as f:
                    print(f.read()[-2000:], flush=True)
    return ok


#: Steps that a resumed run does again (the mmcv install may be on a fresh machine, and the
#: compile cache is the machine's), and the steps resumed only together (the Fashion-COCO data
#: and the checkpoint live in the run's temporary folder): kept if the last one completed.
_ALWAYS_AGAIN = ('mmcv', 'mmcv_check', 'warm_compile')
_TOGETHER = ('fashion_coco', 'finetune', 'finetune_eval')
_COMPLETED = ('ok', 'targets missed')


def restore(report: Dict[str, Any], parts: str, device: str) -> list:
    """Write the completed steps of ``report`` into ``parts`` as this run's records and return
    ``[elapsed seconds of the report, name, ...]``. A report from another device, torch or
    CUDA is refused (its figures would be mixed with this machine's)."""
    here = environment(device)
    for key in ('device', 'device_name', 'torch', 'cuda'):
        if report.get(key) != here[key]:
            raise SystemExit(f'error: --resume: the report was measured with {key} '
                             f'{report.get(key)!r}, this machine has {here[key]!r}; use '
                             'another --out for a new report')
    # the first run's environment, and the date of each run that continued it
    _write_json(dict({key: report[key] for key in here},
                     resumed=report.get('resumed', []) + [here['date']]),
                osp.join(parts, 'environment.json'))
    status = {step['name']: step['status'] for step in report['steps']}
    keep_together = status.get(_TOGETHER[-1]) in _COMPLETED
    kept = [str(report['elapsed_s'])]
    for step in report['steps']:
        name = step['name']
        if step['status'] not in _COMPLETED or name.split(':')[0] in _ALWAYS_AGAIN or (
                name in _TOGETHER and not keep_together):
            continue
        if step['result'] is not None:
            _write_json(step['result'], osp.join(parts, f'{name}.json'))
        write_part(parts, name, step['status'], step['seconds'])
        kept.append(name)
    return kept


def _ratio(value: Optional[float]) -> str:
    return '–' if value is None else f'{value:.2f}×'


def _bench_steps(report: Dict[str, Any]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """{preset: {'fp32:compiled': result, ...}} of the benchmark steps that ran."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for step in report['steps']:
        if not step['name'].startswith('bench:') or step['result'] is None:
            continue
        _, preset, precision, mode = step['name'].split(':')
        out.setdefault(preset, {})[f'{precision}:{mode}'] = step['result']
    return out


def _checks_text(result: Dict[str, Any], config: str) -> str:
    checks = [c for c in result.get('checks', []) if c['config'] == config]
    if not checks:
        return '–'
    return ', '.join(f"{c['ratio']} {'≤' if c['target'].startswith('max') else '≥'} "
                     f"{c['limit']:.2f}: {'met' if c['passed'] else '**missed**'}"
                     for c in checks)


def _profile_lines(results: Dict[str, Dict[str, Any]], modes: List[str]) -> List[str]:
    """A line per run profiled with ``benchmark.py --profile``: per training step, each model's
    kernels and the GPU's busy time (or, on the CPU, its operators)."""
    lines = []
    for mode in modes:
        models = results[mode]['models'] if mode in results else []
        if not models or not all(entry.get('profile') for entry in models):
            continue
        parts = []
        for entry in models:
            p = entry['profile']
            name = osp.basename(entry['config'])
            if p['kernels'] is None:
                parts.append(f"{name} {p['ops']:.0f} operators")
            else:
                parts.append(f"{name} {p['kernels']:.0f} kernels, GPU busy {p['gpu_ms']:.1f} ms "
                             f"({100 * p['gpu_busy']:.0f} % of the step)")
        lines += ['', f"Profile, {mode.replace(':', ' ')}, per training step: " +
                  '; '.join(parts) + '.']
    return lines


def _conv_lines(report: Dict[str, Any], top: int = 3) -> List[str]:
    """A table of the ``conv_shapes.py`` steps (``convs:PRESET:PRECISION``): each model's
    convolutions alone per training step (forward and backward), as ratios to the baseline's
    (time and MACs), and its costliest shapes."""
    rows = []
    for step in report['steps']:
        if not step['name'].startswith('convs:') or step['result'] is None:
            continue
        result = step['result']
        s = result['settings']
        run = (f"{step['name'].split(':', 1)[1]}, "
               f"{'channels-last' if s['channels_last'] else 'NCHW'}, batch {s['batch_size']}")
        # (reports before the 'baseline' key had the baseline first, always)
        base = next((model for i, model in enumerate(result['models'])
                     if model.get('baseline', i == 0)), None)
        for model in result['models']:
            shapes = '; '.join(
                f"{row['text']} ×{row['calls']}: {1e3 * row['calls'] * row['train_s']:.2f} ms, "
                f"{row['train_gmacs']:.0f} GMAC/s" for row in model['shapes'][:top])
            ratios = ('–' if base is None else 'baseline' if model is base else
                      f"{model['train_s'] / base['train_s']:.2f}× / "
                      f"{model['macs'] / base['macs']:.2f}×")
            rows.append(f"| {run} | {osp.basename(model['config'])} | "
                        f"{1e3 * model['train_s']:.2f} ms | {ratios} | {shapes} |")
    if not rows:
        return []
    return ['**Convolutions alone** (`conv_shapes.py`: each shape timed alone, forward and '
            'backward, × its calls per training step)', '',
            '| run | model | time per step | time / MACs, ratio to the baseline | '
            f'costliest {top} shapes (calls: time per step, rate) |',
            '|---|---|---|---|---|', *rows, '']


def _layout_note(results: Dict[str, Dict[str, Any]], modes: List[str]) -> List[str]:
    """A line naming the compiled runs measured before ``benchmark.py`` recorded its inductor
    options (``settings.compile_options``): inductor's own rule chose their layout, not
    mmpoly's channels-last default (``mmpoly.engine.compile.INDUCTOR_DEFAULTS``)."""
    older = [m.replace(':', ' ') for m in modes if m in results
             and results[m]['settings'].get('compile_backend') == 'inductor'
             and 'compile_options' not in results[m]['settings']]
    if not older:
        return []
    return ['', f"Compiled before the channels-last layout default (inductor's own rule laid "
            f"out each graph; it leaves a graph NCHW when a convolution over 1×1 halves its "
            f"channels, as PDC-comp's factors do): {', '.join(older)}."]


#: The columns of a preset's table, in order: the first four always, the others when run.
_MODES = ['fp32:compiled', 'bf16:compiled', 'fp32:eager', 'bf16:eager', 'fp32:cudagraphs',
          'bf16:cudagraphs', 'fp32:cudagraphs-cl', 'bf16:cudagraphs-cl', 'fp32:compiled-cl',
          'bf16:compiled-cl', 'bf16:eager-cl', 'fp32:compiled-cudnn', 'bf16:compiled-cl-cudnn',
          'fp16:compiled', 'fp16:eager']


def _resumed_text(report: Dict[str, Any]) -> str:
    """' (continued with --resume on DATE, ...)' for a report that later runs completed."""
    dates = report.get('resumed') or []
    return f" (continued with --resume on {', '.join(dates)})" if dates else ''


def tables(report: Dict[str, Any]) -> str:
    """The Markdown tables of a report (see the module docstring)."""
    lines = [f"Measured on {report['device_name']} ({report['device']}), torch {report['torch']}, "
             f"CUDA {report['cuda']}, Python {report['python']}, {report['date']}"
             f"{_resumed_text(report)}, with `tools/analysis_tools/gpu_report.sh` "
             f"({report['elapsed_s']} s).", '']
    mmcv = next((s['result'] for s in report['steps'] if s['name'] == 'mmcv_check'), None)
    if mmcv:
        lines += [f"mmcv {mmcv['mmcv']}: CUDA ops {'yes' if mmcv['cuda_ops'] else 'no'}; build: "
                  f"{mmcv['build_time'] or 'not built in this run'}.", '']
    for preset, results in _bench_steps(report).items():
        # the four columns always, then the other runs of this preset (CUDA graphs, float16)
        modes = _MODES[:4] + [m for m in _MODES[4:] if m in results]
        checked = [m for m in modes if m in results and results[m].get('checks')]
        first = next(iter(results.values()))
        lines += [f"**{preset}** (baseline {osp.basename(first['baseline'])}, batch "
                  f"{first['settings']['batch_size']}; training / inference, ratio to the "
                  f"baseline)", '',
                  '| model | FLOP ideal | ' + ' | '.join(m.replace(':', ' ') for m in modes) +
                  ' | memory fp32 compiled | targets (' +
                  (' / '.join(m.replace(':', ' ') for m in checked) or 'none checked') + ') |',
                  '|---|---|' + '---|' * (len(modes) + 2)]
        for index, entry in enumerate(first['models']):
            if entry['baseline']:
                continue
            cells = []
            for mode in modes:
                result = results.get(mode)
                if result is None:
                    cells.append('not run')
                    continue
                r = result['models'][index]['ratios']
                cells.append(f"{_ratio(r['train'])} / {_ratio(r['infer'])}")
            fp32 = results.get('fp32:compiled')
            memory = _ratio(fp32['models'][index]['ratios']['memory']) if fp32 else 'not run'
            targets = ' / '.join(_checks_text(results[m], entry['config']) for m in checked)
            lines.append(f"| {osp.basename(entry['config'])} | {_ratio(entry['ratios']['flops'])}"
                         f" | {' | '.join(cells)} | {memory} | {targets or '–'} |")
        lines += _layout_note(results, modes)
        lines += _profile_lines(results, modes)
        speeds = [(m.replace(':', ' '), results[m]['models'][0]) for m in modes if m in results]
        lines += ['', f"Baseline {osp.basename(first['models'][0]['config'])}: " + ', '.join(
            f"{mode} {base['train_images_per_s']:.4g} / {base['infer_images_per_s']:.4g} images/s"
            for mode, base in speeds) + '.', '']
    lines += _conv_lines(report)
    evaluation = next((s for s in report['steps'] if s['name'] == 'finetune_eval'), None)
    train = next((s for s in report['steps'] if s['name'] == 'finetune'), None)
    if evaluation and evaluation['result']:
        metrics = evaluation['result']
        lines += [f"Mask R-CNN PDC-ResNet18 trained on Fashion-COCO ({train['seconds']} s): "
                  f"COCO bbox mAP {metrics['coco/bbox_mAP']:.3f}, segm mAP "
                  f"{metrics['coco/segm_mAP']:.3f}.", '']
    bad = [s for s in report['steps'] if s['status'] != 'ok']
    if bad:
        lines += ['Steps not completed: ' + '; '.join(f"{s['name']} ({s['status']})"
                                                      for s in bad) + '.', '']
    return '\n'.join(lines).rstrip() + '\n'


def split(report: Dict[str, Any], into: str) -> list:
    """Write every benchmark step's result of ``report`` to ``into``; return the paths."""
    os.makedirs(into, exist_ok=True)
    paths = []
    for step in report['steps']:
        if step['name'].startswith('bench:') and step['result'] is not None:
            name = '_'.join(step['name'].split(':')[1:])
            # the day of the run that measured it (a resumed report spans several)
            date = step['result'].get('settings', {}).get('date') or report['date']
            path = osp.join(into, f"{date[:10]}_{name}.json")
            _write_json(step['result'], path)
            paths.append(path)
    return paths


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = parser.add_subparsers(dest='command', required=True)
    p = sub.add_parser('part', help='record a step of gpu_report.sh')
    p.add_argument('parts')
    p.add_argument('name')
    p.add_argument('--status', required=True)
    p.add_argument('--seconds', type=int, required=True)
    p = sub.add_parser('collect', help='write report.json from the recorded steps')
    p.add_argument('parts')
    p.add_argument('--out', required=True)
    p.add_argument('--device', choices=['cuda', 'cpu'], required=True)
    p.add_argument('--budget-s', type=int, required=True)
    p.add_argument('--elapsed-s', type=int, required=True)
    p = sub.add_parser('mmcv', help='record the installed mmcv and whether its CUDA ops run')
    p.add_argument('out')
    p.add_argument('--build-time', help='build_time.txt of tools/build_mmcv.sh')
    p = sub.add_parser('warm', help='run the compile warm-up commands of a folder')
    p.add_argument('folder')
    p.add_argument('--jobs', type=int, required=True)
    p = sub.add_parser('restore', help='keep the completed steps of a report (--resume)')
    p.add_argument('report')
    p.add_argument('parts')
    p.add_argument('--device', choices=['cuda', 'cpu'], required=True)
    p = sub.add_parser('split', help='write the benchmark runs of a report.json as files')
    p.add_argument('report')
    p.add_argument('--into', required=True, help='folder, e.g. benchmarks/gpu')
    p = sub.add_parser('tables', help='Markdown tables of a report.json')
    p.add_argument('report')
    p.add_argument('--out', help='write the tables to this file (else print them)')
    args = parser.parse_args(argv)
    if args.command == 'part':
        write_part(args.parts, args.name, args.status, args.seconds)
    elif args.command == 'collect':
        _write_json(collect(args.parts, args.device, args.budget_s, args.elapsed_s), args.out)
    elif args.command == 'mmcv':
        check_mmcv(args.out, args.build_time)
    elif args.command == 'warm':
        return 0 if warm(args.folder, args.jobs) else 1
    elif args.command == 'restore':
        with open(args.report) as f:
            print('\n'.join(restore(json.load(f), args.parts, args.device)))
    elif args.command == 'split':
        with open(args.report) as f:
            for path in split(json.load(f), args.into):
                print(path)
    else:
        with open(args.report) as f:
            text = tables(json.load(f))
        if args.out:
            _write_text(text, args.out)
        else:
            print(text, end='')
    return 0


if __name__ == '__main__':
    sys.exit(main())
