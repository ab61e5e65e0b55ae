"""Data model shared by the compiler stages: steps (DAG nodes) and their file uses."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

# roles of a file in a step
IN = "in"        # read
OUT = "out"      # written from scratch (a new version)
INOUT = "inout"  # read and rewritten in place (append, sed -i, ncatted, NCO -A)
DEL = "del"      # removed (rm, mv source, gzip source)


@dataclass
class FileUse:
    """One file a step touches.

    ``loc`` says where its name is written in the step, so the runner can substitute a renamed
    version: ``(stage, "a", argv_index)`` or ``(stage, "r", redirect_index)``; None when the name
    does not appear literally (``cp a b dir/`` writes ``dir/a``), which pins the file to its name.
    ``prefix`` is the text before the name in that word (``--output=``, ``-o``).
    """

    path: str
    role: str
    loc: tuple[int, str, int] | None = None
    prefix: str = ""


@dataclass
class Redirect:
    """A redirection of one stage. ``target`` is a path, or an fd for duplications (``2>&1``)."""

    fd: str      # "" for the default of the operator
    op: str      # <, >, >>, &>, &>>, >&, <&, <>, >|
    target: str

    def render(self, target: str | None = None) -> str:
        t = self.target if target is None else target
        if self.op in (">&", "<&") and (t.isdigit() or t == "-"):
            return f"{self.fd}{self.op}{t}"
        return f"{self.fd}{self.op}{shlex.quote(t)}"


@dataclass
class Stage:
    """One command of a pipeline: argv, redirections, ``VAR=value`` prefixes, here-document."""

    argv: list[str]
    redirects: list[Redirect] = field(default_factory=list)
    assigns: dict[str, str] = field(default_factory=dict)
    heredoc: str | None = None


# `set` options the runner puts in front of a command (errexit is modelled by the runner)
RUN_OPTIONS = {"pipefail": "pipefail", "u": "nounset", "f": "noglob", "C": "noclobber"}


def option_prologue(options: frozenset[str], shopt: frozenset[str]) -> str:
    """``set -o ...; shopt -s ...;`` for the options a command must run with ('' if none)."""
    names = sorted(RUN_OPTIONS[o] for o in options if o in RUN_OPTIONS)
    text = f"set -o {' -o '.join(names)}; " if names else ""
    if shopt:
        text += f"shopt -s {' '.join(sorted(shopt))}; "
    return text


@dataclass
class Step:
    """A node of the DAG: one command line of the script as bash would run it.

    A pipeline is one step; ``a || b`` with ``a`` only known at run time is one step too
    (``groups`` holds the pipelines, ``connectors`` the ``&&``/``||`` between them).
    """

    id: int
    line: int
    stages: list[Stage]
    groups: list[list[int]]                 # pipelines, as lists of stage indices
    connectors: list[str]                   # between groups
    negated: list[bool]                     # per group: `! pipeline`
    cwd: str
    env: dict[str, str | None]              # exported vars changed since start (None: unset)
    uses: list[FileUse] = field(default_factory=list)
    barrier: bool = False                   # unknown program: runs alone
    after: set[int] = field(default_factory=set)  # control dependencies (`a && b`)
    programs: list[str] = field(default_factory=list)
    mkdirs: list[str] = field(default_factory=list)  # directories this step creates
    # shell options in force at this command: `set` letters ("e", "u", "x", "f", "C", ...) and
    # "pipefail"; `shopt -s` names. The runner runs the command with those that change how it
    # runs (RUN_OPTIONS); errexit it models itself (``errexit``, filled by the compiler).
    options: frozenset[str] = frozenset()
    shopt: frozenset[str] = frozenset()
    errexit: bool = False                   # a failure here ends the script (`set -e`)

    def render(self, subst: dict[tuple[int, str, int], str | None] | None = None) -> str:
        """The step as one ``sh`` command line, with words replaced as ``subst`` says.

        ``subst`` maps a location (see :class:`FileUse`) to its new word, or to None to drop it.
        """
        subst = subst or {}
        parts: list[str] = []
        bodies: list[str] = []  # here-document bodies follow the whole command line
        for g, group in enumerate(self.groups):
            words: list[str] = []
            for si in group:
                st = self.stages[si]
                w = [f"{k}={shlex.quote(v)}" for k, v in st.assigns.items()]
                for i, a in enumerate(st.argv):
                    new = subst.get((si, "a", i), a)
                    if new is not None:
                        w.append(shlex.quote(new))
                w += [r.render(subst.get((si, "r", i))) for i, r in enumerate(st.redirects)]
                if not st.argv and not st.redirects and not st.assigns:
                    w.append(":")
                if st.heredoc is not None:
                    w.append(f"<<'SHOAL_EOF_{si}'")
                    bodies.append(f"{st.heredoc}SHOAL_EOF_{si}")
                words.append(" ".join(w))
            text = " | ".join(words)
            if self.negated[g]:
                text = "! " + text
            if g:
                parts.append(self.connectors[g - 1])
            parts.append(text)
        return "\n".join([" ".join(parts), *bodies])

    def describe(self) -> str:
        """Short text for listings (no renaming)."""
        text = self.render()
        return text if "\n" not in text else text.split("\n", 1)[0] + " <<...>>"
