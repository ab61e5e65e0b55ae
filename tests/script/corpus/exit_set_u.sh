#!/bin/bash
# set -u: using an unset variable is an error that ends the script (status 1).
set -u
defined=ok
echo "$defined" > a.txt
echo "${maybe:-fallback}" > b.txt
echo "$undefined_var" > c.txt
echo after > d.txt
