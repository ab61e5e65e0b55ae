#!/bin/bash
# tee -a and >> to log files that do not exist yet, with a loop writing progress lines.
for step in prepare regrid average; do
  echo "step $step" | tee -a run.log
  echo "$step done" >> status.log
done
echo "finished" | tee -a run.log > last.txt
tee copy1.txt copy2.txt < run.log > /dev/null
cat status.log >> run.log
wc -l run.log
