#!/usr/bin/env bash
# One-time set-up on a fresh Debian 12 machine (idempotent): a venv with shoal and its
# test tools in .venv, plus the system tools the tests use (NCO, OpenMPI, strace, chromium).
#   bash scripts/setup.sh            # everything
#   SHOAL_SETUP_MINIMAL=1 bash scripts/setup.sh   # only the venv (enough for the demo)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
# Python's headers and a C compiler: the install builds shoal.agent._spawnc and shoal._proc
# with them (the spawn helper's compiled per-command path; the start's process calls;
# setup.py). Without them it goes on and shoal uses its pure-Python paths, so a failure
# here is not fatal.
PY_INCLUDE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if { [ ! -e "$PY_INCLUDE/Python.h" ] || ! command -v cc >/dev/null; } && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update && apt-get install -y --no-install-recommends python3-dev gcc libc6-dev; } \
    || echo "setup.sh: no python3-dev or gcc; shoal is installed without its compiled spawn path" >&2
fi
if [ -n "${SHOAL_SETUP_MINIMAL:-}" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e .
  exit 0
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
bash scripts/setup-script-deps.sh
# SCOOP and DEAP, and their example programs (tests/test_scoop_examples.py), kept outside the repo
bash scripts/setup-test-deps.sh .venv
bash scripts/setup-bundle-deps.sh .venv
# CPython's own concurrent.futures tests, run against shoal by tests/test_cpython_futures.py
# (used in place from Debian's package, never copied into this repository)
if [ ! -e /usr/lib/python3.11/test/test_concurrent_futures.py ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends libpython3.11-testsuite \
    || { apt-get update && apt-get install -y --no-install-recommends libpython3.11-testsuite; }
fi
# Debian's chromium: tests/test_report_html.py loads the HTML report in it, headless, driven
# by Playwright's Python package (which is pointed at /usr/bin/chromium: no browser download)
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update && apt-get install -y chromium
fi
# `shoal serve`'s job sandbox (shoal/service/sandbox.py, docs/sandbox.md): bubblewrap, and
# the unprivileged user the jobs run as (no home, no login shell)
if ! command -v bwrap >/dev/null && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends bubblewrap \
    || { apt-get update && apt-get install -y --no-install-recommends bubblewrap; }
fi
if [ "$(id -u)" = 0 ] && ! getent passwd shoal-job >/dev/null; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    --user-group shoal-job
fi
# the compiled parts, when they could be built (a note only: shoal works without them)
.venv/bin/python -c "import shoal.agent._spawnc" 2>/dev/null \
  || echo "setup.sh: shoal.agent._spawnc was not built; commands start through the Python path" >&2
.venv/bin/python -c "import shoal._proc" 2>/dev/null \
  || echo "setup.sh: shoal._proc was not built; processes set their signals through ctypes" >&2
