#!/usr/bin/env bash
# The GPU report: one prepared run (about 9 minutes on one H100 / H200) that
#   1. installs mmcv 2.1.0 with CUDA ops (tools/build_mmcv.sh; offline from --wheelhouse) and
#      checks nms / batched_nms / RoIAlign on CUDA against the CPU;
#   2. runs the benchmark presets gpu-* (tools/analysis_tools/benchmark.py) compiled (targets
#      checked) and eager, in fp32 and bf16 AMP, and one Mask R-CNN training step with
#      ResNet18 against PDC-ResNet18;
#   3. trains Mask R-CNN PDC-ResNet18 on the offline Fashion-COCO set for a few hundred
#      iterations and evaluates COCO bbox / segm AP with tools/test.py;
# and writes everything to OUT/report.json (rewritten after every step, atomically) and
# OUT/gpu_report.log. tools/analysis_tools/gpu_tables.py turns report.json into the docs' tables.
#
#   tools/analysis_tools/gpu_report.sh [--device cuda|cpu] [--out DIR] [--wheelhouse DIR]
#                                      [--budget-s SECONDS] [--quick] [--save-wheel DIR]
#
#   --device cpu   a dry run of the machinery on the CPU: tiny sizes and iterations, the
#                  installed mmcv (no build), the same report (its figures mean nothing)
#   --out          default benchmarks/gpu/reports/<UTC date> (--device cpu: work_dirs/gpu_report_cpu)
#   --wheelhouse   the folder tools/build_mmcv.sh --download filled (mmcv sdist, wheels); with
#                  it the set-up needs no package index. A wheel built here is cached in
#                  DIR/built and reused by the next run that carries DIR.
#   --budget-s     steps that would start after this many seconds are recorded as skipped and
#                  each step is stopped at the budget's end (default 540)
#   --quick        one preset, two runs of it and one detector run (the CPU test uses it)
#   --save-wheel   copy the mmcv wheel built from --wheelhouse (and build_time.txt) there
#   --remove-transformers   pip-uninstall transformers first (a disposable machine only):
#                  mmpretrain 1.2 imports its multimodal models whenever transformers >= 4.28 is
#                  installed, and they fail with transformers 5; mmpoly needs none
#
# With --device cuda the stack is installed into $PYTHON (default python3, the one with torch).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEVICE=cuda OUT_DIR="" WHEELHOUSE="" BUDGET_S=540 QUICK=0 SAVE_WHEEL="" NO_TRANSFORMERS=0
while [ $# -gt 0 ]; do
    case "$1" in
        --device) DEVICE="$2"; shift 2 ;;
        --out) OUT_DIR="$2"; shift 2 ;;
        --wheelhouse) WHEELHOUSE="$(cd "$2" && pwd)"; shift 2 ;;
        --budget-s) BUDGET_S="$2"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --save-wheel) SAVE_WHEEL="$2"; shift 2 ;;
        --remove-transformers) NO_TRANSFORMERS=1; shift ;;
        -h|--help) sed -n '2,/^# With --device cuda/p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$DEVICE" in cuda|cpu) ;; *) echo "error: --device must be cuda or cpu, got '$DEVICE'" >&2; exit 2 ;; esac
case "$BUDGET_S" in ''|*[!0-9]*) echo "error: --budget-s must be a whole number of seconds, got '$BUDGET_S'" >&2; exit 2 ;; esac
if [ -z "$OUT_DIR" ]; then  # a CPU dry run's figures mean nothing: not under benchmarks/
    OUT_DIR="$REPO/benchmarks/gpu/reports/$(date -u +%Y-%m-%d)"
    [ "$DEVICE" = cuda ] || OUT_DIR="$REPO/work_dirs/gpu_report_cpu"
fi
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
PARTS="$(mktemp -d)"
trap 'rm -rf "$PARTS"' EXIT
LOG="$OUT_DIR/gpu_report.log"
: >"$LOG"
START=$(date +%s)
cd "$REPO"

say() { printf '[gpu_report %s +%ss] %s\n' "$(date -u +%H:%M:%S)" "$(( $(date +%s) - START ))" "$*" | tee -a "$LOG" >&2; }

# The Python to run: on CUDA the one with the machine's torch; on the CPU the repo's venv.
if [ "$DEVICE" = cuda ]; then
    PY="${PYTHON:-python3}"
    if "$PY" -m pip show -q transformers >/dev/null 2>&1; then
        if [ "$NO_TRANSFORMERS" = 1 ]; then
            say "uninstalling transformers (--remove-transformers)"
            "$PY" -m pip uninstall -y -q transformers
        else
            say "error: transformers is installed in $PY's environment: mmpretrain 1.2 then" \
                "imports its multimodal models, which fail with transformers 5. Use an" \
                "environment without it, or pass --remove-transformers on a disposable machine."
            exit 2
        fi
    fi
else
    PY="${PYTHON:-$REPO/.venv/bin/python}"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
GEN=("$PY" "$REPO/tools/analysis_tools/gpu_tables.py")

# step NAME COMMAND...: run it under the remaining budget, log its output, record its status,
# seconds and (if it wrote one) its JSON part; then rewrite report.json.
step() {
    local name="$1" left rc=0 t0
    shift
    left=$(( BUDGET_S - ($(date +%s) - START) ))
    if [ "$left" -le 5 ]; then
        say "$name: skipped (budget of $BUDGET_S s spent)"
        "${GEN[@]}" part "$PARTS" "$name" --status skipped --seconds 0
    else
        say "$name: $*"
        t0=$(date +%s)
        timeout --kill-after=10 "$left" "$@" >>"$LOG" 2>&1 || rc=$?
        local status=ok
        if [ "$rc" = 1 ] && [ "${name%%:*}" = bench ] && [ -f "$PARTS/$name.json" ]; then
            status='targets missed'  # benchmark.py ran and wrote its results: exit 1 = a miss
        elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            status="failed (exit $rc, stopped at the budget)"
        elif [ "$rc" != 0 ]; then
            status="failed (exit $rc)"
        fi
        say "$name: $status after $(( $(date +%s) - t0 )) s"
        "${GEN[@]}" part "$PARTS" "$name" --status "$status" --seconds "$(( $(date +%s) - t0 ))"
    fi
    "${GEN[@]}" collect "$PARTS" --out "$OUT_DIR/report.json" --device "$DEVICE" \
        --budget-s "$BUDGET_S" --elapsed-s "$(( $(date +%s) - START ))"
}

# 1. mmcv with CUDA ops and the stack (on the CPU: the installed ones), then what is installed.
BUILT="${WHEELHOUSE:+$WHEELHOUSE/built}"
if [ "$DEVICE" = cuda ]; then
    LINKS=(); [ -z "$WHEELHOUSE" ] || LINKS=(--find-links "$WHEELHOUSE")
    step mmcv env MMPOLY_WHEELS="$BUILT" PYTHON="$PY" bash tools/build_mmcv.sh --stack "${LINKS[@]}"
    if [ -n "$SAVE_WHEEL" ] && [ -n "$BUILT" ]; then
        mkdir -p "$SAVE_WHEEL"
        cp "$BUILT"/mmcv-*.whl "$BUILT"/build_time.txt "$SAVE_WHEEL/" 2>/dev/null \
            || say "--save-wheel: no built wheel in $BUILT to save"
    fi
fi
step mmcv_check "${GEN[@]}" mmcv "$PARTS/mmcv_check.json" ${BUILT:+--build-time "$BUILT/build_time.txt"}

# 2. Benchmarks. Tiny sizes on the CPU dry run.
BENCH=("$PY" tools/analysis_tools/benchmark.py)
if [ "$DEVICE" = cpu ]; then
    SIZE=(--device cpu --batch-size 2 --input-size 32 32 --rounds 1 --iters 1 --warmup 1 --no-memory)
    DET_SIZE=(--device cpu --batch-size 1 --input-size 128 128 --rounds 1 --iters 1 --warmup 1 --no-memory)
    COMPILED=(--compile-backend aot_eager)  # the same graphs, no code generation: a dry run
else
    SIZE=(--threads 8)
    DET_SIZE=(--device cuda --batch-size 2 --input-size 512 512 --rounds 3 --iters 5 --warmup 2 --threads 8)
    COMPILED=()
fi
PRESETS=(gpu-in1k-pdc gpu-cifar-pdc-comp gpu-in1k-pdc-cmp gpu-cifar100-families)
RUNS=(fp32:compiled bf16:compiled fp32:eager bf16:eager)  # the targets first, eager beside them
DET_RUNS=(fp32:eager fp32:compiled bf16:eager bf16:compiled)
if [ "$QUICK" = 1 ]; then  # (a detector's bf16 step stops in mmcv's CPU nms: no bf16 kernel)
    PRESETS=(gpu-in1k-pdc); RUNS=(fp32:compiled bf16:eager); DET_RUNS=(fp32:compiled)
fi
amp_of() { [ "${1%%:*}" = bf16 ] && echo --amp --amp-dtype bfloat16 || true; }
for preset in "${PRESETS[@]}"; do
    for run in "${RUNS[@]}"; do
        mode=(--eager); [ "${run#*:}" = compiled ] && mode=("${COMPILED[@]}")
        # shellcheck disable=SC2046
        step "bench:$preset:$run" "${BENCH[@]}" --preset "$preset" "${SIZE[@]}" $(amp_of "$run") \
            "${mode[@]}" --json "$PARTS/bench:$preset:$run.json"
    done
    if [ "$preset" = gpu-in1k-pdc ]; then  # one Mask R-CNN training step, right after it
        for run in "${DET_RUNS[@]}"; do
            mode=(); [ "${run#*:}" = compiled ] && mode=(--compile "${COMPILED[@]}")
            # shellcheck disable=SC2046
            step "bench:mask-rcnn:$run" "${BENCH[@]}" configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py \
                --baseline configs/mask-rcnn_resnet18_fpn_1x_coco.py "${DET_SIZE[@]}" \
                $(amp_of "$run") "${mode[@]}" --json "$PARTS/bench:mask-rcnn:$run.json"
        done
    fi
done

# 3. Mask R-CNN PDC-ResNet18 on Fashion-COCO: a few hundred iterations (random backbone init:
# no ImageNet checkpoint travels), then COCO AP on its validation images.
COCO="$PARTS/fashion_coco"
if [ "$DEVICE" = cpu ]; then
    NUM=(--train 4 --val 2); EPOCHS=1
    LOADERS=(train_dataloader.num_workers=0 train_dataloader.persistent_workers=False
             val_dataloader.num_workers=0 val_dataloader.persistent_workers=False
             test_dataloader.num_workers=0 test_dataloader.persistent_workers=False)
else
    NUM=(--train 512 --val 64); EPOCHS=2; LOADERS=()
fi
DET_CFG="$COCO/mask-rcnn_pdc-resnet18_fpn_1x_fashion-coco.py"
step fashion_coco "$PY" tools/dataset_converters/make_fashion_coco.py "$COCO" "${NUM[@]}" \
    --configs configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py
step finetune "$PY" tools/train.py "$DET_CFG" --work-dir "$PARTS/finetune" --cfg-options \
    model.backbone.init_cfg=None "train_cfg.max_epochs=$EPOCHS" "train_cfg.val_interval=$EPOCHS" \
    param_scheduler.0.end=50 default_hooks.logger.interval=20 "${LOADERS[@]}"
CKPT="$(cat "$PARTS/finetune/last_checkpoint" 2>/dev/null || echo "$PARTS/finetune/no_checkpoint")"
step finetune_eval "$PY" tools/test.py "$DET_CFG" "$CKPT" --work-dir "$PARTS/finetune_test" \
    --out "$PARTS/finetune_eval.json" --out-item metrics ${LOADERS[@]:+--cfg-options "${LOADERS[@]}"}

"${GEN[@]}" tables "$OUT_DIR/report.json" --out "$OUT_DIR/tables.md"
say "done: $OUT_DIR/report.json, $OUT_DIR/tables.md, $LOG"
