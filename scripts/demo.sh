#!/usr/bin/env bash
# Installs the library (CPU torch first) and runs the main job on the bundled default catalog.
#
# Inside an active virtual environment it installs there; otherwise it creates (or reuses) .venv in the clone,
# so a system Python is never changed. Arguments go to `toolrerank demo` (e.g. --query "...").
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
    [ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
    # shellcheck disable=SC1091
    . .venv/bin/activate
    echo "demo: installing into $(pwd)/.venv (activate it with: source .venv/bin/activate)"
fi
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[all]"
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 toolrerank demo "$@"
