#!/bin/bash
# find and xargs over files the script made: find -name, xargs -n1, find -delete.
mkdir -p logs/a logs/b
echo one > logs/a/1.log
echo two > logs/b/2.log
echo tmp > logs/b/x.tmp
find logs -name '*.log' | sort | xargs cat > all_logs.txt
find logs -name '*.tmp' -delete
find logs -type f | sort > remaining.txt
ls logs/*/ | wc -l
