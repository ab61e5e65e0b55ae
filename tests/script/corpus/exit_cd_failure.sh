#!/bin/bash
# cd into a missing directory guarded with || exit: the script stops with status 1.
mkdir -p present
cd present || exit 1
echo inside > here.txt
cd ..
cd missing_dir 2>/dev/null || { echo "no such dir" > err.txt; exit 1; }
echo never > never.txt
