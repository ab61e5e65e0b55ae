#!/bin/bash
# gzip of results (keep and replace), gunzip back, and zcat-style reading through gzip -dc.
# data: text
cp obs.txt obs_copy.txt
gzip -n obs_copy.txt
gzip -c -n years.txt > years.txt.gz
gzip -dc years.txt.gz | wc -l > years_count.txt
cp params.txt p.txt
gzip -n p.txt
gunzip p.txt.gz
ls *.gz
