#!/bin/bash
# set -o pipefail with set -e: a failing ncdump in a pipeline stops the script.
# data: models=1
set -e
set -o pipefail
ncdump -h sresalb_ccma_cgcm3_1.nc | grep tas > tas_lines.txt
echo step1 > steps.txt
ncdump -h missing_file.nc 2>/dev/null | grep tas > none.txt
echo step2 >> steps.txt
