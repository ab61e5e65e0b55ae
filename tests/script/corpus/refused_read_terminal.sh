#!/bin/bash
# Interactive read from the terminal (the script's stdin): known only at run time, refused.
# expect: refused
echo "Continue? [y/n]" > prompt.txt
read -r answer
case $answer in
  y) echo yes > answer.txt ;;
  *) echo no > answer.txt ;;
esac
