#!/bin/bash
# Hidden files and globs: * skips dot files unless shopt -s dotglob; .* matches them.
touch .hidden visible.txt
mkdir -p .cache
echo * > plain.txt
shopt -s dotglob
echo * > dotglob.txt
shopt -u dotglob
echo .[!.]* > dotfiles.txt
cat plain.txt dotglob.txt dotfiles.txt
