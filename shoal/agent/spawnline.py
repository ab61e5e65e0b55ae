"""A shell line that is one simple command runs without the shell.

``Command("sleep 1")`` and every task-file line run as ``/bin/sh -c LINE``. When LINE is
one simple command -- words of plain characters, a program that is not a shell builtin or
keyword, no assignment in front -- the shell would only split it on blanks, look the
program up on PATH and run it, so the agent does that itself and spares one exec per
command: Debian's dash forks the program as a child of its own and waits for it, which
doubles a short command's start-up cost (``/bin/true`` behind ``sh -c``: 1.5 ms of CPU
here against 0.8 ms run directly). GNU make has the same fast path for recipe lines
(``sh_chars``/``sh_cmds`` in its job.c), and bash execs the last command of ``-c`` itself.

What stays as the shell would make it: the environment gets the ``PWD`` dash exports;
a program that cannot be run directly (not found, not executable, no ``#!`` line) is
handed to the shell after all, so its message and exit status (127, 126, a script run
by sh) are the shell's. What differs: the command is the task's process itself, not a
child of a shell, so a signal that kills it is its exit status (-9) where dash would
have reported 128+9.
"""

from __future__ import annotations

import os
import re

# Words of these characters mean the same to every POSIX shell as to str.split(): no
# quoting, expansion, globbing, redirection, comment, separator or tilde.
_PLAIN = re.compile(r"[A-Za-z0-9_./,:+@%=\- \t-]+")

# Names the shell would not look up on PATH: keywords, and the builtins of dash and bash
# (a builtin such as echo behaves differently from the program of the same name).
_SHELL_NAMES = frozenset("""
    ! { } [[ ]] case coproc do done elif else esac fi for function if in select then time
    until while
    . : [ alias bg bind break builtin caller cd chdir command compgen complete compopt
    continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash
    help history jobs kill let local logout mapfile popd printf pushd pwd read readarray
    readonly return set shift shopt source suspend test times trap true type typeset
    ulimit umask unalias unset wait
""".split())

SHELL = "/bin/sh"


def direct_argv(argv: list[str]) -> list[str] | None:
    """The argv that runs ``argv`` (a ``/bin/sh -c LINE``) without the shell, or None when
    the shell is needed (or ``argv`` is not such a line). A new list each call."""
    if len(argv) != 3 or argv[0] != SHELL or argv[1] != "-c":
        return None
    line = argv[2]
    if len(line) > 4096 or not _PLAIN.fullmatch(line):
        return None
    words = line.split()
    if not words:
        return None
    prog = words[0]
    if "=" in prog or ("/" not in prog and prog in _SHELL_NAMES):
        return None
    return words


_pwd_checked: dict[str | None, str | None] = {}


def shell_pwd(env: dict[str, str]) -> str | None:
    """The PWD dash would export to the program when it differs from ``env``'s, else None.

    dash keeps an inherited PWD that names the working directory (it may go through a
    symbolic link) and otherwise exports the physical one.
    """
    given = env.get("PWD")
    if given in _pwd_checked:
        return _pwd_checked[given]
    want: str | None = None
    try:
        here = os.stat(".")
        if not (given and given.startswith("/") and os.path.samestat(os.stat(given), here)):
            want = os.getcwd()
    except OSError:
        want = None  # no working directory to name: leave the environment as it is
    _pwd_checked[given] = want
    return want
