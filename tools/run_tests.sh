#!/usr/bin/env bash
# Set everything up (if not done yet) and run the whole test suite, slow end-to-end tests
# included. Extra arguments go to pytest (e.g. `-m "not slow"` for the fast tests only).
#
# The tests run in MMPOLY_TEST_WORKERS pytest-xdist processes (default 2, one per core of the
# 2-core machines the suite is sized for), a test file per process at a time (--dist loadfile:
# a file's module fixtures are built once). Much of the suite is single-threaded (each tool
# subprocess spends ~8 s importing mmpretrain; mmcv's CPU RoIAlign uses one thread), so two
# processes share two cores well. MMPOLY_TEST_WORKERS=0 runs everything in one process.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$REPO/tools/setup_env.sh"
VENV="${MMPOLY_VENV:-$REPO/.venv}"
WORKERS="${MMPOLY_TEST_WORKERS:-2}"
case "$WORKERS" in
    ''|*[!0-9]*) echo "MMPOLY_TEST_WORKERS must be a whole number (0 = no worker processes), got '$WORKERS'" >&2; exit 2 ;;
esac
XDIST=()
if [ "$WORKERS" -gt 0 ]; then XDIST=(-n "$WORKERS" --dist loadfile); fi
cd "$REPO"
exec "$VENV/bin/python" -m pytest tests "${XDIST[@]}" "$@"
