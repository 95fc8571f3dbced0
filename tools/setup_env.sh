#!/usr/bin/env bash
# Set up everything mmpoly needs on a fresh machine (Python 3.11, gcc, apt), idempotently.
#
#   MMPOLY_VENV   where the virtual environment lives   (default: <repo>/.venv)
#   MMPOLY_CACHE  where the compiled mmcv wheel is kept (default: ~/.cache/mmpoly)
#
# A second run finds the environment complete (stamp file) and returns in seconds; a run on a
# new venv with the cached mmcv wheel took 1.5 min on a 2-core EPYC (2026-12-06). Measured times:
# README.md ("Two commands"); versions and layouts in docs/en/get_started.md.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MMPOLY_VENV:-$REPO/.venv}"
CACHE="${MMPOLY_CACHE:-$HOME/.cache/mmpoly}"
PYTHON="${MMPOLY_PYTHON:-python3.11}"

TORCH=2.14.1
TORCHVISION=0.29.1
MMENGINE=0.10.7
MMCV=2.1.0
MMPRETRAIN=1.2.0
MMDET=3.3.0
SKIMAGE=0.26.0
STAMP_KEY="torch$TORCH-tv$TORCHVISION-mme$MMENGINE-mmcv$MMCV-mmpt$MMPRETRAIN-mmdet$MMDET-skimage$SKIMAGE-v9"

log() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# 1. Embedded default data: Fashion-MNIST from Debian.
FMNIST=/usr/share/datasets/fashion-mnist
if [ ! -f "$FMNIST/t10k-labels-idx1-ubyte.gz" ]; then
    log "installing Debian package dataset-fashion-mnist"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null
fi
# Speech synthesisers for the offline Speech Commands set (make_speech_commands.py).
if ! command -v espeak-ng >/dev/null || ! command -v flite >/dev/null; then
    log "installing Debian packages espeak-ng flite"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq espeak-ng flite >/dev/null
fi

# 2. The virtual environment.
if [ -f "$VENV/.mmpoly-stamp" ] && [ "$(cat "$VENV/.mmpoly-stamp")" = "$STAMP_KEY" ] \
        && "$VENV/bin/python" -c "import mmpoly" 2>/dev/null; then
    log "environment $VENV is complete"
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check -q)
# mmcv 2.1.0's setup.py imports pkg_resources, removed in setuptools 82.
"${PIP[@]}" install -U pip wheel "setuptools<82"
log "installing torch $TORCH, torchvision $TORCHVISION, mmengine $MMENGINE"
"${PIP[@]}" install "torch==$TORCH" "torchvision==$TORCHVISION" "mmengine==$MMENGINE"

# 3. mmcv with its compiled ops (PyPI has only the sdist), built by tools/build_mmcv.sh: CUDA ops
# when torch sees a GPU (nvcc needed; FORCE_CUDA=0 builds CPU ops only), for the visible GPUs'
# architectures (or TORCH_CUDA_ARCH_LIST), with all cores. The wheel is cached by Python, torch,
# machine and, for CUDA, CUDA version and architectures.
# shellcheck source=build_mmcv.sh
source "$REPO/tools/build_mmcv.sh"
PYTHON="$PY"
plan_build
PYTAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
WHEELHOUSE="$(wheel_dir "$CACHE" "$TORCH" "$PYTAG")"
if ! ls "$WHEELHOUSE"/mmcv-$MMCV-*.whl >/dev/null 2>&1; then
    log "building mmcv $MMCV with $BUILD_MODE ops (CPU ops: 8.6 and 11.2 min measured on 2-core machines)"
    build_wheel "$WHEELHOUSE" ""
fi
"${PIP[@]}" install "$WHEELHOUSE"/mmcv-$MMCV-*.whl
if [ "$BUILD_MODE" = cuda ]; then check_cuda_ops; fi

# 4. The rest of the stack, test tools, and mmpoly itself (editable).
# scikit-image: the bundled photographs of the offline COCO-format set (make_fashion_coco.py)
log "installing mmpretrain $MMPRETRAIN, mmdet $MMDET, pycocotools, scikit-image, pytest(-xdist), pycodestyle, onnx(runtime), mkdocs, mmpoly"
"${PIP[@]}" install "mmpretrain==$MMPRETRAIN" "mmdet==$MMDET" pycocotools \
    "scikit-image==$SKIMAGE" pytest pytest-xdist==3.8.0 pycodestyle==2.14.0 onnx==1.23.2 onnxscript==0.7.2 \
    onnxruntime==1.32.0 mkdocs==1.6.1
# Editable, with its install_requires (mmpoly/version.py): everything above satisfies them, so pip
# installs only what is missing and never rebuilds mmcv or changes torch. No build isolation:
# the venv's setuptools builds it (no download). setup.py links configs/, tools/ and
# model-index.yml into mmpoly/.mim/.
"${PIP[@]}" install --no-build-isolation -e "$REPO"
"$PY" - "$REPO" <<'PY'
import sys
import mmcv, mmcv.ops, mmdet, mmengine, mmpretrain, torch, torchvision
from mmcv.ops import nms  # compiled ops present
import mmpoly
assert mmpoly.__file__.startswith(sys.argv[1]), mmpoly.__file__  # the checkout, editable
print('mmpoly', mmpoly.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'mmengine', mmengine.__version__,
      'mmcv', mmcv.__version__, 'mmpretrain', mmpretrain.__version__, 'mmdet', mmdet.__version__)
PY
echo "$STAMP_KEY" > "$VENV/.mmpoly-stamp"
log "environment $VENV is ready"
