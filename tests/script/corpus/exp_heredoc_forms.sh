#!/bin/bash
# Here-documents: unquoted with expansions and $(( )), quoted, <<- with tabs, into a pipe.
name=ensemble; n=3
cat <<EOF1 > report.txt
Report for $name
members: $n, pairs: $(( n * (n - 1) / 2 ))
path: ${PWD##*/}/$name.nc
EOF1
cat <<'EOF1' >> report.txt
literal $name $(( 1 + 1 ))
EOF1
cat <<-EOF1 > tabs.txt
	indented $name
		twice
	EOF1
cat <<EOF1 | sort -r > piped.txt
b $n
a $name
EOF1
cat report.txt
