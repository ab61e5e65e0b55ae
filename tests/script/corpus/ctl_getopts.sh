#!/bin/bash
# Option parsing with getopts: -v VAR -o OUT -q, then positional arguments after shift.
# args: -v tas -o result -q extra1 extra2
var=pr; out=out; quiet=0
while getopts "v:o:q" opt; do
  case $opt in
    v) var=$OPTARG ;;
    o) out=$OPTARG ;;
    q) quiet=1 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
mkdir -p $out
echo "$var $quiet $#" > $out/opts.txt
for a in "$@"; do echo "$a" >> $out/rest.txt; done
