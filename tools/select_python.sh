# Sourced by tools/dist_train.sh, dist_test.sh, slurm_train.sh, slurm_test.sh and
# analysis_tools/gpu_report.sh (on the CPU): sets PYTHON to the interpreter they run, the first
# that applies of
#   1. PYTHON, if set;
#   2. $MMPOLY_VENV/bin/python, if MMPOLY_VENV is set (an error if it has no bin/python);
#   3. <repository>/.venv/bin/python, if it exists (where tools/setup_env.sh installs);
#   4. python on the PATH.
# Needs TOOLS_DIR (this file's folder).
if [ -z "${PYTHON:-}" ]; then
    if [ -n "${MMPOLY_VENV:-}" ]; then
        if [ ! -x "$MMPOLY_VENV/bin/python" ]; then
            echo "error: MMPOLY_VENV=$MMPOLY_VENV has no bin/python; set MMPOLY_VENV to a" \
                 "virtual environment made by tools/setup_env.sh, or PYTHON to an interpreter" >&2
            exit 2
        fi
        PYTHON="$MMPOLY_VENV/bin/python"
    elif [ -x "$TOOLS_DIR/../.venv/bin/python" ]; then
        PYTHON="$(cd "$TOOLS_DIR/.." && pwd)/.venv/bin/python"
    else
        PYTHON=python
    fi
fi
