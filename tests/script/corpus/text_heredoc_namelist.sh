#!/bin/bash
# A Fortran-style namelist written with an unquoted here-document, and a quoted one kept literal.
# args: 1995 2004
start=${1:-2000}; end=${2:-2010}
nyears=$((end - start + 1))
cat > namelist.input <<EOF2
&time_control
 start_year = $start,
 end_year   = $end,
 run_years  = $nyears,
 label      = "run_${start}_$end",
/
EOF2
cat > template.txt <<'EOF2'
start=$start and $(date) are not expanded here
EOF2
grep -c = namelist.input
cat namelist.input template.txt > combined.txt
