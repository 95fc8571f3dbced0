#!/usr/bin/env bash
# Training on a SLURM cluster, one task per GPU:
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG [WORK_DIR] [train.py options]
# Environment: GPUS (8, tasks in all), GPUS_PER_NODE (8), CPUS_PER_TASK (5),
# GRES (gpu:$GPUS_PER_NODE; empty for CPU-only nodes), SRUN_ARGS (extra srun options),
# PYTHON (see below).
set -euo pipefail

if [ "$#" -lt 3 ]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG [WORK_DIR] [train.py options]" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
shift 3
WORK_DIR_ARGS=()
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then  # a 4th argument that is not an option
    WORK_DIR_ARGS=(--work-dir "$1")
    shift
fi
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
GRES=${GRES-gpu:$GPUS_PER_NODE}
SRUN_ARGS=${SRUN_ARGS:-}
TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# PYTHON if set, else $MMPOLY_VENV/bin/python, else <repo>/.venv/bin/python, else python
source "$TOOLS_DIR/select_python.sh"

GRES_ARGS=()
if [ -n "$GRES" ]; then
    GRES_ARGS=(--gres="$GRES")
fi

set -x
# SRUN_ARGS is split into words on purpose (several srun options in one variable).
# shellcheck disable=SC2086
PYTHONPATH="$TOOLS_DIR/..${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    ${GRES_ARGS[@]+"${GRES_ARGS[@]}"} \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    $SRUN_ARGS \
    "$PYTHON" -u "$TOOLS_DIR/train.py" "$CONFIG" \
    ${WORK_DIR_ARGS[@]+"${WORK_DIR_ARGS[@]}"} --launcher slurm "$@"
