#!/bin/bash
# echo -e escapes, echo -n, printf formats and printf -v into variables.
echo -e "model\tmean" > table.tsv
echo -e "a\tb\nc\td" >> table.tsv
echo -n "no newline" > n.txt
printf -v label 'run_%03d' 7
printf -v pair '%s=%s' key value
echo "$label $pair" > labels.txt
printf '%-8s|%5.1f\n' tas 287.25 pr 3.5 > fmt.txt
printf '%s\n' one two three | sort -r
printf 'escape\\n kept: %s\n' '\t'
