"""tools/build_mmcv.sh: the build decisions (CUDA or CPU, architectures, cache folder, C++
standard, messages) with a faked torch probe and a fake nvcc, and a real build of a stand-in
sdist from a local folder (offline), without compiling mmcv."""
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, Optional

import pytest
from helpers import REPO

SCRIPT = REPO / 'tools' / 'build_mmcv.sh'
MACHINE = os.uname().machine


def _bash(body: str, probe: Optional[str] = None, env: Optional[Dict[str, str]] = None,
          path: Optional[Path] = None) -> subprocess.CompletedProcess:
    """Source the script, fake ``torch_probe`` (``probe``: its output line), run ``body``."""
    fake = f"torch_probe() {{ echo '{probe}'; }}\n" if probe else ''
    script = f'source {SCRIPT}\nPYTHON={sys.executable}\n{fake}{body}\n'
    base = {k: v for k, v in os.environ.items()
            if k not in ('FORCE_CUDA', 'TORCH_CUDA_ARCH_LIST', 'CUDA_HOME', 'MMCV_CXX_STD',
                         'MAX_JOBS')}
    # no real nvcc: PATH with the fake one (if any) and the basic tools, no default CUDA home
    base['PATH'] = (f'{path}:' if path else '') + '/usr/bin:/bin'
    base['CUDA_DEFAULT_HOME'] = '/nonexistent/cuda'
    return subprocess.run(['bash', '-c', script], env={**base, **(env or {})}, text=True,
                          capture_output=True, timeout=120)


@pytest.fixture
def fake_nvcc(tmp_path: Path):
    """A folder with an ``nvcc`` that reports CUDA ``release``; returns a factory."""
    def make(release: str = '13.0') -> Path:
        folder = tmp_path / f'cuda-{release}' / 'bin'
        folder.mkdir(parents=True)
        nvcc = folder / 'nvcc'
        nvcc.write_text('#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver"\n'
                        f'echo "Cuda compilation tools, release {release}, V{release}.48"\n')
        nvcc.chmod(0o755)
        return folder
    return make


PLAN = 'plan_build; echo "$BUILD_MODE|$ARCHS|$NVCC|$(wheel_dir /c "$TORCH_VERSION" cp312)"'


def test_cpu_machine_keeps_the_cpu_cache_key():
    proc = _bash(PLAN, probe='2.14.1 none none')
    assert proc.returncode == 0, proc.stderr
    # the key setup_env.sh used before CUDA builds: mmcv-VER-PYTAG-torchVER-MACHINE
    assert proc.stdout.strip() == f'cpu|||/c/wheels/mmcv-2.1.0-cp312-torch2.14.1-{MACHINE}'


def test_gpu_with_nvcc_builds_cuda_for_the_visible_archs(fake_nvcc):
    bin_dir = fake_nvcc('13.0')
    proc = _bash(PLAN, probe='2.11.0+cu130 13.0 8.0;9.0', path=bin_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (f'cuda|8.0;9.0|{bin_dir}/nvcc|/c/wheels/mmcv-2.1.0-cp312-'
                                   f'torch2.11.0+cu130-cu13.0-sm80-90-{MACHINE}')
    # CUDA_HOME wins over PATH; TORCH_CUDA_ARCH_LIST over the visible GPUs
    home = fake_nvcc('13.1').parent
    proc = _bash(PLAN, probe='2.11.0+cu130 13.0 9.0', path=bin_dir,
                 env={'CUDA_HOME': str(home), 'TORCH_CUDA_ARCH_LIST': '8.6;9.0+PTX'})
    assert proc.returncode == 0, proc.stderr
    mode, archs, nvcc, wheels = proc.stdout.strip().split('|')
    assert (mode, archs, nvcc) == ('cuda', '8.6;9.0+PTX', f'{home}/bin/nvcc')
    assert wheels.endswith(f'-cu13.0-sm86-90+PTX-{MACHINE}')


def test_force_cuda(fake_nvcc):
    bin_dir = fake_nvcc('13.0')
    proc = _bash(PLAN, probe='2.11.0+cu130 13.0 9.0', path=bin_dir, env={'FORCE_CUDA': '0'})
    assert proc.returncode == 0 and proc.stdout.startswith('cpu||'), proc.stderr
    # a build machine without a GPU: FORCE_CUDA=1 needs the architectures
    proc = _bash(PLAN, probe='2.11.0+cu130 13.0 none', path=bin_dir, env={'FORCE_CUDA': '1'})
    assert proc.returncode == 1 and 'set TORCH_CUDA_ARCH_LIST' in proc.stderr
    proc = _bash(PLAN, probe='2.11.0+cu130 13.0 none', path=bin_dir,
                 env={'FORCE_CUDA': '1', 'TORCH_CUDA_ARCH_LIST': '9.0'})
    assert proc.returncode == 0 and proc.stdout.startswith('cuda|9.0|'), proc.stderr
    proc = _bash(PLAN, probe='2.14.1+cpu none none', path=bin_dir, env={'FORCE_CUDA': '1'})
    assert proc.returncode == 1
    assert 'is a CPU build' in proc.stderr and 'FORCE_CUDA=0' in proc.stderr
    proc = _bash(PLAN, probe='2.14.1 none none', env={'FORCE_CUDA': 'yes'})
    assert proc.returncode == 1 and "FORCE_CUDA must be 0, 1 or unset, got 'yes'" in proc.stderr


def test_gpu_without_nvcc_is_a_message_not_a_traceback():
    proc = _bash(PLAN, probe='2.11.0+cu130 13.0 9.0')
    assert proc.returncode == 1 and proc.stdout == ''
    message = proc.stderr
    assert message.startswith('error: a GPU is visible (torch 2.11.0+cu130, CUDA 13.0) but nvcc')
    for advice in ('Install the CUDA toolkit 13.0', 'set CUDA_HOME', 'bin/ on PATH',
                   'set FORCE_CUDA=0', 'looked in $CUDA_HOME/bin, on PATH and in '
                   '/nonexistent/cuda/bin'):
        assert advice in message, message
    assert 'Traceback' not in message


def test_nvcc_major_version_must_match_torch(fake_nvcc):
    proc = _bash(PLAN, probe='2.11.0+cu130 13.0 9.0', path=fake_nvcc('12.4'))
    assert proc.returncode == 1
    assert 'is CUDA 12.4 but torch 2.11.0+cu130 was built with CUDA 13.0' in proc.stderr


def test_cxx_std_follows_the_torch_headers(tmp_path):
    import torch
    include = Path(torch.__file__).parent / 'include'
    all_h = include / 'torch' / 'csrc' / 'api' / 'include' / 'torch' / 'all.h'
    wants_20 = '__cplusplus < 202002L' in all_h.read_text()
    proc = _bash('cxx_std')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ('c++20' if wants_20 else 'c++17')
    # a torch whose headers ask for C++17 only (e.g. torch 2.5)
    old = tmp_path / 'include'
    (old / 'torch/csrc/api/include/torch').mkdir(parents=True)
    (old / 'torch/csrc/api/include/torch/all.h').write_text(
        '#if !defined(_MSC_VER) && __cplusplus < 201703L\n#error C++17\n#endif\n')
    assert _bash('cxx_std', env={'TORCH_INCLUDE': str(old)}).stdout.strip() == 'c++17'
    assert _bash('cxx_std', env={'MMCV_CXX_STD': 'c++20',
                                 'TORCH_INCLUDE': str(old)}).stdout.strip() == 'c++20'
    proc = _bash('cxx_std', env={'MMCV_CXX_STD': 'gnu++2b'})
    assert proc.returncode == 1 and 'MMCV_CXX_STD must be c++17 or c++20' in proc.stderr


#: The lines of mmcv 2.1.0's setup.py that patch_setup changes (its import, the cxx and nvcc
#: standard flags), in a stand-in that builds an empty wheel named mmcv 2.1.0.
STANDIN_SETUP = '''\
from pkg_resources import DistributionNotFound, get_distribution, parse_version
from setuptools import setup
extra_compile_args = {'cxx': ['-std=c++17'], 'nvcc': []}
extra_compile_args['nvcc'] += ['-std=c++17']
assert parse_version('2.11.0') > parse_version('1.12.1')
try:
    get_distribution('no-such-distribution-mmpoly')
except DistributionNotFound:
    pass
open('flags.txt', 'w').write(repr(extra_compile_args))
setup(name='mmcv', version='2.1.0', py_modules=[])
'''


def _standin_sdist(folder: Path) -> Path:
    src = folder / 'src' / 'mmcv-2.1.0'
    src.mkdir(parents=True)
    (src / 'setup.py').write_text(STANDIN_SETUP)
    folder.mkdir(exist_ok=True)
    with tarfile.open(folder / 'mmcv-2.1.0.tar.gz', 'w:gz') as tar:
        tar.add(src, arcname='mmcv-2.1.0')
    return folder


def test_offline_build_from_a_local_folder_patches_and_times(tmp_path):
    links = _standin_sdist(tmp_path / 'wheelhouse')
    out = tmp_path / 'wheels'
    # OMP_NUM_THREADS=1 (a cluster's or the test runner's): GNU nproc would answer 1 here
    proc = _bash(f'plan_build; MMCV_CXX_STD=c++20 build_wheel {out} {links}',
                 probe='2.14.1 none none',
                 env={'PIP_NO_INDEX': '1', 'OMP_NUM_THREADS': '1', 'OMP_THREAD_LIMIT': '1'})
    assert proc.returncode == 0, proc.stderr
    wheels = list(out.glob('mmcv-2.1.0-*.whl'))
    assert len(wheels) == 1
    timing = (out / 'build_time.txt').read_text()
    assert timing.startswith('mmcv 2.1.0 cpu build: ') and ' s (' in timing
    assert 'torch 2.14.1' in timing and timing in proc.stderr  # printed and written
    cores = len(os.sched_getaffinity(0))  # every core this process may use
    assert timing.rstrip().endswith(f', {cores} parallel jobs on {cores} cores'), timing
    with zipfile.ZipFile(wheels[0]) as wheel:
        assert any(name.endswith('METADATA') for name in wheel.namelist())


def test_build_only_builds_and_installs_nothing(tmp_path):
    """--build-only: the wheel for another machine (e.g. a GPU node with the same Python and
    torch) is built into MMPOLY_WHEELS and its path printed; nothing is installed."""
    links = _standin_sdist(tmp_path / 'wheelhouse')
    out = tmp_path / 'wheels'
    proc = _bash(f'main --build-only --find-links {links}', probe='2.14.1 none none',
                 env={'PIP_NO_INDEX': '1', 'MMPOLY_WHEELS': str(out), 'MMCV_CXX_STD': 'c++20'})
    assert proc.returncode == 0, proc.stderr
    wheels = list(out.glob('mmcv-2.1.0-*.whl'))
    assert len(wheels) == 1 and proc.stdout.strip() == str(wheels[0])
    assert 'installed' not in proc.stderr and 'building mmcv 2.1.0 (cpu' in proc.stderr
    again = _bash(f'main --build-only --find-links {links}', probe='2.14.1 none none',
                  env={'PIP_NO_INDEX': '1', 'MMPOLY_WHEELS': str(out), 'MMCV_CXX_STD': 'c++20'})
    assert again.returncode == 0 and 'using the cached wheel' in again.stderr
    both = _bash('main --build-only --stack', probe='2.14.1 none none')
    assert both.returncode == 1 and 'cannot be combined with --stack' in both.stderr


def test_stack_is_checked_after_mmcv_is_installed(tmp_path):
    """--stack on a machine without mmcv (a fresh GPU node): mmpretrain and mmdet import mmcv,
    so their import check runs after the mmcv wheel is installed, not before."""
    wheels = tmp_path / 'wheels'
    wheels.mkdir()
    (wheels / 'mmcv-2.1.0-cp312-cp312-linux_x86_64.whl').write_text('')
    fake_python = tmp_path / 'python'
    fake_python.write_text('#!/bin/sh\necho "python $*"\n')
    fake_python.chmod(0o755)
    body = (f'install_stack() {{ echo install_stack; }}\ncheck_stack() {{ echo check_stack; }}\n'
            f'PYTHON={fake_python} main --stack')
    proc = _bash(body, probe='2.14.1 none none', env={'MMPOLY_WHEELS': str(wheels)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    install_mmcv = next(i for i, line in enumerate(lines) if 'install' in line and
                        'mmcv-2.1.0' in line)
    assert lines.index('install_stack') < install_mmcv < lines.index('check_stack'), lines


def test_patch_setup(tmp_path):
    setup = tmp_path / 'setup.py'
    setup.write_text(STANDIN_SETUP)
    proc = _bash(f'patch_setup {setup} c++20')
    assert proc.returncode == 0, proc.stderr
    text = setup.read_text()
    assert 'pkg_resources' not in text and '-std=c++17' not in text
    assert text.count('-std=c++20') == 2
    # the patched file runs without pkg_resources and keeps its meaning
    run = subprocess.run([sys.executable, '-c', text.replace(
        "setup(name='mmcv', version='2.1.0', py_modules=[])", '')], cwd=tmp_path,
        capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / 'flags.txt').read_text() == \
        "{'cxx': ['-std=c++20'], 'nvcc': ['-std=c++20']}"
    proc = _bash(f'patch_setup {setup} c++20')  # patched twice: not mmcv 2.1.0's setup.py
    assert proc.returncode == 1 and 'no -std=c++17 flag to patch' in proc.stderr
    proc = _bash(f'fetch_sdist {tmp_path / "empty"} {tmp_path}')
    assert proc.returncode == 1 and 'has no mmcv-2.1.0.tar.gz' in proc.stderr
    assert '--download' in proc.stderr


def test_arch_tag_and_options():
    proc = _bash('arch_tag "9.0"; arch_tag "7.5;8.0;9.0+PTX"')
    assert proc.stdout.split() == ['sm90', 'sm75-80-90+PTX']
    proc = subprocess.run(['bash', str(SCRIPT), '--bogus'], capture_output=True, text=True)
    assert proc.returncode == 1 and "unknown option '--bogus'" in proc.stderr
    proc = subprocess.run(['bash', str(SCRIPT), '--help'], capture_output=True, text=True)
    assert proc.returncode == 0 and '--find-links DIR' in proc.stdout


def test_cuda_header_dirs_of_the_pip_wheels():
    """torch's pip wheels bring cusparse.h & co. under site-packages/nvidia/*/include; the
    CUDA build adds them (CPATH) when the toolkit lacks them."""
    nvidia = pytest.importorskip('nvidia', reason='torch without pip CUDA libraries')
    proc = _bash('cuda_header_dirs')
    assert proc.returncode == 0, proc.stderr
    dirs = proc.stdout.strip().split(':')
    expected = sorted(str(p) for base in nvidia.__path__ for p in Path(base).glob('*/include')
                      if p.is_dir())
    assert dirs == expected and all(Path(d).is_dir() for d in dirs)


def test_cuda_home_of_a_wrapper_nvcc(tmp_path):
    """A wrapper such as /usr/local/bin/nvcc: the toolkit is the one nvcc reports (TOP)."""
    toolkit = tmp_path / 'cuda-13.0'
    (toolkit / 'bin').mkdir(parents=True)
    wrapper = tmp_path / 'wrappers' / 'nvcc'
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "#\\$ TOP={toolkit}/bin/.." >&2\n')
    wrapper.chmod(0o755)
    assert _bash(f'cuda_home_of {wrapper}').stdout.strip() == str(toolkit)
    assert _bash(f'cuda_home_of {wrapper}', env={'CUDA_HOME': '/opt/cuda'}).stdout.strip() == \
        '/opt/cuda'
    silent = tmp_path / 'other' / 'bin' / 'nvcc'  # reports nothing: its ../
    silent.parent.mkdir(parents=True)
    silent.write_text('#!/bin/sh\n')
    silent.chmod(0o755)
    assert _bash(f'cuda_home_of {silent}').stdout.strip() == str(tmp_path / 'other')
