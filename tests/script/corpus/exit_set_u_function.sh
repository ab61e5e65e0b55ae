#!/bin/bash
# set -u with a function called without its argument: $1 unbound stops the script.
set -u
greet() { echo "hello $1" >> greetings.txt; }
greet world
greet
echo after >> greetings.txt
