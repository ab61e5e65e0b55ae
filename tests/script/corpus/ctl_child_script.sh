#!/bin/bash
# A helper script written by the script and run with bash, with exported variables.
cat > helper.sh <<'H'
echo "helper sees VAR=$VAR arg=$1" > "helper_$1.txt"
H
export VAR=exported
bash helper.sh first
VAR=changed bash helper.sh second
cat helper_first.txt helper_second.txt
