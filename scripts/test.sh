#!/usr/bin/env bash
# Installs everything (CPU torch first) and runs lint, type checks and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[all]" -e ./integrations/langchain -e ./integrations/llama_index \
    "pytest>=8" "ruff>=0.5" "mypy>=1.10" "import-linter>=2.0" "langchain-tests>=0.3"
ruff check toolrerank_plugins integrations tests benchmarks examples
lint-imports
mypy
python -m pytest -q
