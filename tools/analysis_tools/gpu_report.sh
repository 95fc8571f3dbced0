#!/usr/bin/env bash
# The GPU report: one prepared run on one GPU (at most --budget-s seconds, 540 by default) that
#   1. installs mmcv 2.1.0 with CUDA ops (tools/build_mmcv.sh; offline from --wheelhouse; the
#      wheel prebuilt in DIR/built if there is one: building takes about 70 core-minutes) and
#      checks nms / batched_nms / RoIAlign on CUDA against the CPU;
#   2. runs the benchmark presets gpu-* (tools/analysis_tools/benchmark.py) compiled (targets
#      checked), with CUDA graphs and eager, in fp32 and bf16 AMP, and one Mask R-CNN training
#      step with ResNet18 against PDC-ResNet18, each run with --profile (kernels per step and
#      how busy the GPU is);
#   3. trains Mask R-CNN PDC-ResNet18 on the offline Fashion-COCO set for a few hundred
#      iterations and evaluates COCO bbox / segm AP with tools/test.py;
# and writes everything to OUT/report.json (rewritten after every step, atomically) and
# OUT/gpu_report.log. tools/analysis_tools/gpu_tables.py turns report.json into the docs' tables.
#
# The steps run in the order of what matters most, so that a budget that runs out skips the
# least: the compiled targets of gpu-in1k-pdc, gpu-cifar-pdc-comp and gpu-in1k-pdc-cmp (fp32,
# bf16), the Mask R-CNN step (fp32), the Fashion-COCO training and its AP, PDC-ResNet18 and
# PDC-comp with CUDA graphs (fp32, bf16, fp32 channels-last), PDC-cmp with CUDA graphs, compiled
# bf16 channels-last, PDC-ResNet18 with cuDNN's benchmark mode, then the eager figures (the
# float16 Mask R-CNN step among them), the float16 compiled Mask R-CNN step, the rest of CUDA
# graphs, channels-last and cuDNN benchmark, and gpu-cifar100-families. Before each group of timed
# compiled runs, one step (warm_compile) runs the same commands once each, several at a time,
# so that torch.compile's on-disk cache holds their graphs: the timed runs then load them
# instead of compiling one after another (compiling is CPU work, and the cores are many).
#
#   tools/analysis_tools/gpu_report.sh [--device cuda|cpu] [--out DIR] [--wheelhouse DIR]
#                                      [--fashion-mnist DIR] [--budget-s SECONDS] [--quick]
#                                      [--save-wheel DIR] [--resume]
#
#   --device cpu   a dry run of the machinery on the CPU: tiny sizes and iterations, the
#                  installed mmcv (no build), the same report (its figures mean nothing)
#   --out          default benchmarks/gpu/reports/<UTC date> (--device cpu: work_dirs/gpu_report_cpu)
#   --wheelhouse   the folder tools/build_mmcv.sh --download filled (mmcv sdist, wheels); with
#                  it the set-up needs no package index. A wheel built here is cached in
#                  DIR/built and reused by the next run that carries DIR.
#   --fashion-mnist  the folder of the four Fashion-MNIST *-ubyte(.gz) files the Fashion-COCO
#                  set is drawn from (default /usr/share/datasets/fashion-mnist, where Debian's
#                  dataset-fashion-mnist puts them; a GPU image seldom has them: carry them).
#                  Checked before anything runs.
#   --budget-s     steps that would start after this many seconds are recorded as skipped and
#                  each step is stopped at the budget's end (default 540)
#   --quick        one preset, two runs of it and one detector run (the CPU test uses it)
#   --save-wheel   copy the mmcv wheel built from --wheelhouse (and build_time.txt) there
#   --resume       OUT already holds a report.json: keep the steps it completed and run the
#                  others (same device, torch and CUDA; the mmcv install always runs). Without
#                  it, an OUT with a report.json is refused.
#   --remove-transformers   pip-uninstall transformers first (a disposable machine only):
#                  mmpretrain 1.2 imports its multimodal models whenever transformers >= 4.28 is
#                  installed, and they fail with transformers 5; mmpoly needs none
#
# Environment: WARM_JOBS, the compile warm-up's processes at a time (default: cores / 2, 1 to 8).
# With --device cuda the stack is installed into $PYTHON (default python3, the one with torch);
# with --device cpu it runs the Python tools/select_python.sh picks (as tools/dist_train.sh).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FASHION_MNIST=/usr/share/datasets/fashion-mnist
DEVICE=cuda OUT_DIR="" WHEELHOUSE="" BUDGET_S=540 QUICK=0 SAVE_WHEEL="" NO_TRANSFORMERS=0 RESUME=0
while [ $# -gt 0 ]; do
    case "$1" in
        --device) DEVICE="$2"; shift 2 ;;
        --out) OUT_DIR="$2"; shift 2 ;;
        --wheelhouse) WHEELHOUSE="$(cd "$2" && pwd)"; shift 2 ;;
        --budget-s) BUDGET_S="$2"; shift 2 ;;
        --fashion-mnist) FASHION_MNIST="$(cd "$2" 2>/dev/null && pwd || echo "$2")"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --save-wheel) SAVE_WHEEL="$2"; shift 2 ;;
        --remove-transformers) NO_TRANSFORMERS=1; shift ;;
        --resume) RESUME=1; shift ;;
        -h|--help) sed -n '2,/^# With --device cuda/p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$DEVICE" in cuda|cpu) ;; *) echo "error: --device must be cuda or cpu, got '$DEVICE'" >&2; exit 2 ;; esac
case "$BUDGET_S" in ''|*[!0-9]*) echo "error: --budget-s must be a whole number of seconds, got '$BUDGET_S'" >&2; exit 2 ;; esac
case "${WARM_JOBS:-1}" in ''|*[!0-9]*|0) echo "error: WARM_JOBS must be a positive whole number, got '${WARM_JOBS}'" >&2; exit 2 ;; esac
if [ -z "$OUT_DIR" ]; then  # a CPU dry run's figures mean nothing: not under benchmarks/
    OUT_DIR="$REPO/benchmarks/gpu/reports/$(date -u +%Y-%m-%d)"
    [ "$DEVICE" = cuda ] || OUT_DIR="$REPO/work_dirs/gpu_report_cpu"
fi
if [ -f "$OUT_DIR/report.json" ] && [ "$RESUME" = 0 ]; then
    echo "error: $OUT_DIR already holds a report.json: pass --resume to keep the steps it" \
        "completed and run the others, or choose another --out" >&2
    exit 2
fi
if [ "$RESUME" = 1 ] && [ ! -f "$OUT_DIR/report.json" ]; then
    echo "error: --resume: $OUT_DIR has no report.json to resume" >&2
    exit 2
fi
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
PARTS="$(mktemp -d)"
trap 'rm -rf "$PARTS"' EXIT
LOG="$OUT_DIR/gpu_report.log"
[ "$RESUME" = 1 ] || : >"$LOG"
START=$(date +%s)
cd "$REPO"

say() { printf '[gpu_report %s +%ss] %s\n' "$(date -u +%H:%M:%S)" "$(( $(date +%s) - START ))" "$*" | tee -a "$LOG" >&2; }

# The Python to run: on CUDA the one with the machine's torch; on the CPU the one
# tools/select_python.sh picks ($PYTHON, $MMPOLY_VENV, .venv, python), as tools/dist_train.sh.
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
    TOOLS_DIR="$REPO/tools"
    source "$TOOLS_DIR/select_python.sh"
    PY="$PYTHON"
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
GEN=("$PY" "$REPO/tools/analysis_tools/gpu_tables.py")

# --resume: the completed steps of OUT/report.json are restored as this run's records; DONE
# holds their names, PREV_S the seconds the earlier runs took.
declare -A DONE=()
PREV_S=0
if [ "$RESUME" = 1 ]; then
    mapfile -t RESTORED < <("${GEN[@]}" restore "$OUT_DIR/report.json" "$PARTS" --device "$DEVICE")
    [ "${#RESTORED[@]}" -gt 0 ] || { say "error: --resume: could not restore $OUT_DIR/report.json"; exit 2; }
    PREV_S="${RESTORED[0]}"
    for name in "${RESTORED[@]:1}"; do DONE[$name]=1; done
    say "resuming $OUT_DIR/report.json: ${#DONE[@]} completed steps kept (${PREV_S} s)"
fi
# The Fashion-COCO step's source images, checked now rather than minutes into the run.
if [ -z "${DONE[fashion_coco]:-}" ]; then
    for name in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
                t10k-labels-idx1-ubyte; do
        if [ ! -f "$FASHION_MNIST/$name.gz" ] && [ ! -f "$FASHION_MNIST/$name" ]; then
            say "error: --fashion-mnist: $FASHION_MNIST has no $name(.gz); the Fashion-COCO" \
                "step needs the four Fashion-MNIST files: apt-get install dataset-fashion-mnist," \
                "or copy /usr/share/datasets/fashion-mnist/*.gz from a machine that has them" \
                "into a folder that travels with the run and pass it as --fashion-mnist DIR"
            exit 2
        fi
    done
fi
elapsed() { echo $(( PREV_S + $(date +%s) - START )); }

# step NAME COMMAND...: run it under the remaining budget, log its output, record its status,
# seconds and (if it wrote one) its JSON part; then rewrite report.json. A step that a resumed
# report completed is not run again. step_start NAME COMMAND... starts one in the background
# (its output goes to the log when it ends) and step_wait NAME waits for it and records it.
declare -A BG_PID=() BG_T0=()
step() {
    if step_start "$@"; then step_wait "$1" foreground; fi
}
step_start() {
    local name="$1" left
    shift
    if [ -n "${DONE[$name]:-}" ]; then
        say "$name: completed in the resumed report"
        return 1
    fi
    left=$(( BUDGET_S - ($(date +%s) - START) ))
    if [ "$left" -le 5 ]; then
        say "$name: skipped (budget of $BUDGET_S s spent)"
        "${GEN[@]}" part "$PARTS" "$name" --status skipped --seconds 0
        collect
        return 1
    fi
    say "$name: $*"
    BG_T0[$name]=$(date +%s)
    timeout --kill-after=10 "$left" "$@" >"$PARTS/$name.log" 2>&1 &
    BG_PID[$name]=$!
}
step_wait() {  # NAME [foreground]
    local name="$1" rc=0 status=ok seconds
    [ -n "${BG_PID[$name]:-}" ] || return 0
    [ "${2:-}" = foreground ] || say "$name: waiting for it"
    wait "${BG_PID[$name]}" || rc=$?
    unset "BG_PID[$name]"
    cat "$PARTS/$name.log" >>"$LOG"
    if [ "$rc" = 1 ] && [ "${name%%:*}" = bench ] && [ -f "$PARTS/$name.json" ]; then
        status='targets missed'  # benchmark.py ran and wrote its results: exit 1 = a miss
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        status="failed (exit $rc, stopped at the budget)"
    elif [ "$rc" != 0 ]; then
        status="failed (exit $rc)"
    fi
    seconds=$(( $(date +%s) - ${BG_T0[$name]} ))
    say "$name: $status after $seconds s"
    "${GEN[@]}" part "$PARTS" "$name" --status "$status" --seconds "$seconds"
    collect
}
collect() {
    "${GEN[@]}" collect "$PARTS" --out "$OUT_DIR/report.json" --device "$DEVICE" \
        --budget-s "$BUDGET_S" --elapsed-s "$(elapsed)"
}

# 1. mmcv with CUDA ops and the stack (on the CPU: the installed ones), then what is installed.
# Both run again on --resume: a resumed run may be on a fresh machine.
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

# 2. Benchmarks, each named PRESET:PRECISION:MODE (PRESET mask-rcnn: one Mask R-CNN training
# step, PDC-ResNet18 against ResNet18; PRECISION fp32, bf16 or fp16 autocast; MODE eager,
# compiled, or cudagraphs: compiled with mode='reduce-overhead'; then -cl runs both models
# channels-last, --channels-last, classifiers only, and a last -cudnn --cudnn-benchmark, CUDA
# only). Tiny sizes on the CPU dry run.
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
# bench_command SPEC: sets CMD to the benchmark.py command of one benchmark step.
bench_command() {
    local preset="${1%%:*}" precision mode
    precision="$(echo "$1" | cut -d: -f2)"
    mode="${1##*:}"
    mode="${mode%-cudnn}"
    mode="${mode%-cl}"
    if [ "$preset" = mask-rcnn ]; then
        CMD=("${BENCH[@]}" configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py
             --baseline configs/mask-rcnn_resnet18_fpn_1x_coco.py "${DET_SIZE[@]}")
        [ "$mode" = eager ] || CMD+=(--compile "${COMPILED[@]}")
    else
        CMD=("${BENCH[@]}" --preset "$preset" "${SIZE[@]}")
        if [ "$mode" = eager ]; then CMD+=(--eager); else CMD+=("${COMPILED[@]}"); fi
    fi
    [ "$mode" != cudagraphs ] || CMD+=(--compile-mode reduce-overhead)
    case "$1" in *-cl|*-cl-cudnn) CMD+=(--channels-last) ;; esac
    # (cuDNN is CUDA's: the CPU dry run times these without it)
    if [ "${1%-cudnn}" != "$1" ] && [ "$DEVICE" = cuda ]; then CMD+=(--cudnn-benchmark); fi
    case "$precision" in
        bf16) CMD+=(--amp --amp-dtype bfloat16) ;;
        fp16) CMD+=(--amp --amp-dtype float16) ;;
    esac
}
# warm_start SPEC...: start the compile warm-up of those compiled runs not completed yet (in
# the background; WARM names it). timed SPEC...: wait for the warm-up, then time each run.
warm_start() {
    local spec warm=() cmd_dir i=0
    WARM_GROUP=$((WARM_GROUP + 1))
    WARM="warm_compile:$WARM_GROUP"
    cmd_dir="$PARTS/warm_compile_$WARM_GROUP"
    for spec in "$@"; do
        case "${spec##*:}" in eager|eager-*) continue ;; esac
        # The CPU dry run compiles with aot_eager, which caches nothing: its warm-up only
        # exercises the machinery, so it leaves out the detector (a 45-s compile on 2 cores)
        if [ "$DEVICE" = cpu ] && [ "${spec%%:*}" = mask-rcnn ]; then continue; fi
        if [ -z "${DONE[bench:$spec]:-}" ]; then warm+=("$spec"); fi
    done
    [ "${#warm[@]}" -gt 0 ] || return 0
    mkdir -p "$cmd_dir"
    for spec in "${warm[@]}"; do  # the timed command, once: one round of one iteration
        bench_command "$spec"
        printf '%s\0' "${CMD[@]}" --rounds 1 --iters 1 --warmup 1 --no-memory \
            --json "$cmd_dir/$i.json" >"$cmd_dir/$i.cmd"
        i=$((i + 1))
    done
    say "$WARM compiles ${warm[*]}, $WARM_JOBS at a time"
    step_start "$WARM" "${GEN[@]}" warm "$cmd_dir" --jobs "$WARM_JOBS" || true
}
timed() {
    local spec
    step_wait "$WARM"
    for spec in "$@"; do
        bench_command "$spec"
        step "bench:$spec" "${CMD[@]}" --profile --json "$PARTS/bench:$spec.json"
    done
}
WARM_GROUP=0 WARM=""
CORES="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"  # (nproc alone answers OMP_NUM_THREADS)
WARM_JOBS="${WARM_JOBS:-$(( CORES / 2 < 1 ? 1 : (CORES / 2 > 8 ? 8 : CORES / 2) ))}"

# The first H200 report (2026-11-28) found the compiled targets missed by as much as eager runs
# miss them (the time follows the operators per step, not the FLOPs). Its continuation
# (2026-12-04) found neither bf16 channels-last nor cuDNN's benchmark mode moving the compiled
# ratios (a compiled step keeps the GPU busy 30-54 % of the time), and CUDA graphs, measured
# by hand after a fix, making PDC's steps GPU-bound (PDC-comp 0.79x, PDC-ResNet18 0.59x fp32),
# with cuDNN's NCHW/NHWC conversions among PDC-comp's costliest kernels. So CUDA graphs come
# right after the compiled targets: fp32 and bf16, then channels-last (no conversions), then
# PDC-cmp; the other runs follow. The detector's half-precision steps run float16, what --amp
# gives on CUDA: mmcv 2.1.0 has no bfloat16 CUDA kernel for RoIAlign.
TARGETS=(gpu-in1k-pdc:fp32:compiled gpu-in1k-pdc:bf16:compiled
         gpu-cifar-pdc-comp:fp32:compiled gpu-cifar-pdc-comp:bf16:compiled
         gpu-in1k-pdc-cmp:fp32:compiled gpu-in1k-pdc-cmp:bf16:compiled
         mask-rcnn:fp32:eager mask-rcnn:fp32:compiled
         gpu-in1k-pdc:fp32:cudagraphs gpu-cifar-pdc-comp:fp32:cudagraphs
         gpu-in1k-pdc:bf16:cudagraphs gpu-cifar-pdc-comp:bf16:cudagraphs
         gpu-in1k-pdc:fp32:cudagraphs-cl gpu-cifar-pdc-comp:fp32:cudagraphs-cl
         gpu-in1k-pdc-cmp:fp32:cudagraphs gpu-in1k-pdc-cmp:bf16:cudagraphs
         gpu-in1k-pdc:bf16:compiled-cl gpu-cifar-pdc-comp:bf16:compiled-cl
         gpu-in1k-pdc:fp32:compiled-cudnn gpu-in1k-pdc:bf16:compiled-cl-cudnn)
# The eager figures need no compile warm-up: they run right after the targets, before the
# warm-up of the later compiled runs (which the CIFAR-100 families make long: 157 s and not
# done on 2026-11-28) rather than waiting behind it.
EAGER=(gpu-in1k-pdc:fp32:eager gpu-in1k-pdc:bf16:eager
       gpu-cifar-pdc-comp:fp32:eager gpu-cifar-pdc-comp:bf16:eager
       gpu-in1k-pdc-cmp:fp32:eager gpu-in1k-pdc-cmp:bf16:eager mask-rcnn:fp16:eager)
LATER=(mask-rcnn:fp16:compiled
       gpu-in1k-pdc:bf16:cudagraphs-cl gpu-cifar-pdc-comp:bf16:cudagraphs-cl
       gpu-in1k-pdc-cmp:bf16:compiled-cl
       gpu-in1k-pdc:fp32:compiled-cl gpu-in1k-pdc:bf16:eager-cl
       gpu-cifar-pdc-comp:fp32:compiled-cudnn gpu-in1k-pdc-cmp:fp32:compiled-cudnn
       gpu-cifar100-families:fp32:cudagraphs gpu-cifar100-families:bf16:cudagraphs
       gpu-cifar100-families:fp32:compiled gpu-cifar100-families:bf16:compiled
       gpu-cifar100-families:fp32:eager gpu-cifar100-families:bf16:eager)
if [ "$QUICK" = 1 ]; then  # (a detector's bf16 step stops in mmcv's CPU nms: no bf16 kernel)
    TARGETS=(gpu-in1k-pdc:fp32:compiled mask-rcnn:fp32:compiled); EAGER=(gpu-in1k-pdc:bf16:eager-cl)
    LATER=()
fi
# The warm-up of the targets' compiled runs is CPU work: the Fashion-COCO training (GPU work, not
# a timing) runs beside it.
warm_start "${TARGETS[@]}"

# Mask R-CNN PDC-ResNet18 on Fashion-COCO: a few hundred iterations (random backbone init: no
# ImageNet checkpoint travels), then COCO AP on its validation images. Resumed only as a whole
# (the data and the checkpoint live in this run's temporary folder).
COCO="$PARTS/fashion_coco"
if [ "$DEVICE" = cpu ]; then  # the detector tests' CPU sizes: 128×160, and the RoIs and
    # proposals of the short detection protocol (tools/detection_protocol.py's
    # fewer_rois_options with its det_rois; test_cpu_dry_run checks)
    NUM=(--train 4 --val 2 --image-size 128 160); EPOCHS=1
    LOADERS=(train_dataloader.num_workers=0 train_dataloader.persistent_workers=False
             val_dataloader.num_workers=0 val_dataloader.persistent_workers=False
             test_dataloader.num_workers=0 test_dataloader.persistent_workers=False)
    CPU_SIZES=(model.train_cfg.rcnn.sampler.num=16 model.train_cfg.rpn_proposal.max_per_img=300)
else
    NUM=(--train 512 --val 64); EPOCHS=2; LOADERS=(); CPU_SIZES=()
fi
DET_CFG="$COCO/mask-rcnn_pdc-resnet18_fpn_1x_fashion-coco.py"
step fashion_coco "$PY" tools/dataset_converters/make_fashion_coco.py "$COCO" "${NUM[@]}" \
    --fashion-mnist-root "$FASHION_MNIST" --configs configs/mask-rcnn_pdc-resnet18_fpn_1x_coco.py
step finetune "$PY" tools/train.py "$DET_CFG" --work-dir "$PARTS/finetune" --cfg-options \
    model.backbone.init_cfg=None "train_cfg.max_epochs=$EPOCHS" "train_cfg.val_interval=$EPOCHS" \
    param_scheduler.0.end=50 default_hooks.logger.interval=20 "${LOADERS[@]}" \
    "${CPU_SIZES[@]}"
CKPT="$(cat "$PARTS/finetune/last_checkpoint" 2>/dev/null || echo "$PARTS/finetune/no_checkpoint")"
step finetune_eval "$PY" tools/test.py "$DET_CFG" "$CKPT" --work-dir "$PARTS/finetune_test" \
    --out "$PARTS/finetune_eval.json" --out-item metrics ${LOADERS[@]:+--cfg-options "${LOADERS[@]}"}

# 3. The targets, timed once the warm-up is done.
timed "${TARGETS[@]}"

# 3b. The convolutions alone, shape by shape, channels-last as the compiled graphs lay them out
# (conv_shapes.py): whether PDC's kernel time (8.4 against ResNet18's 4.7 ms a step with CUDA
# graphs on 2026-12-04) is in its convolutions, and in which shapes (its widths of 15 to 480).
CONVS=(gpu-in1k-pdc:fp32 gpu-in1k-pdc:bf16 gpu-cifar-pdc-comp:fp32 gpu-in1k-pdc-cmp:fp32)
if [ "$DEVICE" = cpu ]; then
    CONV_SIZE=(--device cpu --batch-size 2 --input-size 32 32 --min-run-time 0.01)
else
    CONV_SIZE=()
fi
[ "$QUICK" = 0 ] || CONVS=(gpu-in1k-pdc:fp32)
for spec in "${CONVS[@]}"; do
    DTYPE=(); [ "${spec##*:}" != bf16 ] || DTYPE=(--dtype bfloat16)
    step "convs:$spec" "$PY" tools/analysis_tools/conv_shapes.py --preset "${spec%%:*}" \
        --channels-last "${CONV_SIZE[@]}" "${DTYPE[@]}" --json "$PARTS/convs:$spec.json"
done

# 4. The eager figures beside them (no warm-up: nothing to compile), then the float16 compiled
# detector step, the rest of CUDA graphs, channels-last and cuDNN benchmark, the CIFAR-100
# families.
timed "${EAGER[@]}"
warm_start "${LATER[@]}"
timed "${LATER[@]}"

"${GEN[@]}" tables "$OUT_DIR/report.json" --out "$OUT_DIR/tables.md"
say "done: $OUT_DIR/report.json, $OUT_DIR/tables.md, $LOG"
