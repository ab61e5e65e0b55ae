#!/bin/bash
# eval of text the script itself generates at run time: must be refused, not guessed.
# expect: refused
# data: text
head -n 1 models.txt | sed 's/^/touch made_/' > cmd.txt
echo "preparing" > log.txt
eval "$(cat cmd.txt)"
ls made_* >> log.txt
