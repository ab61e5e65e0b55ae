#!/bin/bash
# cp, mv and rm on text files, including rm -f of a missing file and mv into a directory.
echo alpha > a.txt
echo beta > b.txt
cp a.txt c.txt
mv b.txt d.txt
mkdir -p keep
mv c.txt keep/
cp a.txt d.txt keep/
rm a.txt
rm -f nothing.txt
mv keep/a.txt keep/renamed.txt
ls keep
cat d.txt keep/*.txt > all.txt
