#!/bin/bash
# Functions with local variables, return codes, arguments and output captured by $(...).
log() { echo "[$1] $2" >> run.log; }
double() { local x=$1; echo $((x * 2)); }
check() {
  local f=$1
  if [ -f "$f" ]; then return 0; else return 3; fi
}
echo data > input.txt
log info start
v=$(double 21)
echo "v=$v" > v.txt
check input.txt && log info "input present"
check absent.txt || log warn "absent missing (rc $?)"
function banner { echo "== $* =="; }
banner done twice
