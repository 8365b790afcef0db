#!/usr/bin/env bash
# Installs the library (CPU torch first) and runs the main job on the bundled default catalog.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[all]"
HF_HUB_OFFLINE=1 toolrerank demo "$@"
