#!/bin/bash
# set -o pipefail: a pipeline fails when any part fails; with set -e that stops the script.
set -eo pipefail
printf 'b\na\n' | sort > sorted.txt
cat missing.txt 2>/dev/null | sort > empty.txt
echo unreachable > after.txt
