#!/bin/bash
# A script called without its required argument: usage on stderr and exit 2.
# stderr: exact
if [ $# -lt 1 ]; then
  echo "usage: $(basename $0) INPUT" >&2
  exit 2
fi
cp "$1" out.txt
