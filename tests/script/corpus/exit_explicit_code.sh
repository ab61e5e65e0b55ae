#!/bin/bash
# Explicit exit 3 after writing some outputs; nothing after it runs.
echo start > log.txt
mkdir -p out
echo partial > out/a.txt
if [ -f out/a.txt ]; then
  echo "stopping" >> log.txt
  exit 3
fi
echo never > out/b.txt
