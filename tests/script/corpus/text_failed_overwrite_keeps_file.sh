#!/bin/bash
# A failing cp onto an existing output leaves the earlier version in place (bash never
# truncates it); the script reads it afterwards.
# data: text
cp models.txt current.txt
cp missing_update.txt current.txt
sort -r current.txt > final.txt
cat current.txt
