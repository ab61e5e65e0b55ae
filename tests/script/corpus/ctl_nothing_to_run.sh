#!/bin/bash
# A checking script whose statements are all decided at compile time: nothing runs, no output.
# args: 2005
year=${1:-2000}
if [ $year -lt 1900 ]; then exit 1; fi
decade=$(( year / 10 * 10 ))
case $decade in
  2000) period=recent ;;
  *) period=other ;;
esac
: "checked $year: $period"
