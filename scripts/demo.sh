#!/usr/bin/env bash
# Set up (idempotent) and run shoal's main job on the embedded local default:
# an unmodified SCOOP-style program, then a task file of shell commands.
set -euo pipefail
cd "$(dirname "$0")/.."
SHOAL_SETUP_MINIMAL=1 bash scripts/setup.sh
.venv/bin/python -m shoal examples/pi.py
.venv/bin/python -m shoal examples/tree.py 10
.venv/bin/shoal run examples/tasks.txt
