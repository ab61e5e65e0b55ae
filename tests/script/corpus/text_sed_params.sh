#!/bin/bash
# Parameter file edited with sed (-i, -n, -e), values extracted with cut and grep.
# data: text
cp params.txt run.cfg
sed -i 's/^region=.*/region=arctic/' run.cfg
sed -i -e '/^scale=/d' -e '$a\output=out.nc' run.cfg
sed -n 's/^start=//p' run.cfg > start.txt
grep '^end=' run.cfg | cut -d= -f2 > end.txt
sed 's/=/ = /' run.cfg > pretty.cfg
echo "span $(cat start.txt)-$(cat end.txt)"
