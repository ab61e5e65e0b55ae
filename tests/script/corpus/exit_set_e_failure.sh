#!/bin/bash
# set -e: a failing cp stops the script; earlier outputs stay, later ones are never made.
set -e
echo one > one.txt
mkdir out
cp one.txt out/
cp missing.txt out/
echo two > two.txt
