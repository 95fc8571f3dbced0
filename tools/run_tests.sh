#!/usr/bin/env bash
# Set everything up (if not done yet) and run the whole test suite, slow end-to-end tests
# included. Extra arguments go to pytest (e.g. `-m "not slow"` for the fast tests only).
#
# The tests run in MMPOLY_TEST_WORKERS pytest-xdist processes (default 2, one per core of the
# 2-core machines the suite is sized for), a test file per process at a time (--dist loadfile:
# a file's module fixtures are built once). Much of the suite is single-threaded (each tool
# subprocess spends ~8 s importing mmpretrain; mmcv's CPU RoIAlign uses one thread), so two
# processes share two cores well. MMPOLY_TEST_WORKERS=0 runs everything in one process.
#
# Each worker (and every tool it starts) gets cores / workers CPU threads (OMP_NUM_THREADS and
# MKL_NUM_THREADS, unless already set): torch's default of one thread per core in each of two
# workers put four busy threads on two cores, and the suite took 17 % longer on a file of
# in-process model runs (tests/test_onnx.py, 2-core Xeon, 2026-11-28).
#
# The tests write their checkpoints, logs and data sets under pytest's temporary directory
# ($PYTEST_DEBUG_TEMPROOT, else $TMPDIR, else /tmp; a passed test's files are removed when it
# ends, see setup.cfg). After the set-up (whose .venv may share that file system) and before
# pytest starts, this script checks that its file system has MMPOLY_TEST_MIN_FREE_GIB free
# (default below: the suite's measured peak and a margin; 0 skips the check): a CI run once
# filled its disk after 25 minutes and failed 13 tests with "No space left on device".
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# require_whole_number NAME VALUE WHAT: exit 2 naming NAME, VALUE and WHAT unless VALUE is digits.
require_whole_number() {
    case "$2" in
        ''|*[!0-9]*) echo "$1 must be $3, got '$2'" >&2; exit 2 ;;
    esac
}
MIN_FREE_GIB="${MMPOLY_TEST_MIN_FREE_GIB:-5}"
require_whole_number MMPOLY_TEST_MIN_FREE_GIB "$MIN_FREE_GIB" 'a whole number of GiB (0 = no check)'
WORKERS="${MMPOLY_TEST_WORKERS:-2}"
require_whole_number MMPOLY_TEST_WORKERS "$WORKERS" 'a whole number (0 = no worker processes)'
bash "$REPO/tools/setup_env.sh"
TEMP_ROOT="${PYTEST_DEBUG_TEMPROOT:-${TMPDIR:-/tmp}}"
if [ "$MIN_FREE_GIB" -gt 0 ]; then
    FREE_KIB=$(df -Pk "$TEMP_ROOT" | awk 'NR == 2 {print $4}')
    if [ "$FREE_KIB" -lt $(( MIN_FREE_GIB * 1024 * 1024 )) ]; then
        echo "tools/run_tests.sh: $TEMP_ROOT (pytest's temporary directory) has $(( FREE_KIB / 1024 )) MiB free; the suite needs MMPOLY_TEST_MIN_FREE_GIB=$MIN_FREE_GIB GiB there (its measured peak, with a margin). Free space there, or point TMPDIR at a file system with room, or set MMPOLY_TEST_MIN_FREE_GIB=0 to run anyway." >&2
        exit 2
    fi
fi
VENV="${MMPOLY_VENV:-$REPO/.venv}"
XDIST=()
if [ "$WORKERS" -gt 0 ]; then
    # files in collection order, which tests/conftest.py makes longest first (xdist's default
    # orders them by their number of tests)
    XDIST=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder)
    THREADS=$(( $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) / WORKERS ))
    if [ "$THREADS" -lt 1 ]; then THREADS=1; fi
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$THREADS}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-$THREADS}"
fi
cd "$REPO"
# (tests/test_launch_scripts.py checks the threads a worker got when this script started it)
export MMPOLY_TEST_RUNNER=tools/run_tests.sh
exec "$VENV/bin/python" -m pytest tests "${XDIST[@]}" "$@"
