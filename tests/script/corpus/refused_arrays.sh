#!/bin/bash
# Bash arrays of model names: a construct shoal refuses with a clear message.
# expect: refused
models=(ccma ncar gfdl)
for m in "${models[@]}"; do
  echo "$m" >> list.txt
done
echo "${#models[@]} models, second ${models[1]}" > count.txt
