#!/bin/bash
# exit inside a subshell only ends the subshell; its status is seen by the parent.
( echo in > sub.txt; exit 5 )
echo "subshell said $?" > status.txt
( exit 0 ) && echo "zero ok" >> status.txt
exit 7
