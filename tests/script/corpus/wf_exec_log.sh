#!/bin/bash
# exec > log 2>&1 redirects everything after it (stdout and stderr) into a log file.
echo "to stdout before exec"
exec > run.log 2>&1
echo "now in the log"
ls nothing_here
echo "still logging"
