#!/bin/bash
# Subshells keep cd and variables to themselves; brace groups share them; grouped output.
mkdir -p sub
x=outer
( cd sub; x=inner; echo "$x" > in_sub.txt )
echo "$x" > after.txt
{ x=group; echo "group line"; } > grp.txt
echo "$x" >> after.txt
(echo a; echo b) | sort -r > sorted.txt
pwd | sed 's|.*/||' > cwd.txt
