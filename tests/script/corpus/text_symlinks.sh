#!/bin/bash
# ln -s links to files and directories; writing through a link, then reading the target.
mkdir data
echo "v1" > data/value.txt
ln -s data/value.txt current
ln -s data latest
cat current > read1.txt
echo "v2" >> current
cat data/value.txt > read2.txt
cat latest/value.txt > read3.txt
ln -sf data/value.txt current
ls -1 latest/
