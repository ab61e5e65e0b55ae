#!/bin/bash
# Field splitting: unquoted expansions, custom IFS, empty fields, and quoted words kept whole.
list="a b  c"
for x in $list; do echo "w:$x"; done
for x in "$list"; do echo "q:$x"; done
csv="tas,pr,,psl"
IFS=,
for v in $csv; do echo "v:[$v]"; done
unset IFS
set -- $list
echo "$# fields"
line="2001:12.5:ok"
old=$IFS; IFS=:; set -- $line; IFS=$old
echo "$1 / $2 / $3" > fields.txt
