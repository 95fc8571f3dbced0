"""Packaging: the sdist and wheel carry configs/, tools/ and model-index.yml (under
``mmpoly/.mim`` in the wheel), the wheel's metadata states mmpoly's version and supported
dependency ranges, and ``import mmpoly`` refuses unsupported OpenMMLab versions."""
import os
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path
from typing import Dict, Tuple

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import mmpoly
from mmpoly import version as mmpoly_version
from helpers import REPO


def build_distributions(out_dir: Path) -> Tuple[Path, Path]:
    """Build mmpoly's sdist from the checkout, then its wheel from that sdist (as ``pip install``
    of a release would), without network access. Returns ``(sdist, wheel)``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, '-c',
                    'import sys; from setuptools import build_meta; '
                    'print(build_meta.build_sdist(sys.argv[1]))', str(out_dir)],
                   cwd=REPO, check=True, capture_output=True, text=True)
    sdist, = out_dir.glob('mmpoly-*.tar.gz')
    wheel_dir = out_dir / 'wheel'
    result = subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--disable-pip-version-check',
                             '--no-deps', '--no-build-isolation', '--no-cache-dir', '-w',
                             str(wheel_dir), str(sdist)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    wheel, = wheel_dir.glob('mmpoly-*.whl')
    return sdist, wheel


@pytest.fixture(scope='module')
def dists(tmp_path_factory) -> Tuple[Path, Path]:
    return build_distributions(tmp_path_factory.mktemp('dist'))


def _checkout_files(folder: str) -> set:
    return {p.relative_to(REPO).as_posix() for p in (REPO / folder).rglob('*')
            if p.is_file() and '__pycache__' not in p.parts and p.suffix in ('.py', '.yml', '.sh')}


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as zf:
        name, = [n for n in zf.namelist() if n.endswith('.dist-info/METADATA')]
        return Parser().parsestr(zf.read(name).decode())


def test_wheel_carries_configs_tools_and_model_index(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    for path in ('mmpoly/version.py', 'mmpoly/__init__.py', 'mmpoly/utils/model_hub.py',
                 'mmpoly/.mim/model-index.yml', 'mmpoly/.mim/configs/metafile.yml',
                 'mmpoly/.mim/configs/pdc_resnet18_8xb32_in1k.py',
                 'mmpoly/.mim/configs/pdc_resnet8_1xb128_fashion-mnist.py',
                 'mmpoly/.mim/configs/_base_/default_runtime.py',
                 'mmpoly/.mim/tools/train.py', 'mmpoly/.mim/tools/test.py',
                 'mmpoly/.mim/tools/dist_train.sh',
                 'mmpoly/.mim/checkpoints/fashion-mnist/README.md'):
        assert path in names, path
    # every config / tool of the checkout, nothing compiled
    for folder in ('configs', 'tools'):
        expected = {f'mmpoly/.mim/{p}' for p in _checkout_files(folder)}
        assert expected and expected <= names, sorted(expected - names)[:10]
    packaged_py = {n for n in names if n.startswith('mmpoly/') and '.mim' not in n}
    source_py = {p.relative_to(REPO).as_posix() for p in (REPO / 'mmpoly').rglob('*.py')
                 if '.mim' not in p.parts}
    assert source_py <= packaged_py, sorted(source_py - packaged_py)[:10]
    assert not [n for n in names if '__pycache__' in n or n.endswith('.pyc')]
    assert not [n for n in names if n.startswith(('configs/', 'tools/', 'tests/'))]


def test_sdist_carries_sources_without_mim_links(dists):
    sdist, _ = dists
    with tarfile.open(sdist) as tf:
        names = {n.split('/', 1)[1] for n in tf.getnames() if '/' in n}
    for path in ('setup.py', 'MANIFEST.in', 'README.md', 'model-index.yml', 'mmpoly/version.py',
                 'configs/metafile.yml', 'configs/_base_/default_runtime.py',
                 'configs/pdc_resnet18_8xb32_in1k.py', 'tools/train.py', 'tools/setup_env.sh',
                 'checkpoints/fashion-mnist/README.md', 'configs/README.md', 'mkdocs.yml',
                 'docs/en/index.md', 'tools/select_python.sh', 'tools/docs/gen_tables.py'):
        assert path in names, path
    assert not [n for n in names if n.startswith('mmpoly/.mim')]


def test_wheel_metadata_states_version_and_supported_ranges(dists):
    _, wheel = dists
    meta = _metadata(wheel)
    assert meta['Name'] == 'mmpoly'
    assert meta['Version'] == mmpoly.__version__ == mmpoly_version.__version__
    assert wheel.name.startswith(f'mmpoly-{mmpoly.__version__}-')
    assert meta['Requires-Python'] == mmpoly_version.PYTHON_REQUIRES
    assert meta['License'] == 'Apache-2.0' or meta['License-Expression'] == 'Apache-2.0'
    assert 'arXiv:2104.07916' in meta['Summary']
    requires: Dict[str, Requirement] = {}
    for line in meta.get_all('Requires-Dist'):
        req = Requirement(line)
        if req.marker is None:  # extras (tools / tests) carry a marker
            requires[req.name.lower()] = req
    for package, spec in mmpoly_version.CHECKED_REQUIREMENTS.items():
        assert requires[package].specifier == SpecifierSet(spec), package
    for package in ('numpy', 'scipy', 'pycocotools'):
        assert package in requires
    # the tested stack lies inside the ranges; what mmdet 3.3 refuses lies outside
    tested = {'torch': '2.14.1', 'mmengine': '0.10.7', 'mmcv': '2.1.0', 'mmpretrain': '1.2.0',
              'mmdet': '3.3.0'}
    for package, version in tested.items():
        assert version in requires[package].specifier, package
    assert '2.2.0' not in requires['mmcv'].specifier
    assert '0.11.0' not in requires['mmengine'].specifier
    extras = set(meta.get_all('Provides-Extra'))
    assert {'tools', 'tests'} <= extras


def test_setup_py_reads_the_version_without_importing_mmpoly_or_torch():
    code = ('import runpy, sys; sys.argv = ["setup.py", "--version"]; '
            'runpy.run_path("setup.py", run_name="__main__"); '
            'print("imported:", sorted(m for m in ("mmpoly", "torch", "mmengine") '
            'if m in sys.modules))')
    result = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.split()
    assert mmpoly.__version__ in lines
    assert result.stdout.strip().endswith('imported: []')


# --------------------------------------------------------------------------- import check


def test_the_installed_stack_is_supported():
    assert mmpoly_version.unsupported_requirements() == []
    mmpoly_version.check_requirements()


def _fake_versions(monkeypatch: pytest.MonkeyPatch, **versions: str) -> None:
    real = mmpoly_version.metadata.version

    def version(package: str) -> str:
        if package in versions:
            if versions[package] is None:
                raise mmpoly_version.metadata.PackageNotFoundError(package)
            return versions[package]
        return real(package)

    monkeypatch.setattr(mmpoly_version.metadata, 'version', version)


@pytest.mark.parametrize('package,installed', [
    ('mmengine', '0.11.0'), ('mmengine', '0.9.1'), ('mmcv', '2.2.0'), ('mmcv', '1.7.2'),
    ('mmpretrain', '1.1.1'), ('mmpretrain', '2.0.0'), ('mmdet', '3.2.0'), ('mmdet', '3.4.0'),
    ('torch', '2.4.1'), ('mmcv', 'not-a-version')])
def test_unsupported_version_is_refused_naming_package_version_and_range(
        monkeypatch, package, installed):
    _fake_versions(monkeypatch, **{package: installed})
    with pytest.raises(mmpoly_version.UnsupportedDependencyError) as info:
        mmpoly_version.check_requirements()
    message = str(info.value)
    spec = mmpoly_version.CHECKED_REQUIREMENTS[package]
    assert f'{package}: installed {installed}, mmpoly {mmpoly.__version__} supports ' \
           f'{package}{spec}' in message
    assert message.count(': installed ') == 1  # only the faked package


def test_missing_dependency_is_refused(monkeypatch):
    _fake_versions(monkeypatch, mmdet=None, mmcv='2.2.0')
    bad = mmpoly_version.unsupported_requirements()
    assert bad == [('mmcv', '2.2.0', mmpoly_version.CHECKED_REQUIREMENTS['mmcv']),
                   ('mmdet', None, mmpoly_version.CHECKED_REQUIREMENTS['mmdet'])]
    with pytest.raises(ImportError, match=r'mmdet: installed \(not installed\)'):
        mmpoly_version.check_requirements()


def test_local_build_tags_and_in_range_versions_pass(monkeypatch):
    _fake_versions(monkeypatch, torch='2.5.0+cpu', mmcv='2.0.1', mmengine='0.10.3',
                   mmpretrain='1.2.0', mmdet='3.3.0')
    assert mmpoly_version.unsupported_requirements() == []


def test_import_mmpoly_refuses_an_unsupported_mmcv():
    """``import mmpoly`` itself runs the check (before importing torch or OpenMMLab)."""
    code = ('import importlib.metadata as m\n'
            'real = m.version\n'
            'm.version = lambda name: "2.2.0" if name == "mmcv" else real(name)\n'
            'import sys\n'
            'try:\n'
            '    import mmpoly\n'
            'except ImportError as exc:\n'
            '    print(type(exc).__name__, exc)\n'
            '    print("torch imported:", "torch" in sys.modules)\n'
            '    sys.exit(3)\n')
    result = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True,
                            text=True, env={**os.environ, 'PYTHONWARNINGS': 'ignore'})
    assert result.returncode == 3, result.stdout + result.stderr[-3000:]
    assert 'UnsupportedDependencyError' in result.stdout
    assert 'mmcv: installed 2.2.0, mmpoly' in result.stdout
    assert 'mmcv>=2.0.0,<2.2.0' in result.stdout
    assert 'torch imported: False' in result.stdout
