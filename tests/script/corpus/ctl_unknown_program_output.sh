#!/bin/bash
# An unknown program (a script made at run time) whose output file is read later (a barrier).
cat > gen.sh <<'GEN'
echo generated > "$1"
GEN
chmod +x gen.sh
./gen.sh product.txt
sort product.txt > sorted.txt
