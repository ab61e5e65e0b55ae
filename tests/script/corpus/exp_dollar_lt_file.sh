#!/bin/bash
# $(< file) reads a file present at start; [[ < ]] string order; local -i in a function.
# data: text
first_year=$(< years.txt)
set -- $first_year
echo "first=$1 count=$#" > years_info.txt
[[ tas < uas ]] && echo "tas sorts before uas" >> years_info.txt
sum() { local -i total=0; for v in "$@"; do total+=v; done; echo $total; }
echo "sum=$(sum 1 2 3 4)" >> years_info.txt
cat years_info.txt
