#!/bin/bash
# Redirections: >, >>, 2>, &>, 2>&1, < and 2>/dev/null around succeeding and failing commands.
echo one > out.txt
echo two >> out.txt
ls missing_file 2> err.txt || true
ls out.txt missing_too &> both.txt || true
cat out.txt nothere > merged.txt 2>&1 || true
sort -r < out.txt > reversed.txt
cat nothere 2>/dev/null || echo "not found, continuing"
{ echo grouped; echo lines; } > group.txt
wc -l < out.txt
