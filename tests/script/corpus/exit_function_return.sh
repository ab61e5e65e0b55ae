#!/bin/bash
# A function's return status used in conditions and as the script's exit status.
is_even() { return $(( $1 % 2 )); }
for n in 1 2 3 4; do
  if is_even $n; then echo "$n even" >> parity.txt; else echo "$n odd" >> parity.txt; fi
done
fail_with() { echo "failing with $1" > reason.txt; return $1; }
fail_with 4
