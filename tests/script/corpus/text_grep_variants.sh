#!/bin/bash
# grep -v, -c, -n, -E, -i, -o, -l over data files, including a grep that matches nothing.
# data: text
grep -v missing obs.txt > ok_only.txt
grep -n ok obs.txt | cut -d: -f1 > ok_lines.txt
grep -E '^(1|3),' stations.csv > odd_ids.csv
grep -i BERGEN stations.csv | head -1 > bergen.csv
grep -o '[0-9]\{4\}' obs.txt | sort -u > years_seen.txt
grep -l region *.txt > with_region.txt
grep nomatch obs.txt > empty.txt || echo "no match (status $?)"
