#!/bin/bash
# An EXIT trap runs on explicit exit too and sees the status; the script keeps status 4.
trap 'echo "exiting with $?" > trap.txt' EXIT
echo work > work.txt
exit 4
