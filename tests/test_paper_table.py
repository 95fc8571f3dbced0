"""Tests of mmpoly.zoo.report and tools/analysis_tools/paper_table.py on hand-made paper rows.

PDC-comp's count is exact (the authors' official pdc_so_nosharing.yml: 4,259,793 parameters on
CIFAR-10), so it serves as the reference row; the other rows are made up to check the comparison
logic.
"""
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
from helpers import REPO, TOOLS, load_tool

from mmpoly.zoo import PaperRow, paper_rows
from mmpoly.zoo import report
from mmpoly.zoo.report import END_MARKER, KNOWN_MISFIT, START_MARKER, RowResult

TOOL = TOOLS / 'analysis_tools' / 'paper_table.py'
PDC_COMP = 'pdc-comp_resnet18_1xb128_cifar10.py'
PDC_COMP_PARAMS = 4_259_793

ROW = PaperRow(table='T-C10', model='PDC-comp', config=PDC_COMP, family='PDC', degree=2,
               paper_params=4.3, params_digits=1, note='EXACT: the official yml')
WRONG = PaperRow(table='T-C10', model='PDC-wrong', config=PDC_COMP, family='PDC', degree=2,
                 paper_params=4.4, params_digits=1, note='GUESS: a made-up figure')
MISFIT = PaperRow(table='T-C100', model='PDC-misfit', config=PDC_COMP, family='PDC', degree=3,
                  paper_params=4.4, params_digits=1, claimed_match=False,
                  note='nearest configuration found')


def _row(**kwargs) -> PaperRow:
    fields = dict(table='T-X', model='M', config=PDC_COMP, family='PDC', degree=2,
                  paper_params=11.2, params_digits=1, note='FIT: made up')
    fields.update(kwargs)
    return PaperRow(**fields)


@pytest.fixture(scope='module')
def results() -> List[RowResult]:
    return report.measure_rows([ROW, WRONG, MISFIT], with_flops=False)


# --------------------------------------------------------------------------- comparison logic


def test_measure_row_counts_pdc_comp() -> None:
    result = report.measure_row(ROW, with_flops=False)
    assert result.params == PDC_COMP_PARAMS
    assert result.flops is None and result.input_shape == (3, 32, 32)
    assert result.params_match and result.match and not result.failed
    assert result.params_diff_m == pytest.approx(4.259793 - 4.3)
    assert result.status == 'match'


def test_mismatch_and_known_misfit(results: List[RowResult]) -> None:
    ok, wrong, misfit = results
    assert all(r.params == PDC_COMP_PARAMS for r in results)  # one build, cached
    assert not wrong.params_match and wrong.failed and wrong.status == 'MISMATCH'
    assert not misfit.match and not misfit.failed and misfit.status == KNOWN_MISFIT
    assert report.failures(results) == [wrong]


@pytest.mark.parametrize('params, paper, digits, match', [
    (11_173_962, 11.2, 1, True),     # ResNet18 C10
    (11_570_692, 11.6, 1, True),     # SENet C100 (r=4)
    (11_570_932, 11.57, 2, True),    # NL
    (12_045_012, 12.00, 2, False),   # PDC-NL[4], all gates (+0.044)
    (5_433_809, 5.4, 1, True),
    (5_456_939, 5.46, 2, True),
    (4_250_001, 4.3, 1, True),
    (4_249_999, 4.3, 1, False),
])
def test_params_match_at_printed_precision(params: int, paper: float, digits: int,
                                           match: bool) -> None:
    result = RowResult(_row(paper_params=paper, params_digits=digits), params)
    assert result.params_match is match
    assert result.match is match


def test_flops_match_and_not_measured() -> None:
    row = _row(paper_params=11.69, params_digits=2, paper_flops=1.82, flops_digits=2,
               input_size=(224, 224))
    assert RowResult(row, 11_689_512, 1_822_200_000).match is True
    assert RowResult(row, 11_689_512, 1_834_000_000).flops_match is False
    assert RowResult(row, 11_689_512, 1_834_000_000).failed
    unmeasured = RowResult(row, 11_689_512, None)
    assert unmeasured.match is None and not unmeasured.failed
    assert 'FLOPs not measured' in unmeasured.status
    assert RowResult(row, 11_600_000, None).match is False  # params decide already


def test_flops_measured_where_the_paper_gives_them() -> None:
    plain = report.measure_row(ROW, with_flops=True)
    assert plain.flops is None  # the paper gives no FLOPs for the row: nothing to measure
    flops_row = _row(paper_params=4.3, paper_flops=1.0, flops_digits=2)
    measured = report.measure_row(flops_row, with_flops=True)
    assert measured.flops is not None and measured.flops > 0
    paper = round(measured.flops / 1e9, 2)
    assert RowResult(_row(paper_params=4.3, paper_flops=paper), 4_259_793,
                     measured.flops).match
    assert not RowResult(_row(paper_params=4.3, paper_flops=paper + 0.01), 4_259_793,
                         measured.flops).match


def test_build_errors_are_failures() -> None:
    [result] = report.measure_rows([_row(config='no_such_config.py')], with_flops=False)
    assert result.error and 'no_such_config.py' in result.error
    assert result.failed and result.status.startswith('ERROR')
    assert 'no_such_config.py' in report.format_text([result])


def test_filter_rows() -> None:
    rows = [ROW, WRONG, MISFIT]
    assert report.filter_rows(rows, None) == rows
    assert report.filter_rows(rows, ['T-C100']) == [MISFIT]
    with pytest.raises(ValueError, match='T-NOPE.*T-C10, T-C100'):
        report.filter_rows(rows, ['T-NOPE'])


# --------------------------------------------------------------------------- formatting


def test_format_text(results: List[RowResult]) -> None:
    text = report.format_text(results)
    assert 'T-C10  PDC-comp' in text and f'configs/{PDC_COMP}' in text
    assert '4,259,793' in text and '4.260M' in text and '-0.040M' in text
    assert 'paper 4.3M' in text and 'MISMATCH' in text
    assert KNOWN_MISFIT in text and 'nearest configuration found' in text
    assert '3 rows: 1 match, 1 known misfit(s), 1 failure(s)' in text


def test_format_markdown(results: List[RowResult]) -> None:
    lines = report.format_markdown(results).splitlines()
    assert lines[0].startswith('| table | model | config |') and set(lines[1]) <= set('|- ')
    row = next(line for line in lines if '| PDC-comp |' in line)
    cells = [c.strip() for c in row.strip('|').split('|')]
    assert cells[:7] == ['T-C10', 'PDC-comp', f'`{PDC_COMP}`', '4.3', '4,259,793 (4.260M)',
                         '-0.040', '✓']
    assert 'the official yml' in row
    assert all(line.count('|') == lines[0].count('|') for line in lines)


def test_markdown_escapes_pipes() -> None:
    text = report.format_markdown([RowResult(_row(note='a | b\nc'), 11_200_000)])
    assert 'a \\| b c' in text


def test_readme_table(results: List[RowResult]) -> None:
    table = report.readme_table(results)
    assert 'Family | Degree | Table | Model | Config' in table
    assert (f'| PDC | 2 | T-C10 | PDC-comp | `{PDC_COMP}` | 4.3 | '
            '4.260 (4,259,793) | — | exact | ✓ |') in table
    assert '| PDC-wrong |' in table and '| guessed | ✗ |' in table
    assert '| PDC-misfit |' in table and '| nearest | ✗ known misfit |' in table
    assert 'do not edit by hand' in table
    assert 'Rows that match: 1, of which 1 exact, 0 fitted and 0 guessed;' in table
    linked = report.readme_table(results, report.CONFIG_LINKS['configs'])
    assert f'| PDC-comp | [{PDC_COMP}]({PDC_COMP}) |' in linked


def test_layout_comes_from_the_note() -> None:
    assert [report.layout(r) for r in (ROW, WRONG, MISFIT)] == ['exact', 'guessed', 'nearest']
    assert report.layout(_row(note='FIT: SE reduction 4')) == 'fitted'
    assert report.layout(_row(note='GUESS: widths; FIT: the reduction')) == 'guessed'
    assert report.layout(_row(note='standard configuration')) == 'exact'
    with pytest.raises(ValueError, match="T-X M: its note must say how the layout was chosen"):
        report.layout(_row(note='chosen somehow'))


def test_the_papers_rows_declare_their_layout() -> None:
    """Of the 48 rows claimed to match the paper's counts, 34 are fitted or guessed layouts
    (the notes in mmpoly/zoo say which); the 12 others are known misfits."""
    rows = paper_rows()
    layouts = [report.layout(row) for row in rows]
    assert len(rows) == 60
    assert {name: layouts.count(name) for name in set(layouts)} == {
        'exact': 14, 'fitted': 14, 'guessed': 20, 'nearest': 12}
    exact = {(r.table, r.model) for r, name in zip(rows, layouts) if name == 'exact'}
    assert ('T-C10', 'PDC-comp') in exact and ('T-C100', 'ResNet18') in exact
    assert ('T-C100', 'SENet') not in exact and ('T-NLC', 'NL') not in exact


# --------------------------------------------------------------------------- README markers


def _readme(body: str = 'old table\n') -> str:
    return f'# Title\n\nintro\n\n{START_MARKER}\n{body}{END_MARKER}\n\n## After\ntext\n'


def test_replace_between_markers_round_trips(results: List[RowResult]) -> None:
    table = report.readme_table(results)
    text = _readme()
    once = report.replace_between_markers(text, table)
    assert report.replace_between_markers(once, table) == once
    assert report.extract_between_markers(once).strip('\n') == table
    assert once.startswith('# Title\n\nintro\n\n' + START_MARKER + '\n')
    assert once.endswith(END_MARKER + '\n\n## After\ntext\n')
    assert 'old table' not in once
    assert report.replace_between_markers(once, 'other') == _readme('other\n')


def test_missing_or_misplaced_markers_raise() -> None:
    with pytest.raises(ValueError, match=re.escape(START_MARKER)) as info:
        report.replace_between_markers('# README without markers\n', 'table', 'README.md')
    assert 'README.md' in str(info.value) and END_MARKER in str(info.value)
    with pytest.raises(ValueError, match='comes before'):
        report.replace_between_markers(f'{END_MARKER}\n{START_MARKER}\n', 'table')
    with pytest.raises(ValueError, match='2 lines'):
        report.replace_between_markers(_readme() + START_MARKER + '\n', 'table')


def test_check_readme(results: List[RowResult]) -> None:
    text = report.update_readme(_readme(), results)
    assert report.check_readme(text, results) == (True, '')
    assert report.check_readme(_readme(), results)[0] is False
    stale = text.replace('4.260 (4,259,793)', '4.261 (4,260,793)', 1)
    ok, diff = report.check_readme(stale, results)
    assert not ok
    assert '-| PDC | 2 | T-C10 | PDC-comp' in diff and '4,260,793' in diff
    assert '+| PDC | 2 | T-C10 | PDC-comp' in diff


def test_check_readme_without_flops_accepts_any_measured_flops() -> None:
    row = _row(paper_params=4.3, paper_flops=0.62)
    full = report.update_readme(_readme(), [RowResult(row, 4_259_793, 622_410_240)])
    assert '0.62 / 0.6224' in full
    unmeasured = [RowResult(row, 4_259_793, None)]
    assert report.check_readme(full, unmeasured) == (True, '')
    ok, diff = report.check_readme(full.replace('4,259,793', '4,259,794'), unmeasured)
    assert not ok and '4,259,794' in diff
    with pytest.raises(ValueError, match='no-flops'):
        report.update_readme(_readme(), unmeasured)
    with pytest.raises(ValueError, match='no_such'):
        report.update_readme(_readme(), report.measure_rows(
            [_row(config='no_such.py')], with_flops=False))


# --------------------------------------------------------------------------- the tool


def test_tool_exit_status_and_readme_update(results: List[RowResult], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('analysis_tools/paper_table')
    rows = [ROW, MISFIT]
    monkeypatch.setattr(tool, 'paper_rows', lambda: rows)
    assert tool.main(['--no-flops']) == 0  # a known misfit does not fail the check
    out = capsys.readouterr().out
    assert 'PDC-comp' in out and KNOWN_MISFIT in out
    assert tool.main(['--no-flops', '--format', 'markdown', '--table', 'T-C10']) == 0
    out = capsys.readouterr().out
    assert '| T-C10 | PDC-comp |' in out and 'PDC-misfit' not in out

    readme = tmp_path / 'README.md'
    readme.write_text(_readme())
    assert tool.main(['--no-flops', '--check-readme', str(readme)]) == 1
    assert 'out of date' in capsys.readouterr().out
    assert tool.main(['--update-readme', str(readme)]) == 0
    assert f'| PDC-comp | `{PDC_COMP}` |' in report.extract_between_markers(readme.read_text())
    assert tool.main(['--no-flops', '--check-readme', str(readme)]) == 0
    assert 'up to date' in capsys.readouterr().out
    page = tmp_path / 'page.md'
    page.write_text(_readme())
    assert tool.main(['--update', str(page), '--update', str(readme)]) == 0
    assert page.read_text() == readme.read_text()
    assert tool.main(['--no-flops', '--check', str(page), '--check', str(readme)]) == 0

    monkeypatch.setattr(tool, 'paper_rows', lambda: [ROW, WRONG, MISFIT])
    assert tool.main(['--no-flops']) == 1  # a claimed match that does not match
    assert '1 failure(s) — T-C10 PDC-wrong' in capsys.readouterr().out


def test_tool_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture) -> None:
    tool = load_tool('analysis_tools/paper_table')
    monkeypatch.setattr(tool, 'paper_rows', lambda: [ROW])
    readme = tmp_path / 'README.md'
    readme.write_text('# no markers\n')
    assert tool.main(['--no-flops', '--check-readme', str(readme)]) == 2
    assert START_MARKER in capsys.readouterr().err
    assert tool.main(['--no-flops', '--update-readme', str(readme)]) == 2
    assert tool.main(['--table', 'T-NOPE', '--no-flops']) == 2
    assert 'T-NOPE' in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize('page', ['docs/en/paper_table.md', 'configs/README.md'])
def test_repository_model_tables_are_up_to_date(page: str) -> None:
    """The generated model tables of the docs and of configs/README.md match the rows (FLOPs
    cells not compared: --no-flops), and every row claimed to match does."""
    proc = subprocess.run([sys.executable, str(TOOL), '--no-flops', '--check', page],
                          cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-8000:]
    assert f'{page}: model table up to date' in proc.stdout
