#!/usr/bin/env bash
# The main job: set everything up (if not done yet), train a degree-2 PDC-ResNet on the embedded
# Fashion-MNIST data (4 epochs), evaluate the final checkpoint on the full 10k test set with
# tools/test.py, draw the training curves (loss, learning rate, validation accuracy) to
# $WORK_DIR/curves.png with tools/analysis_tools/plot_curves.py, and print the accuracy, the
# parameter count and the curve's path.
#
#   WORK_DIR  where logs and checkpoints go (default: work_dirs/main_job)
#   Extra arguments go to tools/train.py (e.g. --cfg-options train_cfg.max_epochs=1); not
#   --work-dir (nor --cfg-options work_dir=...): the job reads the checkpoint, the metrics and
#   the logs from $WORK_DIR, so it is refused, with a hint to set WORK_DIR instead.
#   The parameter count is that of the config the run dumped into $WORK_DIR (its --cfg-options
#   included).
#
# Run again: tools/train.py refuses a new run in a work_dir that holds an earlier run's
# checkpoints, so without --resume an earlier run in $WORK_DIR (its *.pth or last_checkpoint) is
# moved aside to $WORK_DIR.<UTC time, e.g. 20260101T120000Z> first, and a line on stderr says so.
# With --resume the run in $WORK_DIR is continued instead. A work_dir in use by a live training
# run is left where it is (tools/train.py then names that run).
set -euo pipefail
# The work_dir is $WORK_DIR: train.py's --work-dir (or an abbreviation argparse takes, --work
# ...) or a work_dir option would train elsewhere while this script reads $WORK_DIR (failing,
# or with --resume reporting an older run there). Refused before anything is set up.
for arg in "$@"; do
    case "${arg%%=*}" in
        --w|--wo|--wor|--work|--work-|--work-d|--work-di|--work-dir|work_dir)
            echo "run_main_job.sh: error: '$arg': the main job's work_dir is \$WORK_DIR (default" \
                "work_dirs/main_job), where it reads the checkpoint and the logs back; set" \
                "WORK_DIR=DIR instead, e.g. WORK_DIR=DIR bash tools/run_main_job.sh" >&2
            exit 2 ;;
    esac
done
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$REPO/tools/setup_env.sh"
PY="${MMPOLY_VENV:-$REPO/.venv}/bin/python"
CONFIG=configs/pdc_resnet8-w16_1xb256-4e_fashion-mnist.py
WORK_DIR="${WORK_DIR:-work_dirs/main_job}"
while [ "$WORK_DIR" != / ] && [ "${WORK_DIR%/}" != "$WORK_DIR" ]; do WORK_DIR="${WORK_DIR%/}"; done
cd "$REPO"

# Move an earlier run aside (see above).
resume=0
for arg in "$@"; do
    case "$arg" in --resume|--resume=*) resume=1 ;; esac
done
earlier_run() {  # whether $1 holds checkpoints: *.pth files or last_checkpoint
    [ -f "$1/last_checkpoint" ] && return 0
    compgen -G "$1/*.pth" >/dev/null
}
in_use() {  # whether a live training run holds the lock of work_dir $1 (mmpoly.engine.RunLock)
    [ -f "$1/.mmpoly-run.lock" ] || return 1
    ! "$PY" -c 'import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)' "$1/.mmpoly-run.lock" 2>/dev/null
}
if [ "$resume" = 0 ] && [ -d "$WORK_DIR" ] && earlier_run "$WORK_DIR" && ! in_use "$WORK_DIR"; then
    stamp="$(date -u +%Y%m%dT%H%M%SZ)"
    aside="$WORK_DIR.$stamp"
    n=1
    while [ -e "$aside" ]; do aside="$WORK_DIR.$stamp-$n"; n=$((n + 1)); done
    mv -T "$WORK_DIR" "$aside"
    echo "run_main_job.sh: $WORK_DIR holds an earlier run (its checkpoints); moved it aside to" \
        "$aside so that this run starts afresh (pass --resume to continue that run instead)" >&2
fi

start=$(date +%s)
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK_DIR" "$@"
trained=$(date +%s)
CKPT="$(cat "$WORK_DIR/last_checkpoint")"
"$PY" tools/test.py "$CONFIG" "$CKPT" --work-dir "$WORK_DIR" --out "$WORK_DIR/test_metrics.json" \
    --out-item metrics
end=$(date +%s)
# The curves next to the checkpoint; a failed plot is reported but does not hide the accuracy.
CURVES="$WORK_DIR/curves.png"
CURVES_OK=1
"$PY" tools/analysis_tools/plot_curves.py "$WORK_DIR" --out "$CURVES" \
    --title "main job: $(basename "$CONFIG" .py)" \
    || { CURVES="not written (plot_curves.py failed, see above)"; CURVES_OK=0; }

# The parameters of the model as trained: the config mmengine's Runner dumped into the work_dir
# (Runner.dump_config: <work_dir>/<config file name>), with the --cfg-options of this run.
TRAINED_CONFIG="$WORK_DIR/$(basename "$CONFIG")"
if [ ! -f "$TRAINED_CONFIG" ]; then
    echo "run_main_job.sh: $TRAINED_CONFIG (the config the run dumped) is missing; counting the" \
        "parameters of $CONFIG without this run's --cfg-options" >&2
    TRAINED_CONFIG="$CONFIG"
fi
"$PY" - "$CONFIG" "$TRAINED_CONFIG" "$WORK_DIR/test_metrics.json" "$((trained - start))" \
    "$((end - trained))" "$CURVES" <<'PY'
import json
import sys

from mmengine.config import Config

from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import count_params, build_model

config, trained_config, metrics_file, train_s, test_s, curves = sys.argv[1:]
register_all_modules()
metrics = json.load(open(metrics_file))
params = count_params(build_model(Config.fromfile(trained_config)))
print('=' * 72)
print(f'main job: {config}')
print(f'Fashion-MNIST test set (10,000 images): top-1 accuracy {metrics["accuracy/top1"]:.2f}%')
print(f'parameters: {params:,}')
print(f'time: training {int(train_s) / 60:.1f} min, testing {int(test_s)} s')
print(f'curves (loss, lr, accuracy): {curves}')
print('=' * 72)
PY
# The accuracy is printed either way; the job still fails if its curves could not be drawn.
[ "$CURVES_OK" = 1 ]
