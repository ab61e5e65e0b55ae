#!/usr/bin/env bash
# Create one virtualenv per Python peer under bench/.envs/ and install the command-line peers.
# Idempotent: an env whose requirements have not changed is left alone.
#
#   bash bench/setup_peers.sh            # all peers
#   bash bench/setup_peers.sh dask ray   # only these
#
# The stdlib pools (ProcessPoolExecutor, multiprocessing.Pool) run on the plain interpreter and
# need nothing.  `scoop` installs SCOOP 0.7.2 and DEAP into the project venv (bench/scoop_bench.py).
# HyperQueue's `hq` binary is not installed here: the pip package ships only its
# Python API, so build `hq` from its repository yourself and put it on PATH or in $HQ_BIN.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENVS="$HERE/.envs"
PY="${PEER_PYTHON:-python3}"
mkdir -p "$ENVS"

# peer -> pinned requirements (the versions benchmarked; bump deliberately)
declare -A REQS=(
  [dask]="dask==2026.8.0 distributed==2026.8.0"
  [ray]="ray==2.60.0"
  [parsl]="parsl==2026.10.26"
  [ipyparallel]="ipyparallel==9.2.0"
)

peers=("$@")
if [ ${#peers[@]} -eq 0 ]; then peers=(dask ray parsl ipyparallel cmdline scoop); fi

for peer in "${peers[@]}"; do
  if [ "$peer" = scoop ]; then
    # SCOOP 0.7.2 and DEAP (bench/scoop_bench.py): in the project venv, where the tests of
    # SCOOP's and DEAP's examples use them too (`python -m scoop` must import the same deap)
    bash "$HERE/../scripts/setup-test-deps.sh"
    continue
  fi
  if [ "$peer" = cmdline ]; then
    # GNU parallel (xargs comes with findutils)
    if ! command -v parallel >/dev/null 2>&1; then
      echo "== installing GNU parallel (apt)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq parallel >/dev/null
    fi
    echo "== GNU parallel: $(parallel --version | head -1)"
    continue
  fi
  reqs="${REQS[$peer]:-}"
  if [ -z "$reqs" ]; then echo "unknown peer: $peer" >&2; exit 2; fi
  env="$ENVS/$peer"
  stamp="$env/.shoal-bench-reqs"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$reqs" ] && "$env/bin/python" -c pass 2>/dev/null; then
    echo "== $peer: up to date ($reqs)"
    continue
  fi
  echo "== $peer: creating $env ($reqs)"
  rm -rf "$env"
  "$PY" -m venv "$env"
  "$env/bin/python" -m pip install -q --upgrade pip
  # shellcheck disable=SC2086
  "$env/bin/python" -m pip install -q $reqs
  echo "$reqs" > "$stamp"
done
echo "== peers ready in $ENVS"
if hq="${HQ_BIN:-$(command -v hq || true)}" && [ -n "$hq" ] && [ -x "$hq" ]; then
  echo "== HyperQueue: $("$hq" --version) ($hq)"
else
  echo "== HyperQueue: no hq binary (\$HQ_BIN or PATH); bench/run.py will mark hq not available"
fi
