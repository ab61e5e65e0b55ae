#!/bin/bash
# After mv of a directory, the old path is gone: reading through it fails, the new path works.
mkdir -p stage
echo data > stage/f.txt
mv stage final
cat stage/f.txt 2>/dev/null || echo "old path gone"
cat final/f.txt
rm -r final
ls
