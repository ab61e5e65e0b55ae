#!/usr/bin/env bash
# SCOOP and DEAP for tests/test_scoop_examples.py (idempotent).
# Both packages come from the registry into the venv (the `test` extra pins them); their example
# programs come from the packages' own source distributions, extracted into a cache outside this
# repository (never copied into it):
#   ${SHOAL_TEST_CACHE:-~/.cache/shoal-tests}/scoop-0.7.2.0/examples, .../deap-1.4.4/examples
#   bash scripts/setup-test-deps.sh [VENV]     # default .venv
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
CACHE=${SHOAL_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal-tests}
PKGS=(scoop==0.7.2.0 deap==1.4.4)  # the same pins as pyproject.toml's `test` extra
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PKGS[@]}"
mkdir -p "$CACHE"
for pkg in "${PKGS[@]}"; do
  name=${pkg%%==*}
  ver=${pkg##*==}
  if [ -d "$CACHE/$name-$ver/examples" ]; then
    continue
  fi
  tmp=$(mktemp -d)
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-binary :all: \
    --no-deps "$pkg" -d "$tmp"
  tar xzf "$tmp/$name-$ver.tar.gz" -C "$tmp" "$name-$ver/examples"
  rm -rf "${CACHE:?}/$name-$ver"
  mv "$tmp/$name-$ver" "$CACHE/$name-$ver"
  rm -rf "$tmp"
done
echo "SCOOP and DEAP examples in $CACHE"
