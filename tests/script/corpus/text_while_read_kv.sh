#!/bin/bash
# while IFS== read over key=value lines from a file, building a shell-style settings file.
# data: text
while IFS== read -r key value; do
  echo "export ${key^^}=\"$value\"" >> settings.sh
  case $key in
    start|end) echo "$key is a year: $value" ;;
    *) echo "$key -> $value" ;;
  esac
done < params.txt
wc -l < settings.sh
