"""Packaging of mmpoly (the polynomial networks of arXiv:2104.07916 for mmpretrain and mmdet).

``pip install .`` builds a wheel whose ``mmpoly/.mim/`` holds a copy of ``configs/``, ``tools/``
and ``model-index.yml`` (where OpenMMLab's ``mim`` and mmpoly's model hub look for them);
``pip install -e .`` links them there instead, so edits in the checkout show at once.
The version and the supported dependency ranges come from ``mmpoly/version.py``, read without
importing mmpoly (nor torch).
"""
import os
import os.path as osp
import shutil
from typing import Dict

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = osp.dirname(osp.abspath(__file__))
#: What goes to ``mmpoly/.mim/``, relative to the repository root.
MIM_FILES = ('configs', 'tools', 'checkpoints', 'model-index.yml')
_IGNORED = shutil.ignore_patterns('__pycache__', '*.pyc', '*.pyo')


def read_version_module() -> Dict:
    """The names defined by ``mmpoly/version.py`` (standard library only at import time)."""
    path = osp.join(ROOT, 'mmpoly', 'version.py')
    namespace: Dict = {'__name__': 'mmpoly_version', '__file__': path}
    with open(path, encoding='utf-8') as f:
        exec(compile(f.read(), path, 'exec'), namespace)
    return namespace


def _remove(path: str) -> None:
    if osp.islink(path) or osp.isfile(path):
        os.remove(path)
    elif osp.isdir(path):
        shutil.rmtree(path)


def copy_mim_files(mim_dir: str) -> None:
    """Copy :data:`MIM_FILES` into ``mim_dir`` (for a wheel or a plain install)."""
    os.makedirs(mim_dir, exist_ok=True)
    for name in MIM_FILES:
        src, dst = osp.join(ROOT, name), osp.join(mim_dir, name)
        if not osp.exists(src):
            raise FileNotFoundError(f'{src} is missing: mmpoly is built from a checkout or an '
                                    f'sdist that has {", ".join(MIM_FILES)}')
        _remove(dst)
        if osp.isdir(src):
            shutil.copytree(src, dst, ignore=_IGNORED)
        else:
            shutil.copyfile(src, dst)


def link_mim_files(mim_dir: str) -> None:
    """Symlink :data:`MIM_FILES` into ``mim_dir`` (editable install); copies where the file
    system has no symlinks."""
    os.makedirs(mim_dir, exist_ok=True)
    for name in MIM_FILES:
        src, dst = osp.join(ROOT, name), osp.join(mim_dir, name)
        _remove(dst)
        try:
            os.symlink(osp.relpath(src, mim_dir), dst)
        except OSError:
            if osp.isdir(src):
                shutil.copytree(src, dst, ignore=_IGNORED)
            else:
                shutil.copyfile(src, dst)


class BuildPyWithMim(build_py):
    """``build_py`` that also puts :data:`MIM_FILES` under ``mmpoly/.mim``: copied into the
    build directory for a wheel, linked in the source tree for an editable install."""

    def run(self) -> None:
        super().run()
        if getattr(self, 'editable_mode', False):
            link_mim_files(osp.join(ROOT, 'mmpoly', '.mim'))
        else:
            copy_mim_files(osp.join(self.build_lib, 'mmpoly', '.mim'))


def long_description() -> str:
    with open(osp.join(ROOT, 'README.md'), encoding='utf-8') as f:
        return f.read()


VERSION = read_version_module()
#: ``pip install mmpoly[deploy]``: ONNX export (torch's torch.export-based exporter needs
#: onnxscript) and onnxruntime (tools/deployment/); the versions tools/setup_env.sh installs.
DEPLOY_REQUIREMENTS = ['onnx==1.23.2', 'onnxscript==0.7.2', 'onnxruntime==1.32.0']

setup(
    name='mmpoly',
    version=VERSION['__version__'],
    description='Polynomial networks (arXiv:2104.07916) for OpenMMLab: PDC / Π-net ResNets and '
    'polynomial non-local blocks for mmpretrain and mmdet',
    long_description=long_description(),
    long_description_content_type='text/markdown',
    keywords='computer vision, image classification, object detection, polynomial networks, '
    'OpenMMLab',
    url='https://arxiv.org/abs/2104.07916',
    project_urls={'Paper': 'https://arxiv.org/abs/2104.07916'},
    license='Apache-2.0',
    license_files=['LICENSE'] if osp.isfile(osp.join(ROOT, 'LICENSE')) else [],
    classifiers=[
        'Development Status :: 4 - Beta',
        'Operating System :: OS Independent',
        'Programming Language :: Python :: 3',
        'Programming Language :: Python :: 3.9',
        'Programming Language :: Python :: 3.10',
        'Programming Language :: Python :: 3.11',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
    packages=find_packages(include=['mmpoly', 'mmpoly.*']),
    include_package_data=False,
    python_requires=VERSION['PYTHON_REQUIRES'],
    install_requires=VERSION['install_requires'](),
    extras_require={**VERSION['EXTRAS'], 'deploy': DEPLOY_REQUIREMENTS},
    cmdclass={'build_py': BuildPyWithMim},
    zip_safe=False,
)
