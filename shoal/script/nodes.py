"""Shared pieces of the static interpreter: tree helpers, control-flow signals, constants."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .model import Step
from .parser import Node
from .simfs import SimFS

MAX_LOOP = 1_000_000  # iterations of one while loop before we call it infinite

# Programs whose output a command substitution may compute at compile time: they only read their
# arguments, stdin and unmodified input files, and write only stdout.
PURE_FILTERS = frozenset({
    "sed", "tr", "cut", "sort", "uniq", "head", "tail", "wc", "grep", "egrep", "fgrep", "awk",
    "gawk", "mawk", "paste", "rev", "tac", "fold", "nl", "printf", "seq", "md5sum", "date",
    "sha256sum", "column", "fmt", "expand", "ncdump", "ncks",
})
# Programs that always succeed (so `mkdir -p d && cd d` can be decided statically).
ALWAYS_OK = frozenset({"echo", "printf", ":", "true"})
# Devices whose writes always succeed, so a status stays known at compile time. Any other
# (/dev/full, bash's /dev/tcp and /dev/udp, a tty) can fail at run time: bash then gives
# status 1 where the compiler would have assumed 0.
QUIET_DEVICES = frozenset(("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2"))
STATIC_BUILTINS = frozenset({
    "cd", "export", "unset", "local", "readonly", "declare", "typeset", "set", "shift", "exit",
    "return", "break", "continue", "true", "false", ":", "test", "[", "[[", "let", "source", ".",
    "read", "pushd", "popd", "shopt", "trap", "umask", "alias", "wait", "eval", "exec",
    "getopts", "dirs",
})
CAPTURE_HELPERS = frozenset({"echo", "printf", "basename", "dirname", "seq", "expr", "pwd"})
_BUILTIN_METHOD = {"[": "lbrack", ".": "dot", ":": "colon", "[[": "lbrack"}
_SKIP = frozenset({"comment", ";", ";;", "&", "\n", "{", "}", "do", "done", "then", "fi", "else",
                   "(", ")", "in", "esac", "heredoc_body"})
_WORDLIKE = frozenset({
    "word", "string", "raw_string", "ansi_c_string", "translated_string", "simple_expansion",
    "expansion", "concatenation", "number", "command_substitution", "arithmetic_expansion",
    "test_operator", "regex", "extglob_pattern", "brace_expression",
})
_SPECIAL_WORD = re.compile(rb"[\\~*?\[{]")
_BLOCKS = frozenset({"program", "compound_statement", "do_group", "else_clause"})
_SLOW = object()  # a planned word that needs the general expander this time
_BRACE = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")



class _Break(Exception):
    def __init__(self, n: int) -> None:
        self.n = n


class _Continue(_Break):
    pass


class _Return(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


class _Exit(Exception):
    def __init__(self, status: int | None) -> None:
        self.status = status


@dataclass
class Result:
    """What interpretation produced."""

    steps: list[Step]
    unknown: dict[str, list[int]] = field(default_factory=dict)  # program -> lines
    warnings: list[str] = field(default_factory=list)
    exit_status: int | None = None  # set when the script calls `exit` statically
    fs: SimFS | None = None
    # files a compile-time decision looked at (a glob matched it, a test asked about it), with
    # the first line that did: if the command that makes it fails, that decision was wrong
    observed: dict[str, int] = field(default_factory=dict)


def _line(node: Node) -> int:
    return node.start_point[0] + 1


def _key(node: Node) -> tuple[int, int]:
    return (node.start_byte, node.end_byte)


def _lead(node: Node) -> str:
    """Text tree-sitter folds into an expansion's first token (``' $('``): it is literal."""
    raw = node.text or b""
    if not raw or raw[:1] in (b"$", b"`"):
        return ""
    cut = min((i for i in (raw.find(b"$"), raw.find(b"`")) if i >= 0), default=0)
    return raw[:cut].decode(errors="surrogateescape")


def _text(node: Node) -> str:
    return node.text.decode(errors="surrogateescape")


def _named(node: Node) -> list[Node]:
    return [c for c in node.children if c.is_named and c.type != "comment"]

