"""mmpoly's version and the versions of its dependencies it supports.

The one place for both: ``setup.py`` reads this file without importing mmpoly (so without
torch), and ``import mmpoly`` calls :func:`check_requirements`. Only the standard library and
``packaging`` are used here.
"""
from importlib import metadata
from typing import Dict, List, Optional, Tuple

__version__ = '0.1.0'

#: Supported version ranges (PEP 440 specifiers), checked by ``import mmpoly``.
#: Tested with torch 2.14.1, mmengine 0.10.7, mmcv 2.1.0, mmpretrain 1.2.0 and mmdet 3.3.0.
#:
#: * torch >= 2.5: checkpoint loading uses ``torch.serialization.safe_globals`` and
#:   ``get_unsafe_globals_in_checkpoint``.
#: * mmengine 0.10.x: ``mmpoly.engine`` relies on mmengine 0.10 internals.
#: * mmcv < 2.2: mmdet 3.3 refuses mmcv >= 2.2.
#: * mmpretrain 1.2.x, mmdet 3.3.x: the releases mmpoly's registries and configs are built on.
CHECKED_REQUIREMENTS: Dict[str, str] = {
    'torch': '>=2.5',
    'mmengine': '>=0.10.0,<0.11.0',
    'mmcv': '>=2.0.0,<2.2.0',
    'mmpretrain': '>=1.2.0,<1.3.0',
    'mmdet': '>=3.3.0,<3.4.0',
}

#: Further runtime dependencies (imported by mmpoly's modules), not version-checked.
OTHER_REQUIREMENTS: Dict[str, str] = {
    'numpy': '',
    'scipy': '',  # mmpoly/datasets/audio_transforms.py (WAV reading)
    'pycocotools': '',  # mmpoly/datasets/fashion_coco.py
    'pyyaml': '',  # mmpoly/zoo (metafile)
    'packaging': '',  # check_requirements
}

#: ``extras_require``: the dataset converters / plots in tools/ and the test suite.
EXTRAS: Dict[str, List[str]] = {
    'tools': ['scikit-image', 'matplotlib'],
    'tests': ['pytest', 'pytest-xdist', 'pycodestyle', 'scikit-image', 'matplotlib'],
}

#: The Python versions mmpoly supports (torch >= 2.5 needs 3.9; tested with 3.11).
PYTHON_REQUIRES = '>=3.9'


def install_requires() -> List[str]:
    """The ``install_requires`` list of ``setup.py``."""
    reqs = {**CHECKED_REQUIREMENTS, **OTHER_REQUIREMENTS}
    return [f'{name}{spec}' for name, spec in reqs.items()]


def installed_version(package: str) -> Optional[str]:
    """The installed version of distribution ``package``, or None if it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


class UnsupportedDependencyError(ImportError):
    """An installed dependency is missing or outside mmpoly's supported range."""


def unsupported_requirements() -> List[Tuple[str, Optional[str], str]]:
    """``(package, installed version or None, supported range)`` for each dependency of
    :data:`CHECKED_REQUIREMENTS` that is missing or outside its range."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    bad = []
    for package, spec in CHECKED_REQUIREMENTS.items():
        version = installed_version(package)
        try:
            # a local build tag (e.g. torch's '+cpu') does not change the supported release
            ok = version is not None and Version(version.split('+')[0]) in SpecifierSet(spec)
        except InvalidVersion:
            ok = False
        if not ok:
            bad.append((package, version, spec))
    return bad


def check_requirements() -> None:
    """Raise :class:`UnsupportedDependencyError` naming every dependency of
    :data:`CHECKED_REQUIREMENTS` that is missing or outside its supported range."""
    bad = unsupported_requirements()
    if bad:
        lines = [
            f'  {package}: installed {version if version else "(not installed)"}, '
            f'mmpoly {__version__} supports {package}{spec}' for package, version, spec in bad
        ]
        raise UnsupportedDependencyError(
            'mmpoly cannot run with the installed dependencies:\n' + '\n'.join(lines) +
            '\nInstall supported versions (tools/setup_env.sh sets up the tested ones).')


__all__ = ['__version__', 'CHECKED_REQUIREMENTS', 'OTHER_REQUIREMENTS', 'EXTRAS',
           'PYTHON_REQUIRES', 'install_requires', 'installed_version', 'check_requirements',
           'unsupported_requirements', 'UnsupportedDependencyError']
