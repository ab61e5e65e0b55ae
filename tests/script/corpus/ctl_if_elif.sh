#!/bin/bash
# if/elif/else on variables, file tests on made files, string and numeric comparisons.
# args: 2005
year=${1:-2000}
if [ $year -lt 2000 ]; then period=past
elif [ $year -le 2010 ]; then period=recent
else period=future
fi
echo $period > period.txt
if [ -f period.txt ] && [ ! -f nothing.txt ]; then echo "files ok"; fi
if [[ $period == re* && $year != 2000 ]]; then echo match > m.txt; else echo no > m.txt; fi
mkdir -p out
if [ -d out ]; then echo "$period $year" > out/p.txt; fi
[ -n "$period" ] || echo empty
test "$year" -ge 2005 && echo late >> m.txt
