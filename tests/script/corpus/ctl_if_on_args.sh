#!/bin/bash
# Branching on the number and values of arguments, with a usage message on stderr.
# args: annual
# stderr: exact
if [ $# -lt 1 ]; then
  echo "usage: $0 mode" >&2
  exit 2
fi
mode=$1
if [ "$mode" = annual ]; then
  echo "annual mode" > mode.txt
  echo "note: annual" >&2
elif [ "$mode" = monthly ]; then
  echo "monthly mode" > mode.txt
fi
[ "$mode" != daily ] && echo "not daily" >> mode.txt
