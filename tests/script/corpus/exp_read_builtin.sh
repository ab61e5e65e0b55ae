#!/bin/bash
# read v < file, IFS=, read a b <<< "...", read -r with backslashes, read of several fields.
# data: text
read first < models.txt
echo "first model: $first" > first.txt
IFS=, read a b rest <<< "tas,pr,psl,uas"
echo "$a|$b|$rest" > split.txt
read -r y v s < obs.txt
echo "$y $v $s" >> split.txt
IFS== read k val <<< "var=tas"
mkdir -p out_$val
echo "$k" > out_$val/key.txt
