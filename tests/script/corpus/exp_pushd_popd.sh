#!/bin/bash
# pushd/popd (and their stack output) around work in subdirectories; cd - and $PWD.
mkdir -p a/b c
pushd a > /dev/null
echo "in a" > here.txt
pushd b
echo "in b: ${PWD##*/}" > here.txt
popd
popd > /dev/null
cd c
echo "in c" > here.txt
cd - > /dev/null
basename "$PWD" > final_dir.txt
