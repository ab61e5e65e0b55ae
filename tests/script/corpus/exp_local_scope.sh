#!/bin/bash
# local vs global variables across nested function calls, and functions changing globals.
count=0
name=global
inner() { local name=inner; count=$((count + 1)); echo "inner sees $name" >> trace.txt; }
outer() {
  local name=outer
  inner
  echo "outer sees $name" >> trace.txt
  result="from outer"
}
outer
outer
echo "global sees $name, count=$count, result=$result" >> trace.txt
cat trace.txt
