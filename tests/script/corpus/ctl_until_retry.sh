#!/bin/bash
# until loop with an attempt counter and a file created on the third attempt.
attempt=0
until [ -f ready.flag ]; do
  attempt=$((attempt + 1))
  echo "attempt $attempt" >> attempts.log
  if [ $attempt -eq 3 ]; then touch ready.flag; fi
done
echo "ready after $attempt attempts"
