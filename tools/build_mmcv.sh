#!/usr/bin/env bash
# Build mmcv 2.1.0 with its compiled ops against the torch that is already installed (with CUDA
# when a GPU and nvcc are there), and install it with the OpenMMLab stack, online or offline.
#
#   tools/build_mmcv.sh                       build (or reuse the cached wheel) and install it
#   tools/build_mmcv.sh --find-links DIR      offline: the mmcv sdist and the pure-Python wheels
#                                             come from DIR (pip --no-index --find-links DIR)
#   tools/build_mmcv.sh --stack               also install mmengine, mmpretrain, mmdet and what
#                                             they need that is missing (with --find-links: offline)
#   tools/build_mmcv.sh --download DIR        on an online machine: fill DIR for an offline GPU
#                                             machine (Python $WHEEL_PYTHON, manylinux x86-64)
#   tools/build_mmcv.sh --print-plan          print what would be built (mode, archs, cache) only
#   tools/build_mmcv.sh --build-only          build the wheel (or find it cached) and print its
#                                             path; install nothing. With FORCE_CUDA=1 and
#                                             TORCH_CUDA_ARCH_LIST, a machine without a GPU
#                                             builds the CUDA wheel for a GPU machine with the
#                                             same Python and torch (its folder: MMPOLY_WHEELS)
#
# Environment:
#   PYTHON                 the interpreter whose torch is built against (default: python3)
#   FORCE_CUDA             1: CUDA ops (needs nvcc); 0: CPU ops only; unset: CUDA when torch sees
#                          a GPU (else CPU)
#   TORCH_CUDA_ARCH_LIST   e.g. "9.0" or "8.0;9.0" (default: the visible GPUs' capabilities)
#   CUDA_HOME              the CUDA toolkit holding bin/nvcc (else nvcc on PATH, /usr/local/cuda)
#   MAX_JOBS               parallel compile jobs (default: all cores this process may use; not
#                          OMP_NUM_THREADS, which GNU nproc would report instead)
#   MMCV_CXX_STD           c++17 / c++20 (default: what the installed torch's headers require)
#   MMPOLY_CACHE           wheel cache (default: ~/.cache/mmpoly); MMPOLY_WHEELS overrides the
#                          exact wheel folder
#
# Sourcing the file (`source tools/build_mmcv.sh`) defines the functions and runs nothing.
set -euo pipefail

MMCV_VERSION=2.1.0
#: Python 3.12 wheels a GPU machine with its own torch, numpy, scipy, matplotlib, opencv and
#: rich still needs for mmpoly (pinned; --no-deps, so mmengine's opencv-python requirement is
#: met by an installed opencv-python-headless instead of a 60 MB download).
OFFLINE_WHEELS=(mmengine==0.10.7 mmpretrain==1.2.0 mmdet==3.3.0 pycocotools==2.0.11
    shapely==2.2.0 addict==2.4.0 termcolor==3.3.0 yapf==0.43.0 platformdirs==4.14.8
    mat4py==0.6.0 modelindex==0.0.2 model-index==0.1.11 ordered-set==4.1.0
    terminaltables==3.1.10 importlib-metadata==10.2.0 lazy-importer==0.1.0)
WHEEL_PYTHON=3.12

bm_log() { printf '[build_mmcv %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
bm_die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# The cores this process may run on. GNU `nproc` answers OMP_NUM_THREADS (or OMP_THREAD_LIMIT)
# when set, which clusters and test runners often set to 1: a compile is not an OpenMP program.
cores() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }

# What the installed torch reports: "<torch version> <CUDA version or none> <GPU capabilities
# 'major.minor' separated by ';', or none>". Tests replace this function.
torch_probe() {
    "$PYTHON" - <<'PY'
import torch
cuda = torch.version.cuda or 'none'
caps = sorted({'%d.%d' % torch.cuda.get_device_capability(i)
               for i in range(torch.cuda.device_count())}) if torch.cuda.is_available() else []
print(torch.__version__, cuda, ';'.join(caps) or 'none')
PY
}

# The nvcc that a CUDA build would use (CUDA_HOME, then PATH, then $CUDA_DEFAULT_HOME, default
# /usr/local/cuda), or nothing.
find_nvcc() {
    if [ -n "${CUDA_HOME:-}" ]; then
        [ -x "$CUDA_HOME/bin/nvcc" ] && echo "$CUDA_HOME/bin/nvcc"
        return 0
    fi
    if command -v nvcc >/dev/null 2>&1; then command -v nvcc; return 0; fi
    local default="${CUDA_DEFAULT_HOME:-/usr/local/cuda}"
    [ -x "$default/bin/nvcc" ] && echo "$default/bin/nvcc"
    return 0
}

# The toolkit folder of an nvcc: CUDA_HOME if set, else what nvcc itself reports (its
# TOP folder: right also for a wrapper such as /usr/local/bin/nvcc), else nvcc's ../.
cuda_home_of() {
    if [ -n "${CUDA_HOME:-}" ]; then echo "$CUDA_HOME"; return 0; fi
    local top
    top="$("$1" -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n 1)"
    if [ -n "$top" ] && [ -d "$top" ]; then (cd "$top" && pwd); else dirname "$(dirname "$1")"; fi
}

# "12.4" from `nvcc --version` ("Cuda compilation tools, release 12.4, V12.4.131").
nvcc_version() {
    "$1" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1
}

# Decide the build: sets BUILD_MODE (cuda|cpu), TORCH_VERSION, TORCH_CUDA, ARCHS, NVCC; exits
# with a message when CUDA is wanted or a GPU is there but cannot be built for.
plan_build() {
    local probe
    probe="$(torch_probe)" || bm_die "cannot import torch with $PYTHON: install torch first"
    read -r TORCH_VERSION TORCH_CUDA GPU_CAPS <<<"$probe"
    NVCC="$(find_nvcc)"
    local force="${FORCE_CUDA:-}"
    case "$force" in ''|0|1) ;; *) bm_die "FORCE_CUDA must be 0, 1 or unset, got '$force'" ;; esac
    if [ "$force" = 0 ]; then BUILD_MODE=cpu
    elif [ "$force" = 1 ] || [ "$GPU_CAPS" != none ]; then BUILD_MODE=cuda
    else BUILD_MODE=cpu
    fi
    ARCHS=""
    if [ "$BUILD_MODE" = cpu ]; then return 0; fi
    if [ "$TORCH_CUDA" = none ]; then
        bm_die "torch $TORCH_VERSION is a CPU build: mmcv's CUDA ops need a CUDA build of torch" \
            "(or set FORCE_CUDA=0 to build the CPU ops only)"
    fi
    if [ -z "$NVCC" ]; then
        bm_die "a GPU is visible (torch $TORCH_VERSION, CUDA $TORCH_CUDA) but nvcc, CUDA's compiler," \
            "was not found (looked in \$CUDA_HOME/bin${CUDA_HOME:+ = $CUDA_HOME/bin}, on PATH and in" \
            "${CUDA_DEFAULT_HOME:-/usr/local/cuda}/bin). Install the CUDA toolkit $TORCH_CUDA (its major version must match" \
            "torch's), then set CUDA_HOME to it or put its bin/ on PATH; or set FORCE_CUDA=0 to build" \
            "mmcv's CPU ops only (mmdet's detectors then run on the CPU only)."
    fi
    local have
    have="$(nvcc_version "$NVCC")"
    if [ "${have%%.*}" != "${TORCH_CUDA%%.*}" ]; then
        bm_die "$NVCC is CUDA $have but torch $TORCH_VERSION was built with CUDA $TORCH_CUDA:" \
            "the major versions must match. Set CUDA_HOME to a CUDA ${TORCH_CUDA%%.*}.x toolkit."
    fi
    ARCHS="${TORCH_CUDA_ARCH_LIST:-}"
    if [ -z "$ARCHS" ]; then
        [ "$GPU_CAPS" != none ] || bm_die "FORCE_CUDA=1 without a visible GPU: set" \
            "TORCH_CUDA_ARCH_LIST to the GPUs' architectures (e.g. \"8.0;9.0\")"
        ARCHS="$GPU_CAPS"
    fi
}

# The C++ standard the installed torch's headers require (c++20 for torch >= 2.6, else c++17),
# or MMCV_CXX_STD. Reads the '__cplusplus < NNNNNNL' guards of torch/all.h and c10's macros.
cxx_std() {
    if [ -n "${MMCV_CXX_STD:-}" ]; then
        case "$MMCV_CXX_STD" in c++17|c++20) echo "$MMCV_CXX_STD"; return 0 ;;
            *) bm_die "MMCV_CXX_STD must be c++17 or c++20, got '$MMCV_CXX_STD'" ;; esac
    fi
    local include
    include="${TORCH_INCLUDE:-$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')}"
    if grep -hqs '__cplusplus < 202002L' "$include/torch/csrc/api/include/torch/all.h" \
            "$include/c10/macros/Macros.h" "$include/c10/util/C++17.h"; then
        echo c++20
    else
        echo c++17
    fi
}

# "sm90" / "sm80-90+PTX" from an arch list "9.0" / "8.0;9.0+PTX".
arch_tag() {
    local tag="" arch
    for arch in ${1//;/ }; do
        arch="${arch//./}"
        tag="${tag:+$tag-}$arch"
    done
    echo "sm$tag"
}

# The folder that caches the wheel: the CPU key is mmcv-VER-PYTAG-torchVER-MACHINE (as before
# CUDA builds existed, so old caches are reused); CUDA adds -cuVER-smARCHS.
wheel_dir() {  # cache torch_version pytag
    local key="mmcv-$MMCV_VERSION-$3-torch$2"
    if [ "$BUILD_MODE" = cuda ]; then
        key="$key-cu$TORCH_CUDA-$(arch_tag "$ARCHS")"
    fi
    echo "$1/wheels/$key-$(uname -m)"
}

# Unpack the sdist (from DIR when given, else downloaded) into $2 and patch it; echo its path.
fetch_sdist() {  # find_links_dir build_dir
    if [ -n "$1" ]; then
        [ -f "$1/mmcv-$MMCV_VERSION.tar.gz" ] || bm_die "$1 has no mmcv-$MMCV_VERSION.tar.gz" \
            "(prepare it with: tools/build_mmcv.sh --download $1)"
        cp "$1/mmcv-$MMCV_VERSION.tar.gz" "$2/"
    else
        "$PYTHON" -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
            -d "$2" "mmcv==$MMCV_VERSION"
    fi
    tar -xzf "$2/mmcv-$MMCV_VERSION.tar.gz" -C "$2"
    local std
    std="$(cxx_std)"
    patch_setup "$2/mmcv-$MMCV_VERSION/setup.py" "$std"
    echo "$2/mmcv-$MMCV_VERSION"
}

# mmcv 2.1.0's setup.py: its -std=c++17 (cxx and nvcc flags; mmcv's flag comes last, so CFLAGS
# cannot override it) becomes the standard torch needs, and pkg_resources (gone in setuptools
# 82) is replaced by importlib.metadata and packaging.
patch_setup() {  # setup.py std
    grep -q -- '-std=c++17' "$1" || bm_die "$1: no -std=c++17 flag to patch (not mmcv $MMCV_VERSION?)"
    sed -i "s/-std=c++17/-std=$2/g" "$1"
    sed -i 's/^from pkg_resources import DistributionNotFound, get_distribution, parse_version$/from importlib.metadata import PackageNotFoundError as DistributionNotFound, distribution as get_distribution\nfrom packaging.version import parse as parse_version/' "$1"
    if grep -q '^from pkg_resources' "$1"; then bm_die "$1: unexpected pkg_resources import"; fi
}

# The include folders of the CUDA libraries that torch's pip wheels bring (site-packages/
# nvidia/*/include: cusparse.h, cublas_v2.h, ...), ':'-separated; empty if there are none.
cuda_header_dirs() {
    "$PYTHON" - <<'PY'
import glob
import os
try:
    import nvidia
except ImportError:
    raise SystemExit
print(':'.join(sorted(d for base in nvidia.__path__
                      for d in glob.glob(os.path.join(base, '*', 'include')) if os.path.isdir(d))))
PY
}

# Build the wheel into $1 (timed: prints and writes $1/build_time.txt).
build_wheel() {  # out_dir find_links_dir
    local build src start seconds std
    build="$(mktemp -d)"
    src="$(fetch_sdist "$2" "$build")"
    std="$(cxx_std)"
    mkdir -p "$1"
    bm_log "building mmcv $MMCV_VERSION ($BUILD_MODE${ARCHS:+, archs $ARCHS}, $std," \
        "MAX_JOBS=${MAX_JOBS:-$(cores)}) against torch $TORCH_VERSION"
    local envs=(MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(cores)}"
                CFLAGS="-Wsign-compare -DNDEBUG -g0 -fwrapv -O3 -Wall")
    if [ "$BUILD_MODE" = cuda ]; then
        local cuda_home headers
        cuda_home="$(cuda_home_of "$NVCC")"
        envs+=(FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST="$ARCHS" CUDA_HOME="$cuda_home")
        # torch's headers include cusparse.h & co.; a toolkit with nvcc alone lacks them
        if [ ! -f "$cuda_home/include/cusparse.h" ]; then
            headers="$(cuda_header_dirs)"
            [ -z "$headers" ] || envs+=(CPATH="$headers${CPATH:+:$CPATH}")
        fi
    else
        envs+=(FORCE_CUDA=0)
    fi
    start=$(date +%s)
    env "${envs[@]}" "$PYTHON" -m pip --disable-pip-version-check -q wheel --no-build-isolation --no-deps \
        --no-index -w "$build/out" "$src"
    seconds=$(( $(date +%s) - start ))
    mv "$build"/out/mmcv-$MMCV_VERSION-*.whl "$1/"
    printf 'mmcv %s %s%s build: %d s (%s), torch %s, %s, %s parallel jobs on %s cores\n' \
        "$MMCV_VERSION" "$BUILD_MODE" "${ARCHS:+ $ARCHS}" "$seconds" "$(date -u +%FT%TZ)" \
        "$TORCH_VERSION" "$(uname -m)" "${MAX_JOBS:-$(cores)}" "$(cores)" \
        | tee "$1/build_time.txt" >&2
    rm -rf "$build"
}

# pip download, for Python $WHEEL_PYTHON x86-64, of the sdist and the wheels an offline GPU
# machine needs (OFFLINE_WHEELS); everything pinned, nothing else.
download_offline() {  # dir
    mkdir -p "$1"
    # no build isolation: the sdist's metadata step imports pkg_resources (setuptools < 82)
    "$PYTHON" -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$1" \
        "mmcv==$MMCV_VERSION"
    "$PYTHON" -m pip download -q --no-deps --only-binary :all: --python-version "$WHEEL_PYTHON" \
        --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 -d "$1" \
        "${OFFLINE_WHEELS[@]}"
    bm_log "$1: $(ls "$1" | wc -l) files, $(du -sh "$1" | cut -f1)"
}

# Install the OFFLINE_WHEELS stack (with --find-links: offline). --no-deps: what they need
# beyond OFFLINE_WHEELS (numpy, scipy, matplotlib, opencv, rich, ...) must be installed already;
# check_stack, run once mmcv is installed (mmpretrain and mmdet import it), names anything missing.
install_stack() {  # find_links_dir
    local index=()
    [ -z "$1" ] || index=(--no-index --find-links "$1")
    "$PYTHON" -m pip --disable-pip-version-check -q install "${index[@]}" --no-deps \
        "${OFFLINE_WHEELS[@]}"
}
check_stack() {
    "$PYTHON" -c 'import mmengine, mmpretrain, mmdet.models, pycocotools, shapely' \
        || bm_die "the OpenMMLab stack does not import (a dependency above is missing)"
}

# Check the installed ops: CUDA nms, batched_nms and RoIAlign equal their CPU results.
check_cuda_ops() {
    "$PYTHON" - <<'PY'
import torch
from mmcv.ops import RoIAlign, batched_nms, nms

torch.manual_seed(0)
xy = torch.rand(200, 2) * 200
boxes = torch.cat([xy, xy + 10 + torch.rand(200, 2) * 60], 1)
scores, idxs = torch.rand(200), torch.randint(0, 4, (200, ))
cpu_keep = nms(boxes, scores, 0.5)[1]
gpu_keep = nms(boxes.cuda(), scores.cuda(), 0.5)[1].cpu()
assert torch.equal(cpu_keep, gpu_keep), 'nms: CUDA and CPU keep different boxes'
cpu_b = batched_nms(boxes, scores, idxs, dict(iou_threshold=0.5))[1]
gpu_b = batched_nms(boxes.cuda(), scores.cuda(), idxs.cuda(), dict(iou_threshold=0.5))[1].cpu()
assert torch.equal(cpu_b, gpu_b), 'batched_nms: CUDA and CPU keep different boxes'
feats = torch.rand(2, 16, 50, 50)
rois = torch.cat([torch.randint(0, 2, (64, 1)).float(), boxes[:64] / 4], 1)
align = RoIAlign((7, 7), 0.5, sampling_ratio=2, aligned=True)
cpu_out = align(feats, rois)
gpu_out = align(feats.cuda(), rois.cuda()).cpu()
torch.testing.assert_close(gpu_out, cpu_out, rtol=1e-5, atol=1e-5)
print(f'mmcv CUDA ops equal their CPU results: nms ({len(cpu_keep)} kept), batched_nms '
      f'({len(cpu_b)} kept), RoIAlign ({tuple(cpu_out.shape)})')
PY
}

main() {
    PYTHON="${PYTHON:-python3}"
    local find_links="" stack=0 download="" plan_only=0 build_only=0
    while [ $# -gt 0 ]; do
        case "$1" in
            --find-links) find_links="$(cd "${2:?--find-links needs a folder}" && pwd)"; shift 2 ;;
            --stack) stack=1; shift ;;
            --download) download="${2:?--download needs a folder}"; shift 2 ;;
            --print-plan) plan_only=1; shift ;;
            --build-only) build_only=1; shift ;;
            -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d'; return 0 ;;
            *) bm_die "unknown option '$1' (see --help)" ;;
        esac
    done
    if [ -n "$download" ]; then download_offline "$download"; return 0; fi
    plan_build
    local pytag wheels
    pytag="$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
    wheels="${MMPOLY_WHEELS:-$(wheel_dir "${MMPOLY_CACHE:-$HOME/.cache/mmpoly}" "$TORCH_VERSION" "$pytag")}"
    if [ "$plan_only" = 1 ]; then
        echo "mode=$BUILD_MODE torch=$TORCH_VERSION cuda=$TORCH_CUDA archs=${ARCHS:-none}" \
            "nvcc=${NVCC:-none}${NVCC:+ cuda_home=$(cuda_home_of "$NVCC")} std=$(cxx_std) jobs=${MAX_JOBS:-$(cores)} wheels=$wheels"
        return 0
    fi
    if [ "$build_only" = 1 ] && [ "$stack" = 1 ]; then
        bm_die "--build-only installs nothing: it cannot be combined with --stack"
    fi
    if [ "$stack" = 1 ]; then install_stack "$find_links"; fi
    if ls "$wheels"/mmcv-$MMCV_VERSION-*.whl >/dev/null 2>&1; then
        bm_log "using the cached wheel in $wheels"
    else
        build_wheel "$wheels" "$find_links"
    fi
    if [ "$build_only" = 1 ]; then
        ls "$wheels"/mmcv-$MMCV_VERSION-*.whl
        return 0
    fi
    "$PYTHON" -m pip --disable-pip-version-check -q install --no-deps --force-reinstall \
        "$wheels"/mmcv-$MMCV_VERSION-*.whl
    "$PYTHON" -c 'from mmcv.ops import nms, RoIAlign' \
        || bm_die "mmcv.ops does not import after the install"
    if [ "$stack" = 1 ]; then check_stack; fi
    if [ "$BUILD_MODE" = cuda ]; then check_cuda_ops; fi
    bm_log "mmcv $MMCV_VERSION with $BUILD_MODE ops installed (wheel: $wheels)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    main "$@"
fi
