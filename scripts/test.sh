#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check shoal tests
exec .venv/bin/python -m pytest -q --timeout 300 tests "$@"
