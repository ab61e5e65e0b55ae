#!/bin/bash
# Tilde and brace expansion: ~/dir, {a,b}, {1..4}, {01..03}, nested and with prefixes.
mkdir -p ~/cache
echo cached > ~/cache/note.txt
cat ~/cache/note.txt
touch run_{a,b}_{1..2}.txt
mkdir -p out/{tas,pr}/{mon,day}
echo {01..03} > padded.txt
echo pre{x,y{1,2}}post >> padded.txt
echo {5..1..2} >> padded.txt
echo "{not,expanded}" '~' >> padded.txt
ls -d out/*/* > dirs.txt
ls run_*
