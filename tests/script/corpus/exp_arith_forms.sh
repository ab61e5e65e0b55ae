#!/bin/bash
# Arithmetic: $(( )), (( )), let, ++/--, ternary, bases, comparison results as exit codes.
a=17; b=5
echo $((a / b)) $((a % b)) $((a ** 2)) $((a << 2)) $((a & b)) $((a | b)) $((a ^ b))
echo $((0x1F)) $((8#17)) $((2#1010)) $((-a / b))
((a > b)) && echo "a bigger"
((c = a + b, c *= 2))
echo "c=$c"
i=0; ((i++)); ((i += 4)); ((--i))
echo "i=$i"
let "d = a - b" "e = d * 2"
echo "$d $e $(( e > 20 ? 1 : 0 ))" > arith.txt
