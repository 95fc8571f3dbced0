"""The documentation site (mkdocs.yml, docs/en/) builds in strict mode.

A broken link, a link to a missing anchor or a page left out of the navigation is a warning, and
``strict: true`` turns every warning into a failed build.
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import load_tool

from mmpoly.zoo import report

REPO = Path(__file__).resolve().parents[1]


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, '-m', 'mkdocs', 'build', '--strict', '--config-file',
         str(root / 'mkdocs.yml'), '--site-dir', str(site)],
        cwd=root, capture_output=True, text=True, timeout=300)


def _copy_site_sources(dst: Path) -> Path:
    shutil.copy2(REPO / 'mkdocs.yml', dst / 'mkdocs.yml')
    shutil.copytree(REPO / 'docs', dst / 'docs')
    return dst


def test_config_is_strict_and_lists_every_page():
    cfg = yaml.safe_load((REPO / 'mkdocs.yml').read_text(encoding='utf-8'))
    assert cfg['strict'] is True
    assert cfg['docs_dir'] == 'docs/en'
    nav_pages = [next(iter(entry.values())) for entry in cfg['nav']]
    pages = sorted(p.name for p in (REPO / 'docs' / 'en').glob('*.md'))
    assert sorted(nav_pages) == pages
    for name in ('index.md', 'get_started.md', 'training.md', 'detection.md', 'data_regimes.md',
                 'model_zoo.md', 'paper_table.md', 'speed.md', 'reliability.md',
                 'analysis_tools.md', 'deployment.md', 'changelog.md'):
        assert name in pages


def test_docs_build_strict(tmp_path):
    site = tmp_path / 'site'
    proc = _build(REPO, site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in ('index.html', 'training/index.html', 'paper_table/index.html',
                 'model_zoo/index.html', 'speed/index.html'):
        assert (site / page).is_file(), page
    html = (site / 'paper_table' / 'index.html').read_text(encoding='utf-8')
    assert '<table>' in html  # the markdown tables are rendered as tables


@pytest.mark.parametrize('bad_text, expected', [
    ('[gone](no_such_page.md)', 'no_such_page.md'),
    ('[anchor](training.md#no-such-heading)', 'no-such-heading'),
])
def test_broken_reference_fails_the_build(tmp_path, bad_text, expected):
    root = tmp_path / 'src'
    root.mkdir()
    _copy_site_sources(root)
    index = root / 'docs' / 'en' / 'index.md'
    index.write_text(index.read_text(encoding='utf-8') + f'\n{bad_text}\n', encoding='utf-8')
    proc = _build(root, tmp_path / 'site')
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr


# --------------------------------------------------------------------------- generated blocks

gen_tables = load_tool('docs/gen_tables')


@pytest.mark.parametrize('page', gen_tables.PAGES)
def test_generated_blocks_are_their_sources(page):
    """The zoo-results and speed blocks equal what tools/docs/gen_tables.py generates from
    configs/zoo_results.json and benchmarks/*.json (the paper table, which needs every config
    measured, is checked by tests/test_paper_table.py)."""
    path = REPO / page
    text = path.read_text(encoding='utf-8')
    names = gen_tables.block_names(text)
    assert names, f'{page} has no generated block'
    for name in names:
        if name == 'paper-table':
            continue
        current = report.extract_between_markers(text, page, name).strip('\n')
        assert current == gen_tables.render(name, path, None).strip('\n'), (
            f'{page}: block {name!r} is out of date; run `python tools/docs/gen_tables.py`')


def test_every_speed_record_is_shown():
    shown = set()
    for page in gen_tables.PAGES:
        for name in gen_tables.block_names((REPO / page).read_text(encoding='utf-8')):
            if name.startswith('speed '):
                shown |= set((REPO / 'benchmarks').glob(name[len('speed '):]))
    assert shown == set((REPO / 'benchmarks').glob('*/*.json'))


def test_speed_table_of_a_benchmark_json_output(tmp_path, monkeypatch):
    """A `benchmark.py --json` output saved as it is gets a table: its command is rebuilt from
    the settings, and the ratios are the file's."""
    folder = tmp_path / 'gpu'
    folder.mkdir()
    settings = dict(torch='2.11.0', device='cuda', device_name='NVIDIA H100', threads=8,
                    flush_denormal=False, batch_size=128, input_size=None, amp='bfloat16',
                    channels_last=False, compile=True, fuse=False, rounds=3, iters=10, warmup=3)
    models = [dict(config='/x/configs/resnet18_1xb128_cifar10.py', baseline=True,
                   ratios=dict(train=1.0, infer=1.0, memory=1.0, saved_activations=1.0,
                               flops=1.0)),
              dict(config='/x/configs/pdc-comp_resnet18_1xb128_cifar10.py', baseline=False,
                   ratios=dict(train=0.613, infer=0.7, memory=2.081, saved_activations=2.134,
                               flops=0.8912))]
    (folder / '2026-12-01_cifar-pdc-comp_bf16_compiled.json').write_text(json.dumps(
        dict(settings=settings, baseline='/x/configs/resnet18_1xb128_cifar10.py', preset=None,
             models=models, checks=[], passed=True)))
    monkeypatch.setattr(gen_tables, 'BENCHMARKS', tmp_path)
    table = gen_tables.speed_block('gpu/*.json')
    assert table.startswith('**cuda (NVIDIA H100), 8 threads**, torch 2.11.0, bfloat16, '
                            '2026-12-01.')
    row = ('| 1 | pdc-comp_resnet18_1xb128_cifar10 | `resnet18_1xb128_cifar10` | 0.89× | '
           '0.61× | 0.70× | 2.08× / 2.13× |')
    rows = [line for line in table.splitlines() if line.startswith('| ')]
    assert len(rows) == 3 and rows[2] == row  # header, rule, the model: no baseline row
    assert table.endswith('\n1. `python tools/analysis_tools/benchmark.py '
                          'pdc-comp_resnet18_1xb128_cifar10.py --baseline '
                          'resnet18_1xb128_cifar10.py --device cuda --batch-size 128 --amp '
                          '--amp-dtype bfloat16 --compile --rounds 3 --iters 10 --warmup 3 '
                          '--threads 8`')
    with pytest.raises(ValueError, match='no file matches benchmarks/cpu/none'):
        gen_tables.speed_block('cpu/none*.json')


# --------------------------------------------------------------------------- README


def test_gpu_report_block_is_the_reports_tables(tmp_path, monkeypatch):
    """A ``gpu-report PATH`` block is gpu_tables.py's tables of that report.json."""
    report_file = tmp_path / 'gpu' / 'reports' / '2026-12-01' / 'report.json'
    report_file.parent.mkdir(parents=True)
    steps = [dict(name='mmcv_check', status='ok', seconds=9,
                  result=dict(mmcv='2.1.0', cuda_ops=True, build_time='mmcv 2.1.0 cuda 9.0 '
                              'build: 2000 s')),
             dict(name='finetune', status='ok', seconds=80, result=None),
             dict(name='finetune_eval', status='ok', seconds=20,
                  result={'coco/bbox_mAP': 0.25, 'coco/segm_mAP': 0.2})]
    report_file.write_text(json.dumps(dict(
        device='cuda', device_name='NVIDIA H100 80GB HBM3', torch='2.11.0+cu130', cuda='13.0',
        python='3.12.3', date='2026-12-01T10:00:00Z', budget_s=540, elapsed_s=500,
        steps=steps)))
    monkeypatch.setattr(gen_tables, 'BENCHMARKS', tmp_path)
    block = gen_tables.render('gpu-report gpu/reports/2026-12-01/report.json',
                              tmp_path / 'speed.md', None)
    assert block.startswith('Measured on NVIDIA H100 80GB HBM3 (cuda), torch 2.11.0+cu130, '
                            'CUDA 13.0, Python 3.12.3, 2026-12-01T10:00:00Z')
    assert 'COCO bbox mAP 0.250, segm mAP 0.200' in block and '(80 s)' in block
    assert 'CUDA ops yes; build: mmcv 2.1.0 cuda 9.0 build: 2000 s' in block
    with pytest.raises(ValueError, match='no file benchmarks/gpu/none.json'):
        gen_tables.render('gpu-report gpu/none.json', tmp_path / 'speed.md', None)


def test_readme_is_a_front_page_linking_into_the_docs():
    text = (REPO / 'README.md').read_text(encoding='utf-8')
    assert len(text.splitlines()) <= 200
    assert text.index('bash tools/run_main_job.sh') < text.index('## Installation')
    links = re.findall(r'\]\(((?:docs|configs)/[^)#]+)(?:#[^)]*)?\)', text)
    assert {'docs/en/get_started.md', 'docs/en/training.md', 'docs/en/detection.md',
            'docs/en/model_zoo.md', 'docs/en/paper_table.md', 'docs/en/speed.md',
            'docs/en/changelog.md', 'configs/README.md'} <= set(links)
    for link in links:
        assert (REPO / link).is_file(), link
    assert '@inproceedings{chrysos2022augmenting' in text and 'Apache 2.0' in text


def test_the_zoo_plot_in_the_docs_is_the_published_one():
    assert (REPO / 'docs/en/img/zoo_accuracy_vs_params.png').read_bytes() == \
        (REPO / 'checkpoints/fashion-mnist/accuracy_vs_params.png').read_bytes()


def test_gen_tables_checks_and_rewrites_a_page(tmp_path, capsys):
    page = tmp_path / 'page.md'
    name = 'speed cpu/2026-11-26_with-cp.json'
    page.write_text(f'# Speed\n\n<!-- BEGIN {name} -->\nstale\n<!-- END {name} -->\n\nafter\n')
    assert gen_tables.main([str(page), '--check']) == 1
    assert f"block '{name}' is out of date" in capsys.readouterr().out
    assert 'stale' in page.read_text()  # --check writes nothing
    assert gen_tables.main([str(page)]) == 0
    text = page.read_text()
    assert text.startswith('# Speed\n\n') and text.endswith(f'<!-- END {name} -->\n\nafter\n')
    assert '| 1 | PDC-comp, with_cp=True | `resnet18_1xb128_cifar10` | – | 0.58× | 0.81× | ' \
        '1.22× / 0.31× |' in text
    assert gen_tables.main([str(page), '--check']) == 0
    page.write_text('# no blocks\n')
    assert gen_tables.main([str(page)]) == 2
    page.write_text('<!-- BEGIN nonsense -->\n<!-- END nonsense -->\n')
    assert gen_tables.main([str(page)]) == 2
    assert "unknown generated block 'nonsense'" in capsys.readouterr().err
