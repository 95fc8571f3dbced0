"""tools/run_main_job.sh: a --work-dir among the extra arguments is refused (the job reads
$WORK_DIR back), the parameter count is that of the config the run dumped (its --cfg-options
included), and a second run moves the first one aside unless that one is still running.

The script runs from a copy of ``tools/`` whose ``setup_env.sh`` does nothing and whose Python
(``MMPOLY_VENV/bin/python``) fakes tools/train.py, tools/test.py and plot_curves.py (writing what
they would write) and runs everything else (the script's own Python snippets) with the real one.
"""
import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from helpers import CONFIGS, TOOLS
from mmengine.config import Config

from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import build_model, count_params

CONFIG_NAME = 'pdc_resnet8-w16_1xb256-4e_fashion-mnist.py'
#: The fake interpreter: tools/train.py writes what mmengine's Runner leaves in --work-dir (the
#: dumped config, a checkpoint, last_checkpoint), tools/test.py the metrics file given with --out;
#: with FAKE_SUMMARY set, the script's summary snippet (stdin) prints it instead of importing
#: mmpretrain to count parameters.
FAKE_PYTHON = """#!/bin/bash
case "$1" in
    tools/train.py)
        echo "$@" >> "$FAKE_LOG"
        while [ "$#" -gt 0 ] && [ "$1" != --work-dir ]; do shift; done
        mkdir -p "$2"
        cp "$DUMPED_CONFIG" "$2/{config}"
        : > "$2/epoch_1.pth"
        printf %s "$2/epoch_1.pth" > "$2/last_checkpoint" ;;
    tools/test.py)
        while [ "$#" -gt 0 ] && [ "$1" != --out ]; do shift; done
        echo '{{"accuracy/top1": 88.5}}' > "$2" ;;
    tools/analysis_tools/plot_curves.py) ;;
    -) if [ -n "$FAKE_SUMMARY" ]; then cat > /dev/null; echo "$FAKE_SUMMARY"; \
       else exec "{python}" "$@"; fi ;;
    *) exec "{python}" "$@" ;;
esac
""".format(config=CONFIG_NAME, python=sys.executable)


@pytest.fixture
def checkout(tmp_path: Path) -> Dict[str, str]:
    """A copy of run_main_job.sh with a set-up that does nothing and the fake Python; the
    environment to run it with."""
    tools = tmp_path / 'repo' / 'tools'
    tools.mkdir(parents=True)
    shutil.copy2(TOOLS / 'run_main_job.sh', tools / 'run_main_job.sh')
    (tools.parent / 'configs').symlink_to(CONFIGS)
    (tools / 'setup_env.sh').write_text('#!/bin/bash\necho "setup ran" >&2\n')
    python = tmp_path / 'venv' / 'bin' / 'python'
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return {**os.environ, 'MMPOLY_VENV': str(tmp_path / 'venv'),
            'WORK_DIR': str(tmp_path / 'main_job'), 'FAKE_LOG': str(tmp_path / 'train.log')}


def dumped_config(tmp_path: Path) -> str:
    """The main job's config as the Runner dumps it (its _base_ files merged in)."""
    dumped = tmp_path / 'dumped.py'
    Config.fromfile(str(CONFIGS / CONFIG_NAME)).dump(str(dumped))
    return str(dumped)


def run_job(env: Dict[str, str], args: List[str]) -> subprocess.CompletedProcess:
    script = Path(env['MMPOLY_VENV']).parent / 'repo' / 'tools' / 'run_main_job.sh'
    return subprocess.run(['bash', str(script), *args], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize('args', [
    ['--work-dir', 'elsewhere'], ['--work-dir=elsewhere'], ['--work', 'elsewhere'],
    ['--cfg-options', 'train_cfg.max_epochs=1', 'work_dir=elsewhere'],
])
def test_a_work_dir_among_the_extra_arguments_is_refused(checkout: Dict[str, str],
                                                         args: List[str]) -> None:
    """It trained in another folder, then read $WORK_DIR (failing, or with --resume reporting
    an older run's accuracy)."""
    proc = run_job(checkout, args)
    assert proc.returncode == 2, proc.stderr
    option = next(arg for arg in args if 'work' in arg)
    assert proc.stderr.splitlines() == [
        f"run_main_job.sh: error: '{option}': the main job's work_dir is $WORK_DIR (default "
        'work_dirs/main_job), where it reads the checkpoint and the logs back; set WORK_DIR=DIR '
        'instead, e.g. WORK_DIR=DIR bash tools/run_main_job.sh'], proc.stderr
    assert proc.stdout == '' and not Path(checkout['FAKE_LOG']).exists()


def test_the_parameter_count_is_that_of_the_trained_config(checkout: Dict[str, str],
                                                           tmp_path: Path) -> None:
    """Counted from Config.fromfile(CONFIG), --cfg-options that change the model (here wider
    stages) were left out of the count."""
    register_all_modules()
    cfg = Config.fromfile(str(CONFIGS / CONFIG_NAME))
    default = count_params(build_model(cfg))
    cfg.merge_from_dict({'model.backbone.stage_channels': [16, 32, 96], 'model.head.in_channels':
                         96})
    trained = count_params(build_model(cfg))
    assert trained != default
    dumped = tmp_path / 'dumped.py'
    cfg.dump(str(dumped))
    options = ['--cfg-options', 'model.backbone.stage_channels=[16,32,96]',
               'model.head.in_channels=96']
    proc = run_job({**checkout, 'DUMPED_CONFIG': str(dumped)}, options)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f'parameters: {trained:,}\n' in proc.stdout, proc.stdout
    assert 'top-1 accuracy 88.50%' in proc.stdout
    assert Path(checkout['FAKE_LOG']).read_text().split() == [
        'tools/train.py', f'configs/{CONFIG_NAME}', '--work-dir', checkout['WORK_DIR'], *options]


def test_a_second_run_moves_the_earlier_run_aside(checkout: Dict[str, str],
                                                  tmp_path: Path) -> None:
    """tools/train.py refuses a new run where checkpoints are, so the job moves the earlier
    run to WORK_DIR.<UTC time> and says so; both keep their results. (The real job once is
    tests/test_training.py::test_main_job_end_to_end.)"""
    env = {**checkout, 'DUMPED_CONFIG': dumped_config(tmp_path), 'FAKE_SUMMARY': 'summary'}
    work_dir = Path(env['WORK_DIR'])
    first = run_job(env, [])
    assert first.returncode == 0 and 'moved it aside' not in first.stderr, first.stderr
    second = run_job(env, [])
    assert second.returncode == 0, second.stderr
    (aside, ) = tmp_path.glob('main_job.*')
    assert re.fullmatch(r'main_job\.\d{8}T\d{6}Z', aside.name), aside
    assert (f'run_main_job.sh: {work_dir} holds an earlier run (its checkpoints); moved it aside '
            f'to {aside} so that this run starts afresh (pass --resume to continue that run '
            'instead)') in second.stderr, second.stderr
    for folder in (aside, work_dir):
        assert (folder / 'epoch_1.pth').is_file() and (folder / 'test_metrics.json').is_file()
    assert (work_dir / 'last_checkpoint').read_text() == str(work_dir / 'epoch_1.pth')
    # --resume continues the earlier run: nothing is moved
    resumed = run_job(env, ['--resume'])
    assert resumed.returncode == 0 and 'moved it aside' not in resumed.stderr
    assert list(tmp_path.glob('main_job.*')) == [aside]


def test_a_running_job_s_work_dir_is_not_moved(checkout: Dict[str, str],
                                               tmp_path: Path) -> None:
    """While a run holds the work_dir's lock (mmpoly.engine.RunLock), the job leaves the folder
    where it is, and tools/train.py refuses to start there (the fake train.py only records that
    it was called)."""
    from mmpoly.engine.run_lock import LOCK_FILENAME
    env = {**checkout, 'DUMPED_CONFIG': dumped_config(tmp_path), 'FAKE_SUMMARY': 'summary'}
    work_dir = Path(env['WORK_DIR'])
    assert run_job(env, []).returncode == 0
    with open(work_dir / LOCK_FILENAME, 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a live run holds it
        proc = run_job(env, [])
    assert proc.returncode == 0 and 'moved it aside' not in proc.stderr, proc.stderr
    assert list(tmp_path.glob('main_job.*')) == []
    assert len(Path(env['FAKE_LOG']).read_text().splitlines()) == 2
