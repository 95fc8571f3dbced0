"""tools/run_main_job.sh: a --work-dir among the extra arguments is refused (the job reads
$WORK_DIR back), and the parameter count is that of the config the run dumped (its --cfg-options
included).

The script runs from a copy of ``tools/`` whose ``setup_env.sh`` does nothing and whose Python
(``MMPOLY_VENV/bin/python``) fakes tools/train.py, tools/test.py and plot_curves.py (writing what
they would write) and runs everything else (the script's own Python snippets) with the real one.
"""
import os
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
#: dumped config, a checkpoint, last_checkpoint), tools/test.py the metrics file given with --out.
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
