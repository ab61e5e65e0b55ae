#!/bin/sh
# Install what `shoal script` tests and benchmarks need on Debian 12: NCO (the netCDF
# Operators) and netcdf-bin (ncgen/ncdump, used to make and compare test data).
# Idempotent: does nothing when ncks, ncgen and ncdump are already there. Run as root.
set -eu
if command -v ncks >/dev/null 2>&1 && command -v ncgen >/dev/null 2>&1 \
        && command -v ncdump >/dev/null 2>&1; then
    echo "setup-script-deps: nco and netcdf-bin already installed"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends nco netcdf-bin
ncks --version 2>&1 | head -n 1
