#!/bin/bash
# ${#v}, ${v:o}, ${v:o:l}, negative offsets and substring of positional parameters.
# args: 20011231 tas
date=$1
yyyy=${date:0:4}; mm=${date:4:2}; dd=${date: -2}
echo "$yyyy-$mm-$dd (${#date} chars)" > date.txt
var=$2
echo "${var:1} ${var:0:1} ${#var}" >> date.txt
mkdir -p $yyyy/$mm
echo "$var" > $yyyy/$mm/$dd.txt
cat date.txt
