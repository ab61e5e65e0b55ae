#!/bin/bash
# Unquoted redirection targets are split and globbed: a value with a space is an "ambiguous
# redirect" error in bash (the command is skipped, the script goes on).
for run in 'first run' second; do
  echo "output of $run" > out_$run.txt
done
echo one > a1.log; echo two > a2.log
pat='a*.log'
echo three > $pat
ls *.txt *.log
