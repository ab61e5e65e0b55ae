#!/bin/bash
# printf formatting a table of model statistics, reusing the format for extra arguments.
# data: text
printf '%-16s %6s\n' model year > table.txt
y=2000
while read -r m; do
  y=$((y + 1))
  printf '%-16s %6d\n' "$m" "$y" >> table.txt
done < models.txt
printf '%s,' a b c > list.txt; printf '\n' >> list.txt
printf '%05.1f|%x|%o|%e\n' 3.14159 255 8 12345.678 >> list.txt
printf -- '--%s--\n' end >> list.txt
cat table.txt list.txt
