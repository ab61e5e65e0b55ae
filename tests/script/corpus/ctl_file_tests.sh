#!/bin/bash
# File tests on made and removed files: -e -f -d -s -L -r, and their negations.
echo x > full.txt
touch empty.txt
mkdir dir
ln -s full.txt link.txt
for p in full.txt empty.txt dir link.txt none.txt; do
  r=""
  [ -e $p ] && r="$r e"
  [ -f $p ] && r="$r f"
  [ -d $p ] && r="$r d"
  [ -s $p ] && r="$r s"
  [ -L $p ] && r="$r L"
  echo "$p:$r" >> tests.txt
done
rm empty.txt
[ ! -e empty.txt ] && echo "gone" >> tests.txt
cat tests.txt
