#!/bin/bash
# A recursive function computing a value and making nested directories to a depth.
fact() {
  local n=$1
  if [ $n -le 1 ]; then echo 1; return; fi
  local sub=$(fact $((n - 1)))
  echo $((n * sub))
}
nest() {
  local d=$1 depth=$2
  [ $depth -eq 0 ] && return
  mkdir -p $d/level$depth
  nest $d/level$depth $((depth - 1))
}
echo "5! = $(fact 5)" > fact.txt
nest tree 3
find tree | sort
