"""Which Python tools/dist_*.sh and tools/slurm_*.sh run, from a shell with no venv activated.

Precedence (tools/select_python.sh): PYTHON, else $MMPOLY_VENV/bin/python, else
<repository>/.venv/bin/python, else ``python`` on the PATH. Every run here starts from
``env -i PATH=/usr/bin:/bin``: no activated venv, and a PATH whose ``python`` (if any) lacks torch.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import TOOLS

SCRIPTS = {  # script: arguments up to the options passed on to train.py / test.py
    'dist_train.sh': ['cfg.py', '1'],
    'dist_test.sh': ['cfg.py', 'ck.pth', '1'],
    'slurm_train.sh': ['part', 'job', 'cfg.py'],
    'slurm_test.sh': ['part', 'job', 'cfg.py', 'ck.pth'],
}
BARE_PATH = '/usr/bin:/bin'


def _fake_python(path: Path, name: str) -> Path:
    """An executable that prints its name and arguments, one per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "ran {name}"\nfor a in "$@"; do printf "%s\\n" "$a"; '
                    'done\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the launch scripts in ``repo/tools/``, a fake ``srun`` and fake interpreters:
    ``repo/.venv/bin/python``, ``venv/bin/python`` (for MMPOLY_VENV), ``bin/python`` (on PATH)."""
    repo = tmp_path / 'repo'
    (repo / 'tools').mkdir(parents=True)
    for script in (*SCRIPTS, 'select_python.sh'):
        shutil.copy2(TOOLS / script, repo / 'tools' / script)
    _fake_python(repo / '.venv' / 'bin' / 'python', 'repo-venv')
    _fake_python(tmp_path / 'venv' / 'bin' / 'python', 'mmpoly-venv')
    _fake_python(tmp_path / 'bin' / 'python', 'path-python')
    _fake_python(tmp_path / 'explicit', 'explicit')
    srun = tmp_path / 'bin' / 'srun'  # runs its last arguments from the interpreter on
    srun.write_text('#!/bin/bash\nwhile [ "${1#-}" != "$1" ]; do\n'
                    '    if [ "$1" = -p ]; then shift; fi; shift\ndone\nexec "$@"\n')
    srun.chmod(0o755)
    return repo


def _run(script: Path, args: List[str], env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(['/bin/bash', str(script), *args], env={'PATH': BARE_PATH, **env},
                          capture_output=True, text=True, timeout=60)


def _ran(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith('ran '), proc.stdout
    return first[len('ran '):]


@pytest.mark.parametrize('script', list(SCRIPTS))
def test_precedence_python_then_mmpoly_venv_then_repo_venv_then_path(checkout: Path,
                                                                     script: str) -> None:
    tmp = checkout.parent
    path = f'{tmp / "bin"}:{BARE_PATH}'
    run = checkout / 'tools' / script
    args = SCRIPTS[script]
    every = {'PATH': path, 'PYTHON': str(tmp / 'explicit'), 'MMPOLY_VENV': str(tmp / 'venv')}
    assert _ran(_run(run, args, every)) == 'explicit'
    every.pop('PYTHON')
    assert _ran(_run(run, args, every)) == 'mmpoly-venv'
    every.pop('MMPOLY_VENV')
    assert _ran(_run(run, args, every)) == 'repo-venv'
    shutil.rmtree(checkout / '.venv')
    assert _ran(_run(run, args, every)) == 'path-python'


@pytest.mark.parametrize('script', list(SCRIPTS))
def test_arguments_reach_the_tool(checkout: Path, script: str) -> None:
    tmp = checkout.parent
    proc = _run(checkout / 'tools' / script, [*SCRIPTS[script], '--amp'],
                {'PATH': f'{tmp / "bin"}:{BARE_PATH}'})
    argv = proc.stdout.splitlines()[1:]
    tool = 'train.py' if 'train' in script else 'test.py'
    at = [i for i, a in enumerate(argv) if a.endswith(f'/tools/{tool}')]
    assert len(at) == 1, argv
    assert argv[at[0] + 1] == 'cfg.py' and argv[-1] == '--amp'
    assert argv[-2] in ('pytorch', 'slurm') and argv[-3] == '--launcher'


def test_mmpoly_venv_without_python_is_an_error(checkout: Path, tmp_path: Path) -> None:
    proc = _run(checkout / 'tools' / 'dist_train.sh', SCRIPTS['dist_train.sh'],
                {'MMPOLY_VENV': str(tmp_path / 'nowhere')})
    assert proc.returncode == 2
    assert f'MMPOLY_VENV={tmp_path / "nowhere"} has no bin/python' in proc.stderr
    assert 'ran ' not in proc.stdout


def test_dist_train_runs_torch_from_a_bare_shell() -> None:
    """The real script, with the venv this test suite runs in (no PYTHON, no activation): torchrun
    starts tools/train.py, which imports torch and mmpoly and prints its usage."""
    venv = Path(sys.prefix)
    if not (venv / 'bin' / 'python').is_file() or sys.prefix == sys.base_prefix:
        pytest.skip('the tests do not run in a virtual environment')
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    env = {'HOME': os.environ.get('HOME', '/tmp'), 'PORT': str(port)}
    if venv.resolve() != (TOOLS.parent / '.venv').resolve():
        env['MMPOLY_VENV'] = str(venv)
    proc = _run(TOOLS / 'dist_train.sh', ['no_such_config.py', '1', '--help'], env)
    assert "No module named 'torch'" not in proc.stderr
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'usage:' in proc.stdout and '--resume' in proc.stdout


@pytest.mark.skipif(os.environ.get('MMPOLY_TEST_RUNNER') != 'tools/run_tests.sh',
                    reason='checks what tools/run_tests.sh sets up for its workers')
def test_run_tests_gives_each_worker_its_share_of_the_cores() -> None:
    """Two workers with torch's default (a thread per core each) put four busy threads on two
    cores: the suite did 57 % more work. Each worker gets cores // workers threads (at least 1)."""
    import torch
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '0'))
    if workers == 0:
        pytest.skip('MMPOLY_TEST_WORKERS=0: one process with torch\'s own default')
    cores = len(os.sched_getaffinity(0))
    assert os.environ.get('OMP_NUM_THREADS') == str(torch.get_num_threads())
    assert torch.get_num_threads() <= max(1, cores // workers), (torch.get_num_threads(), cores)


def _run_tests_checkout(tmp_path: Path) -> Path:
    """tools/run_tests.sh in ``repo/tools/`` beside a fake set-up script and a fake venv Python,
    both of which print that they ran."""
    repo = tmp_path / 'repo'
    (repo / 'tools').mkdir(parents=True)
    shutil.copy(TOOLS / 'run_tests.sh', repo / 'tools' / 'run_tests.sh')
    (repo / 'tools' / 'setup_env.sh').write_text('echo "setup ran"\n')
    _fake_python(repo / '.venv' / 'bin' / 'python', 'venv python')
    return repo


@pytest.mark.parametrize('temp_variable', ['TMPDIR', 'PYTEST_DEBUG_TEMPROOT'])
def test_run_tests_refuses_to_start_without_the_free_space_it_needs(
        tmp_path: Path, temp_variable: str) -> None:
    """Checked on pytest's temporary directory after the set-up (a new .venv may take its room)
    and before pytest; the message names the directory, its free space and the setting."""
    repo = _run_tests_checkout(tmp_path)
    temp_root = tmp_path / 'temp'
    temp_root.mkdir()
    more = int(shutil.disk_usage(temp_root).free / 2**30) + 1
    env = {'PATH': BARE_PATH, temp_variable: str(temp_root), 'MMPOLY_TEST_MIN_FREE_GIB': str(more)}
    proc = subprocess.run(['bash', str(repo / 'tools' / 'run_tests.sh')], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc
    assert proc.stdout == 'setup ran\n'  # and pytest did not start
    free_mib = shutil.disk_usage(temp_root).free // 2**20
    match = re.search(rf'{re.escape(str(temp_root))} \(pytest\'s temporary directory\) has '
                      rf'(\d+) MiB free; the suite needs MMPOLY_TEST_MIN_FREE_GIB={more} GiB',
                      proc.stderr)
    assert match and abs(int(match.group(1)) - free_mib) < 1024, proc.stderr

    env['MMPOLY_TEST_MIN_FREE_GIB'] = str(more - 1)  # what is free, rounded down: enough
    proc = subprocess.run(['bash', str(repo / 'tools' / 'run_tests.sh'), '-x'], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc
    assert proc.stdout.splitlines()[:3] == ['setup ran', 'ran venv python', '-m']
    assert proc.stdout.splitlines()[-1] == '-x'


@pytest.mark.parametrize('value', ['ten', '-1', '1.5', ' 8'])
@pytest.mark.parametrize('variable, allowed', [
    ('MMPOLY_TEST_MIN_FREE_GIB', 'a whole number of GiB (0 = no check)'),
    ('MMPOLY_TEST_WORKERS', 'a whole number (0 = no worker processes)')])
def test_run_tests_names_a_bad_setting_before_the_set_up(
        tmp_path: Path, value: str, variable: str, allowed: str) -> None:
    repo = _run_tests_checkout(tmp_path)
    proc = subprocess.run(['bash', str(repo / 'tools' / 'run_tests.sh')],
                          env={'PATH': BARE_PATH, variable: value},
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ''  # neither the set-up nor pytest ran
    assert proc.stderr.strip() == f"{variable} must be {allowed}, got '{value}'"
