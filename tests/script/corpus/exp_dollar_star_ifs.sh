#!/bin/bash
# "$*" joins with the first character of IFS; "$@" keeps words; IFS changes mid-script.
# args: tas pr "sea level"
IFS=,
echo "$*" > joined_comma.txt
IFS=:
echo "$*" > joined_colon.txt
unset IFS
echo "$*" > joined_space.txt
for a in "$@"; do touch "var_$a.txt"; done
IFS=- ; echo "${*}" ; unset IFS
ls var_*
