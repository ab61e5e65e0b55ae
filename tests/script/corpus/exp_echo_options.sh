#!/bin/bash
# echo flags and escapes: -n, -e with \t \n \\, -E, and a literal -x word.
echo -n "a" > e.txt
echo -n "b" >> e.txt
echo >> e.txt
echo -e "col1\tcol2\nrow" >> e.txt
echo -E "raw\tstays" >> e.txt
echo -e 'back\\slash' >> e.txt
echo -x not an option >> e.txt
echo -- dashes >> e.txt
cat e.txt
