#!/bin/bash
# declare -i counters, += on integers, $((10#$y)) for zero-padded numbers, arithmetic forms.
declare -i n=0
n+=1
n+=41
echo "n=$n" > n.txt
for y in 08 09 10; do
  echo "month $((10#$y + 1))"
done
i=7
(( i *= 3 ))
let j=i+1
echo $(( i % 5 )) $(( j / 4 )) $(( 2 ** 8 )) $(( -i ))
x=$(( (i > 20) ? 1 : 0 ))
echo "x=$x"
