"""The code style of the repository: pycodestyle (installed by tools/setup_env.sh and the
``tests`` extra), lines of at most 100 characters, over the code a user or contributor reads."""
import subprocess
import sys

from helpers import REPO

#: The folders and files checked, relative to the repository root.
CHECKED = ('mmpoly', 'tools', 'tests', 'configs', 'setup.py')


def test_pycodestyle_finds_nothing() -> None:
    proc = subprocess.run([sys.executable, '-m', 'pycodestyle', '--max-line-length=100',
                           *CHECKED], cwd=REPO, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.stdout == ''


def test_pycodestyle_reports_a_long_line(tmp_path) -> None:
    """The check above can fail: the same command flags a line over the limit."""
    bad = tmp_path / 'bad.py'
    bad.write_text('x = ' + '1 + ' * 30 + '1\n')
    proc = subprocess.run([sys.executable, '-m', 'pycodestyle', '--max-line-length=100',
                           str(bad)], text=True, capture_output=True, timeout=60)
    assert proc.returncode == 1 and 'E501 line too long (125 > 100 characters)' in proc.stdout
