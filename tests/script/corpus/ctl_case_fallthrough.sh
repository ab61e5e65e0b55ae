#!/bin/bash
# case with ;& fall-through, ;;& continue-matching, char classes and a default branch.
for v in tas pr psl uas 2m; do
  case $v in
    t*) echo "$v: temperature" ;&
    p*) echo "$v: physical" ;;
    [0-9]*) echo "$v: starts with a digit" ;;
    u*|v*) echo "$v: wind" ;;&
    *) echo "$v: other" ;;
  esac
done > kinds.txt
cat kinds.txt
