#!/bin/bash
# Output to a device that fails at run time (/dev/full; bash's /dev/tcp to a closed port):
# echo and printf then exit 1, so the && / || chains their status drives must follow bash.
# data: text
printf 'x\n' 2>/dev/null > /dev/full && echo "full written" > status.txt
printf 'x\n' 2>/dev/null > /dev/full || echo "full failed" >> status.txt
echo hi 2>/dev/null > /dev/tcp/127.0.0.1/9 && echo "tcp sent" >> status.txt
echo hi 2>/dev/null > /dev/tcp/127.0.0.1/9 || echo "tcp refused" >> status.txt
echo ok > /dev/null && echo "null written" >> status.txt
printf 'y\n' 2>/dev/null >> /dev/full || echo "full again" >> status.txt
wc -l < status.txt > lines.txt
