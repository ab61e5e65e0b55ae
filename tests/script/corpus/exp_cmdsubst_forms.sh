#!/bin/bash
# Command substitution: $(...) and backquotes, nested, in words with text around them.
# data: text
n=$(wc -l < models.txt)
first=`head -n 1 models.txt`
echo "n=$n first=$first"
label="$(basename $(pwd))"
year=$(sed -n 's/^start=//p' params.txt)
out=$(echo $first | cut -d_ -f1)_$year.txt
echo "$n models" > $out
mkdir -p "dir_$(echo x | tr x y)"
echo "$(date -d @0 +%Y)" > epoch_year.txt
ls
