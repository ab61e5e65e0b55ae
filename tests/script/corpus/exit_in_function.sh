#!/bin/bash
# exit inside a function ends the whole script with that status.
die() { echo "fatal: $1" > fatal.txt; exit ${2:-1}; }
echo begin > log.txt
[ -f config.missing ] || die "no config" 6
echo never >> log.txt
