#!/bin/bash
# A mv into a directory that does not exist fails in bash and leaves the source in place.
# data: text
sort -u models.txt > sorted.txt
mv sorted.txt nodir/sorted.txt
cat sorted.txt
