#!/usr/bin/env bash
# Set everything up (if not done yet) and run the whole test suite, slow end-to-end tests
# included. Extra arguments go to pytest (e.g. `-m "not slow"` for the fast tests only).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$REPO/tools/setup_env.sh"
VENV="${MMPOLY_VENV:-$REPO/.venv}"
cd "$REPO"
exec "$VENV/bin/python" -m pytest tests "$@"
