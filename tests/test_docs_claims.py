"""What the pages a newcomer reads (README.md and docs/en/*.md, the changelog aside) claim holds.

Each test takes a class of claims from the pages themselves, so that a claim added later is
checked too: every tool command line parses with that tool's own argument parser, every
repository path, test and ``mmpoly.*`` name exists, the registered names of the taxonomy and data
tables are registered, the PDC block option table states the defaults of ``PDCBlock``, and the
Python snippets run as printed (on real Fashion-MNIST images where they need an image).
"""
import argparse
import ast
import importlib
import inspect
import itertools
import re
import shlex
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from helpers import REPO, fashion_mnist_test_images, load_tool

#: The pages: the README and every docs page but the changelog (a record of what was).
PAGES: List[Path] = [REPO / 'README.md'] + sorted(
    p for p in (REPO / 'docs' / 'en').glob('*.md') if p.name != 'changelog.md')

#: Paths the pages name on purpose although the repository does not hold them.
NOT_IN_THE_REPOSITORY = {
    'configs/my_pdc_tb.py': 'analysis_tools.md writes this config as an example',
    'configs/pdc_resnet18_8xb32_in1kk.py': 'reliability.md: the error for a mistyped config',
    'mmpoly/.mim/': 'made by pip install (setup.py links or copies the resources there)',
    'tools/deploy.py': "deployment.md: mmdeploy's tool, missing from its PyPI wheel",
}
#: Of those, the ones the set-up makes in the checkout (``pip install -e .``).
MADE_BY_INSTALLING = {'mmpoly/.mim/'}


def _text(page: Path) -> str:
    return page.read_text(encoding='utf-8')


def _rel(page: Path) -> str:
    return str(page.relative_to(REPO))


# --------------------------------------------------------------------------- command lines

#: A documented command runs a Python tool: ``python tools/X.py ARGS`` (also ``.venv/bin/python``),
#: or a launch script that hands its extra arguments to tools/train.py / tools/test.py.
LAUNCHERS = {  # script: (tool, how many leading positional arguments go to the tool, skipped)
    'tools/dist_train.sh': ('train', 1, 1),  # CONFIG NUM_PROCESSES [train.py options]
    'tools/dist_test.sh': ('test', 2, 1),  # CONFIG CHECKPOINT NUM_PROCESSES [test.py options]
}
#: tools/run_main_job.sh [train.py options]: train.py with the main job's config
MAIN_JOB_CONFIG = 'configs/pdc_resnet8-w16_1xb256-4e_fashion-mnist.py'
PYTHONS = ('python', 'python3', '.venv/bin/python')


def _code_block_lines(text: str) -> Iterator[str]:
    """The lines of the fenced code blocks, with backslash continuations joined."""
    for block in re.findall(r'^```[^\n]*\n(.*?)^```', text, flags=re.S | re.M):
        yield from block.replace('\\\n', ' ').splitlines()


def _inline_commands(text: str) -> Iterator[str]:
    """Inline code spans that are whole commands (they may wrap over a line)."""
    for span in re.findall(r'`([^`]+)`', text):
        span = ' '.join(span.split())
        if re.match(r'(?:\w+=\S+ )*(?:python3? |\.venv/bin/python |tools/dist_t)', span):
            yield span


def _tool_command(line: str) -> Optional[Tuple[str, List[str]]]:
    """(tool, argv) of a command line that runs a Python tool, or None; a usage line with
    ``[OPTIONAL]`` parts or ``...`` is not a command."""
    if '...' in line or re.search(r'\s\[', line):
        return None
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: not a shell line
        return None
    while words and re.match(r'^[A-Z_]+=', words[0]):  # VAR=value prefixes
        words = words[1:]
    if words and words[-1] == '&':
        words = words[:-1]
    if words[:1] == ['bash']:
        words = words[1:]
    if len(words) >= 2 and words[0] in PYTHONS and re.fullmatch(r'tools/[\w/]+\.py', words[1]):
        return words[1][len('tools/'):-len('.py')], words[2:]
    if words and words[0] == 'tools/run_main_job.sh':
        return 'train', [MAIN_JOB_CONFIG] + words[1:]
    if words and words[0] in LAUNCHERS:
        tool, keep, skip = LAUNCHERS[words[0]]
        return tool, words[1:1 + keep] + words[1 + keep + skip:]
    return None


def documented_commands() -> List[Tuple[str, str, List[str]]]:
    """(page, tool, argv) of every tool command of the pages."""
    found = []
    for page in PAGES:
        text = _text(page)
        for line in itertools.chain(_code_block_lines(text), _inline_commands(text)):
            command = _tool_command(line)
            if command is not None:
                found.append((_rel(page), *command))
    return found


class _Parsed(Exception):
    """Raised by the patched ``ArgumentParser.parse_args``: the command line parsed."""


def _parse(tool: str, argv: List[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse ``argv`` with the argument parser of ``tools/<tool>.py`` (through its
    ``parse_args`` or ``main``), stopped right after argparse: the checks a tool makes after it
    (e.g. that an input file exists) need the data the pages' commands make first."""
    monkeypatch.setenv('LOCAL_RANK', '0')  # train.py / test.py set it when it is not set
    module = load_tool(tool)
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', parse_then_stop)
    with pytest.raises(_Parsed):
        getattr(module, 'parse_args', module.main)(argv)


def test_the_pages_document_commands_of_every_kind():
    """The extraction finds the commands (a broken pattern would leave the next test empty)."""
    commands = documented_commands()
    tools = {tool for _, tool, _ in commands}
    assert len(commands) >= 60, commands
    assert {'train', 'test', 'analysis_tools/benchmark', 'analysis_tools/poly_degree',
            'deployment/pytorch2onnx', 'detection_protocol', 'det_inference',
            'dataset_converters/make_fashion_coco', 'model_zoo/run_suite',
            'docs/gen_tables'} <= tools
    assert ('README.md', 'test', ['configs/pdc-comp_resnet18_1xb128_cifar10.py',
            'work_dirs/pdc-comp_resnet18_1xb128_cifar10/epoch_120.pth']) in commands
    assert ('README.md', 'train', ['configs/pdc_resnet8_1xb128_fashion-mnist.py']) in commands


@pytest.mark.parametrize('page, tool, argv', documented_commands(),
                         ids=lambda value: value if isinstance(value, str) else None)
def test_every_documented_command_line_parses(page, tool, argv, monkeypatch, capsys):
    """A documented option the tool does not take, a missing argument or a refused value ends
    the tool at once: argparse's usage error (exit status 2)."""
    try:
        _parse(tool, argv, monkeypatch)
    except SystemExit as exc:
        pytest.fail(f'{page}: `{tool} {" ".join(argv)}` does not parse (exit {exc.code}): '
                    f'{capsys.readouterr().err.strip()}')


def test_a_wrong_option_in_a_page_fails_the_check(monkeypatch):
    """The check above would catch a documented option the tool does not have."""
    command = _tool_command('python tools/train.py configs/x.py --resume-from PATH')
    assert command == ('train', ['configs/x.py', '--resume-from', 'PATH'])
    with pytest.raises(SystemExit):
        _parse(*command, monkeypatch)
    assert _tool_command('tools/dist_test.sh CONFIG CKPT 8 --amp') == \
        ('test', ['CONFIG', 'CKPT', '--amp'])
    assert _tool_command('python tools/x.py CONFIG [--shape C H W]') is None  # a usage line


#: Shell tools whose documented options are the ``--option)`` patterns of their ``case``.
SHELL_TOOLS = ('tools/build_mmcv.sh', 'tools/analysis_tools/gpu_report.sh')


def test_documented_options_of_the_shell_tools_exist():
    accepted = {script: set(re.findall(r'^\s*(--[\w-]+)\)', (REPO / script).read_text(),
                                       flags=re.M)) for script in SHELL_TOOLS}
    checked = 0
    for page in PAGES:
        text = _text(page)
        for line in itertools.chain(_code_block_lines(text), _inline_commands(text),
                                    re.findall(r'`((?:bash )?tools/[\w/]+\.sh [^`]+)`', text)):
            words = line.split()
            for script in SHELL_TOOLS:
                if script in words:
                    options = [w for w in words[words.index(script) + 1:] if w.startswith('--')]
                    unknown = set(options) - accepted[script]
                    assert not unknown, f'{_rel(page)}: {script} has no option {unknown}: {line}'
                    checked += len(options)
    assert checked >= 8  # --download, --stack, --find-links, gpu_report's --out, --resume, ...


# --------------------------------------------------------------------------- names and paths


def _expand_braces(pattern: str) -> List[str]:
    """Shell brace expansion: ``a{b,c}d{e,f}`` -> abde, abdf, acde, acdf."""
    parts = re.split(r'\{([^{}]*)\}', pattern)
    choices = [[p] if i % 2 == 0 else p.split(',') for i, p in enumerate(parts)]
    return [''.join(combo) for combo in itertools.product(*choices)]


def documented_paths() -> Dict[str, List[str]]:
    """Repository paths named by the pages: path -> pages."""
    found: Dict[str, List[str]] = {}
    pattern = r'(?<![\w./~-])((?:mmpoly|tools|configs|tests|benchmarks|checkpoints|docs)/' \
              r'[\w./*{},-]*)'
    for page in PAGES:
        for path in re.findall(pattern, _text(page)):
            path = path.rstrip('.,')
            found.setdefault(path, []).append(_rel(page))
    return found


def test_every_repository_path_the_pages_name_exists():
    paths = documented_paths()
    assert 'configs/pdc_resnet8-w16_1xb256-4e_fashion-mnist.py' in paths and len(paths) > 100
    missing = []
    for path, pages in sorted(paths.items()):
        if path in NOT_IN_THE_REPOSITORY:
            continue
        for candidate in _expand_braces(path):
            if not any(REPO.glob(candidate)) if '*' in candidate else \
                    not (REPO / candidate).exists():
                missing.append(f'{candidate} ({", ".join(sorted(set(pages)))})')
    assert not missing, missing
    for path in NOT_IN_THE_REPOSITORY:  # the exceptions are still needed, and not committed
        assert path in paths, path
        assert path in MADE_BY_INSTALLING or not (REPO / path).exists(), path


def test_every_config_name_the_pages_name_is_a_config():
    """Config names in backticks (``pdc-comp_resnet18_1xb128_cifar10``, with or without
    ``.py``) name files of configs/."""
    names = set()
    for page in PAGES:
        for span in re.findall(r'`([^`\s/]+)`', _text(page)):
            match = re.fullmatch(r'([\w-]+_\d+xb\d+[\w-]*)(\.py)?', span)
            if match:
                names.add(match.group(1))
    assert {'resnet18_1xb128_cifar10', 'pdc_resnet8_1xb128-1400i_fashion-mnist'} <= names
    names.discard('pdc_resnet18_8xb32_in1kk')  # reliability.md's mistyped config
    assert not [n for n in sorted(names) if not (REPO / 'configs' / f'{n}.py').is_file()]


def test_every_test_the_pages_cite_exists():
    """``tests/test_x.py`` and ``tests/test_x.py::test_y``; a bare ``::test_y`` belongs to the
    test file cited last before it on the page."""
    cited = 0
    for page in PAGES:
        current = None
        for match in re.finditer(r'tests/(test_\w+\.py)(?:::(\w+))?|`::(\w+)`', _text(page)):
            file_name, name = match.group(1), match.group(2) or match.group(3)
            if file_name:
                current = REPO / 'tests' / file_name
                assert current.is_file(), f'{_rel(page)}: {current}'
            if name:
                assert current is not None, f'{_rel(page)}: ::{name} without a test file'
                assert re.search(rf'^(?:def|class) {name}\b', current.read_text(), re.M), \
                    f'{_rel(page)}: {current.name} has no {name}'
                cited += 1
    assert cited >= 9


def _resolve(dotted: str) -> object:
    """The object a dotted name denotes: the longest importable module, then attributes."""
    parts = dotted.split('.')
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module('.'.join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attr in parts[end:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_every_mmpoly_name_the_pages_use_exists():
    names = sorted({name for page in PAGES
                    for name in re.findall(r'(?<![\w./])mmpoly(?:\.[A-Za-z_]\w*)+', _text(page))})
    assert 'mmpoly.deploy.inference_copy' in names and len(names) >= 12
    for name in names:
        _resolve(name)  # an AttributeError or ModuleNotFoundError names what is missing


# --------------------------------------------------------------------------- tables


def _table_rows(text: str, heading: str) -> List[List[str]]:
    """The body rows (cells stripped) of the first table after ``heading``."""
    after = text[text.index(heading):]
    lines = after.split('\n|', 1)[1].split('\n\n', 1)[0].split('\n')
    rows = [[cell.strip() for cell in ('|' + line).strip().strip('|').split('|')]
            for line in lines]
    return [row for row in rows[1:] if not set(''.join(row)) <= set('-: ')]


def _registered_names(cell: str) -> List[str]:
    return re.findall(r'`([A-Z]\w+)`', cell)


@pytest.mark.parametrize('page', ['README.md', 'docs/en/index.md'])
def test_the_taxonomy_blocks_are_registered_in_mmpretrain_and_mmdet(page):
    from mmdet.registry import MODELS as MMDET_MODELS
    from mmpretrain.registry import MODELS

    rows = _table_rows(_text(REPO / page), '## The taxonomy')
    names = [name for row in rows for name in _registered_names(row[1])]
    assert len(names) == 8 and 'PDCNonLocal4' in names
    for name in names:
        assert MODELS.get(name) is not None, name
        with DefaultScope.overwrite_default_scope('mmdet'):
            assert MMDET_MODELS.get(name) is MODELS.get(name), name


def test_the_data_table_names_registered_datasets():
    from mmdet.registry import DATASETS as MMDET_DATASETS
    from mmpretrain.registry import DATASETS

    rows = _table_rows(_text(REPO / 'docs/en/get_started.md'), '## Data')
    for row in rows:
        name = _registered_names(row[1])[0]
        registry = MMDET_DATASETS if 'registered in mmdet' in row[1] else DATASETS
        assert registry.get(name) is not None, row


def _documented_default(text: str) -> object:
    """A default as the option table writes it."""
    if text == 'block width':  # hidden_channels=None: the block's width
        return None
    act = re.fullmatch(r'(\w+)\(([\d.]+)\)', text)
    if act:  # LeakyReLU(0.01)
        return dict(type=act.group(1), negative_slope=float(act.group(2)))
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # 'BN', 'IN'


def test_the_pdc_option_table_states_the_defaults_of_pdcblock():
    from mmpoly.models.blocks import PDCBlock

    params = inspect.signature(PDCBlock.__init__).parameters
    rows = _table_rows(_text(REPO / 'docs/en/get_started.md'), '### PDC block options')
    checked = []
    for option_cell, _, default_cell in rows:
        options = re.findall(r'`(\w+)`', option_cell.split('(')[0])
        defaults = [d.strip() for d in default_cell.split(' / ')]
        if len(defaults) == 1:
            defaults *= len(options)
        assert len(defaults) == len(options), option_cell
        for option, default in zip(options, defaults):
            assert option in params, f'PDCBlock has no option {option}'
            assert params[option].default == _documented_default(default), option
            checked.append(option)
    assert len(checked) == 13, checked


# --------------------------------------------------------------------------- snippets


def _python_block(page: str, marker: str) -> str:
    """The ```python block of ``page`` that contains ``marker``."""
    blocks = re.findall(r'^```python\n(.*?)^```', _text(REPO / page), flags=re.S | re.M)
    matching = [b for b in blocks if marker in b]
    assert len(matching) == 1, (page, marker)
    return matching[0]


def test_the_readme_classifier_snippet_runs_on_a_fashion_mnist_image(capsys):
    code = _python_block('README.md', 'inference_model')
    images, labels = fashion_mnist_test_images(64)
    namespace = dict(image=images[0])
    exec(compile(code, 'README.md', 'exec'), namespace)
    assert 'pdc_resnet18_1xb128_cifar10' in capsys.readouterr().out
    assert namespace['result']['pred_label'] == labels[0]
    # the zoo weights, not a random model: most of the first 64 test images right
    from mmpretrain import inference_model
    predictions = [inference_model(namespace['model'], image)['pred_label'] for image in images]
    assert np.mean(np.array(predictions) == labels) > 0.8


def test_the_model_hub_snippet_runs_and_prints_what_the_page_says(capsys):
    """docs/en/model_zoo.md: the ``list_models`` output and the result keys in its comments,
    and the parameter count beside ``get_model``."""
    from mmpoly.utils.complexity import count_params

    code = _python_block('docs/en/model_zoo.md', 'list_models')
    images, labels = fashion_mnist_test_images(1)
    namespace = dict(image=images[0])
    exec(compile(code, 'model_zoo.md', 'exec'), namespace)
    printed = ast.literal_eval(next(line for line in capsys.readouterr().out.splitlines()
                                    if line.startswith('[')))
    comment = re.search(r'print\(list_models.*?\n((?:# .*\n)+)', code).group(1)
    assert printed == ast.literal_eval(comment.replace('# ', ''))
    keys = re.search(r'# (\{.*\})', code).group(1)
    assert sorted(namespace['result']) == sorted(re.findall(r"'(\w+)'", keys))
    # the result is the zoo weights' (an untrained model's would be a guess)
    assert namespace['result']['pred_label'] == labels[0]
    claimed = re.search(r"get_model\('pdc_resnet8_1xb128_fashion-mnist'\)\s*# (\w+), ([\d,]+)",
                        code)
    model = namespace['model']
    assert type(model.backbone).__name__ == claimed.group(1)
    assert count_params(model) == int(claimed.group(2).replace(',', ''))


def test_the_first_config_of_get_started_builds_a_cifar_classifier():
    from mmpretrain.registry import MODELS

    code = _python_block('docs/en/get_started.md', "type='PDCResNetCIFAR'")
    cfg = Config.fromstring(code, '.py')
    assert cfg.custom_imports['imports'] == ['mmpoly.models', 'mmpoly.engine']
    model = MODELS.build(cfg.model).eval()
    block = model.backbone.layer1[0]
    assert type(block).__name__ == 'PDCBlock' and block.degree == 3
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32), mode='tensor').shape == (2, 10)


def test_the_plugins_example_of_the_index_builds():
    """docs/en/index.md: ``plugins=[dict(cfg=dict(type='NonLocalBlock', ...), stages=...)]``
    puts a non-local block after the last block of the stages chosen."""
    from mmpretrain.registry import MODELS

    text = _text(REPO / 'docs/en/index.md')
    plugins = re.search(r'`plugins=(\[dict\(cfg=.*?\)\])`', text).group(1)
    backbone = MODELS.build(dict(type='PDCResNetCIFAR', depth=18,
                                 plugins=eval(plugins, {'dict': dict})))
    kinds = [type(m).__name__ for m in backbone.modules()]
    assert kinds.count('NonLocalBlock') == 2
    with torch.no_grad():
        assert backbone(torch.randn(1, 3, 32, 32))[-1].shape[1] == 512


def test_an_mmdet_config_may_name_mmpoly_backbones_with_or_without_scope():
    """get_started.md: ``type='PDCResNet'`` in an mmdet config, ``'mmpretrain.PDCResNet'`` too."""
    from mmdet.registry import MODELS

    with DefaultScope.overwrite_default_scope('mmdet'):
        for name in ('PDCResNet', 'mmpretrain.PDCResNet'):
            backbone = MODELS.build(dict(type=name, depth=18))
            assert type(backbone).__name__ == 'PDCResNet'


def test_the_tensorboard_config_of_analysis_tools_loads(tmp_path):
    """The config written out in analysis_tools.md, saved where it says (configs/), keeps the
    ``LocalVisBackend`` and adds TensorBoard's."""
    code = _python_block('docs/en/analysis_tools.md', 'TensorboardVisBackend')
    name = re.match(r'# (configs/\w+\.py)', code).group(1)
    configs = tmp_path / 'configs'
    configs.mkdir()
    for path in (REPO / 'configs').iterdir():  # the page's config beside the shipped ones
        (configs / path.name).symlink_to(path)
    (tmp_path / name).write_text(code)
    cfg = Config.fromfile(str(tmp_path / name))
    assert [b['type'] for b in cfg.visualizer.vis_backends] == \
        ['LocalVisBackend', 'TensorboardVisBackend']
    assert cfg.model.backbone.type == 'PDCResNetCIFAR'
