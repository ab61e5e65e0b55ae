#!/bin/bash
# Every multi-expansion word form: $a.$b.nc, ens_$a$b.nc, ${a}/$b.nc, $(cmd).$b.nc, $m\_tas.
a=run; b=01; m=cnrm_cm3
mkdir -p $a
echo x > $a.$b.txt
echo y > ens_$a$b.txt
echo z > ${a}/$b.txt
echo w > $(echo pre).$b.txt
echo $m\_tas
echo "$a,$b,c" > list_$a-$b.csv
echo $a$b$m > joined.txt
echo ${a}_$b > under.txt
ls
