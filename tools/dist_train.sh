#!/usr/bin/env bash
# Distributed training on one or more nodes with torchrun (mmpoly.utils.dist_run: torchrun whose
# report of a failed job is one line):
#   tools/dist_train.sh CONFIG NUM_PROCESSES [train.py options]
# Environment: NNODES (1), NODE_RANK (0), PORT (29500), MASTER_ADDR (127.0.0.1),
# PYTHON (see below). Without CUDA the processes use gloo on the CPU.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: $0 CONFIG NUM_PROCESSES [train.py options]" >&2
    exit 2
fi
CONFIG=$1
GPUS=$2
shift 2
if ! [[ "$GPUS" =~ ^[1-9][0-9]*$ ]]; then
    echo "$0: NUM_PROCESSES must be a whole number >= 1 (processes on this node), got '$GPUS'" >&2
    exit 2
fi
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# PYTHON if set, else $MMPOLY_VENV/bin/python, else <repo>/.venv/bin/python, else python
source "$TOOLS_DIR/select_python.sh"

PYTHONPATH="$TOOLS_DIR/..${PYTHONPATH:+:$PYTHONPATH}" \
exec "$PYTHON" -m mmpoly.utils.dist_run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --master_port="$PORT" \
    --nproc_per_node="$GPUS" \
    "$TOOLS_DIR/train.py" \
    "$CONFIG" \
    --launcher pytorch "$@"
