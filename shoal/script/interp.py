"""Static interpreter: walks the tree-sitter-bash tree the way bash would run the script.

Variables, loops, conditions, functions and expansions are evaluated here, at compile time,
against a simulated file system (:class:`~shoal.script.simfs.SimFS`). What only the running
programs can decide (their output, their exit status) is never guessed: a construct that needs it
raises :class:`~shoal.script.errors.Unsupported` naming the line. Every command that runs a
program becomes a :class:`~shoal.script.model.Step` with the files it reads and writes.
"""

from __future__ import annotations

import fnmatch
import operator
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .errors import ScriptError, Unsupported
from .model import DEL, IN, INOUT, OUT, FileUse, Redirect, Stage, Step
from .parser import Node, parse, parse_fragment
from .semantics import Semantics
from .simfs import SimFS, has_glob

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
STATIC_BUILTINS = frozenset({
    "cd", "export", "unset", "local", "readonly", "declare", "typeset", "set", "shift", "exit",
    "return", "break", "continue", "true", "false", ":", "test", "[", "[[", "let", "source", ".",
    "read", "pushd", "popd", "shopt", "trap", "umask", "alias", "wait", "eval", "exec",
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
    def __init__(self, status: int) -> None:
        self.status = status


@dataclass
class Result:
    """What interpretation produced."""

    steps: list[Step]
    unknown: dict[str, list[int]] = field(default_factory=dict)  # program -> lines
    warnings: list[str] = field(default_factory=list)
    exit_status: int | None = None  # set when the script calls `exit` statically
    fs: SimFS | None = None


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


def _escape_glob(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _unescape_word(text: str) -> list[tuple[str, bool]]:
    """Split an unquoted word into (text, quoted) pieces; a backslash quotes the next char."""
    if "\\" not in text:
        return [(text, False)]
    out: list[tuple[str, bool]] = []
    i = 0
    buf = ""
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            if text[i + 1] == "\n":  # line continuation
                i += 2
                continue
            if buf:
                out.append((buf, False))
                buf = ""
            out.append((text[i + 1], True))
            i += 2
            continue
        buf += c
        i += 1
    if buf:
        out.append((buf, False))
    return out


def _dq_unescape(text: str) -> str:
    # inside double quotes a backslash only escapes $ ` " \ and newline
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _ansi_c(text: str) -> str:
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return text


def brace_expand(text: str) -> list[str]:
    """Bash brace expansion of one raw word (``a{b,c}d``, ``x{1..3}``); quotes are respected."""
    depth_q = None
    i = 0
    while i < len(text):
        c = text[i]
        if depth_q:
            if c == depth_q:
                depth_q = None
            elif c == "\\" and depth_q == '"':
                i += 1
        elif c in "'\"":
            depth_q = c
        elif c == "\\":
            i += 1
        elif c == "{" and (i == 0 or text[i - 1] != "$"):
            depth = 0
            j = i
            parts: list[str] = []
            start = i + 1
            while j < len(text):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif text[j] == "," and depth == 1:
                    parts.append(text[start:j])
                    start = j + 1
                j += 1
            if j >= len(text):
                return [text]
            pre, body, post = text[:i], text[i + 1:j], text[j + 1:]
            if parts:
                parts.append(text[start:j])
                alts = parts
            else:
                m = re.fullmatch(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?", body)
                if not m:
                    return [pre + "{" + body + "}" + s for s in brace_expand(post)]
                a, b, step = m.group(1), m.group(2), abs(int(m.group(3) or 1)) or 1
                if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
                    lo, hi = int(a), int(b)
                    rng = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
                    width = max(len(a), len(b)) if (a.startswith("0") or b.startswith("0")) else 0
                    alts = [str(v).zfill(width) for v in rng]
                else:
                    lo, hi = ord(a), ord(b)
                    rng = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
                    alts = [chr(v) for v in rng]
            out: list[str] = []
            for alt in alts:
                for tail in brace_expand(post):
                    out.extend(brace_expand(pre + alt + tail))
            return out
        i += 1
    return [text]


_DEFAULT_IFS = " \t\n"


@lru_cache(maxsize=16)
def _ifs_splitter(ifs: str) -> re.Pattern[str]:
    # IFS white space separates runs; other IFS characters separate single fields
    ws = "".join(c for c in ifs if c in " \t\n")
    other = "".join(c for c in ifs if c not in " \t\n")
    parts = []
    if ws:
        parts.append("[" + re.escape(ws) + "]+")
    if other:
        w = "[" + re.escape(ws) + "]*" if ws else ""
        parts.append(w + "[" + re.escape(other) + "]" + w)
    return re.compile("|".join(reversed(parts)))


class _Fields:
    """Builds the fields of one word during expansion (word splitting happens here)."""

    def __init__(self) -> None:
        self.fields: list[list[tuple[str, bool]]] = []
        self.cur: list[tuple[str, bool]] | None = None

    def lit(self, text: str, quoted: bool) -> None:
        if self.cur is None:
            self.cur = []
            self.fields.append(self.cur)
        self.cur.append((text, quoted))

    def split(self, text: str, ifs: str) -> None:
        if ifs == _DEFAULT_IFS and " " not in text and "\t" not in text and "\n" not in text:
            if text:  # nothing to split (the usual case)
                self.lit(text, False)
            return
        if ifs == "":
            if text:
                self.lit(text, False)
            return
        hard = any(c not in " \t\n" for c in ifs)  # a:b::c has an empty field
        pieces = _ifs_splitter(ifs).split(text.strip(" \t\n") if hard else text)
        if hard and pieces and pieces[-1] == "":
            pieces.pop()
        for k, piece in enumerate(pieces):
            if k:
                self.cur = None
            if piece or hard:
                self.lit(piece, False)

    def brk(self) -> None:
        self.cur = None


class Interpreter:
    """Runs a script statically; see the module docstring."""

    def __init__(self, semantics: Semantics, cwd: str, workdir: str, script: str = "script",
                 args: list[str] | None = None, strict: bool = False,
                 environ: dict[str, str] | None = None) -> None:
        self.sem = semantics
        self.cwd = os.path.abspath(cwd)
        self.workdir = os.path.abspath(workdir)
        self.script = script
        self.strict = strict
        self.environ = dict(os.environ if environ is None else environ)
        self.vars: dict[str, str] = dict(self.environ)
        self.vars["PWD"] = self.cwd  # what bash sets when the script starts here
        self.exported: set[str] = set(self.environ) | {"PWD"}
        self.positional: list[str] = list(args or [])
        self.functions: dict[str, Node] = {}
        self.locals: list[dict[str, str | None]] = []
        self.fs = SimFS()
        self.steps: list[Step] = []
        self.result = Result(self.steps, fs=self.fs)
        self.last_status: int | None = 0
        self.line = 0
        self.set_e = False
        self._capture: list[list[str]] = []
        self._stdin: list[list[str]] = []
        self._control: list[set[int]] = []   # steps the next steps depend on (`a && b`)
        self._guard: int | None = None       # line of a run-time condition we are under
        self._dirstack: list[str] = []
        self._extra: dict[tuple[int, int], list[Node]] = {}  # redirects moved onto a node
        self._env_gen = 0
        self._pre_argv: dict[tuple[int, int], list[str]] = {}
        self._parts_cache: dict[int, tuple[Node, tuple]] = {}  # type: ignore[type-arg]
        self._kids_cache: dict[int, tuple[Node, list[Node]]] = {}
        self._plan_cache: dict[int, tuple[Node, tuple | None]] = {}  # type: ignore[type-arg]
        self._env_key: tuple[int, int] | None = None
        self._env_cache: dict[str, str] = {}
        self._stmts_cache: dict[int, tuple[Node, list[Node]]] = {}
        self._assign_cache: dict[int, tuple[Node, tuple]] = {}  # type: ignore[type-arg]
        self._arith_cache: dict[int, tuple[Node, tuple]] = {}  # type: ignore[type-arg]
        self._test_cache: dict[int, tuple[Node, list]] = {}  # type: ignore[type-arg]
        self._aexprs_cache: dict[int, tuple[Node, list[Node]]] = {}
        self._subst_cache: dict[int, tuple[Node, tuple]] = {}  # type: ignore[type-arg]
        self._readable: dict[str, bool] = {}
        self._handlers = {name[3:]: getattr(self, name) for name in dir(type(self))
                          if name.startswith("_x_")}

    # ------------------------------------------------------------------ entry points
    def run_source(self, source: bytes) -> Result:
        """Interpret a whole script."""
        root = parse(source, self.script)
        try:
            self.exec_node(root)
        except _Exit as e:
            self.result.exit_status = e.status
        except (_Break, _Return):
            pass
        except ScriptError as e:
            e.script = self.script
            if e.line is None:
                e.line = self.line
            raise
        except RecursionError:
            raise Unsupported("recursion too deep (a function calling itself forever?)",
                              self.line, self.script)
        return self.result

    def error(self, message: str, cls: type[ScriptError] = ScriptError) -> ScriptError:
        return cls(message, self.line, self.script)

    # ------------------------------------------------------------------ statements
    def exec_node(self, node: Node) -> int | None:
        """Execute a statement node; return its exit status, or None if only known at run time."""
        t = node.type
        if t in _BLOCKS:
            stmts = self._stmts(node)
            if stmts is None:  # `(( ... ))`
                self.line = _line(node)
                return self._arith_command(node)
            status: int | None = 0
            for child in stmts:
                status = self.exec_node(child)
            return status
        self.line = node.start_point[0] + 1
        handler = self._handlers.get(t)
        if handler is None:
            raise self.error(f"unsupported shell construct '{t}'", Unsupported)
        status = handler(node)
        self.last_status = status
        if status not in (None, 0) and self.set_e and not self._capture:
            raise _Exit(status)
        return status

    def _x_comment(self, node: Node) -> int | None:
        return self.last_status

    def _x_variable_assignment(self, node: Node) -> int:
        self._assign_node(node)
        return 0

    def _x_variable_assignments(self, node: Node) -> int:
        for c in _named(node):
            self._assign_node(c)
        return 0

    def _assign_node(self, node: Node, local: bool = False) -> None:
        hit = self._assign_cache.get(node.id)
        if hit is not None and hit[0] == node:
            name, value, append = hit[1]
        else:
            name_node = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            if name_node is None or name_node.type == "subscript":
                raise self.error("arrays are not supported", Unsupported)
            if value is not None and value.type == "array":
                raise self.error("arrays are not supported", Unsupported)
            name = _text(name_node)
            append = any(c.type == "+=" for c in node.children)
            self._assign_cache[node.id] = (node, (name, value, append))
        text = self.expand_str(value) if value is not None else ""
        if append:
            text = self.vars.get(name, "") + text
        self.set_var(name, text, local)

    def set_var(self, name: str, value: str, local: bool = False) -> None:
        self._check_guard(f"assignment to {name}")
        if local and self.locals:
            self.locals[-1].setdefault(name, self.vars.get(name))
        if name in self.exported:
            self._env_gen += 1
        self.vars[name] = value

    def _check_guard(self, what: str) -> None:
        if self._guard is not None:
            raise self.error(f"{what} runs only if the command on line {self._guard} succeeds, "
                             "which is known only when the script runs", Unsupported)

    def _x_declaration_command(self, node: Node) -> int:
        kind = _text(node.children[0])
        export = kind == "export"
        for c in node.children[1:]:
            if c.type == "variable_assignment":
                self._assign_node(c, local=kind in ("local", "declare", "typeset"))
                name = _text(c.child_by_field_name("name"))  # type: ignore[arg-type]
            elif c.type in ("variable_name", "word"):
                name = self.expand_str(c)
                if name.startswith("-"):
                    if "x" in name:
                        export = True
                    continue
                if kind == "local":
                    self.set_var(name, self.vars.get(name, ""), local=True)
            else:
                continue
            if export:
                self._check_guard("export")
                self.exported.add(name)
                self._env_gen += 1
        return 0

    def _x_unset_command(self, node: Node) -> int:
        self._check_guard("unset")
        for c in node.children[1:]:
            name = self.expand_str(c)
            if name.startswith("-"):
                continue
            self.vars.pop(name, None)
            self.functions.pop(name, None)
            self._env_gen += 1
        return 0

    def _x_function_definition(self, node: Node) -> int:
        self._check_guard("function definition")
        name = node.child_by_field_name("name")
        body = node.child_by_field_name("body")
        assert name is not None and body is not None
        self.functions[_text(name)] = body
        return 0

    def _x_negated_command(self, node: Node) -> int | None:
        inner = _named(node)[0]
        if self._dynamic(inner):
            return self._emit_list([("", inner)], negate_first=True)
        status = self.exec_node(inner)
        return None if status is None else int(status == 0)

    def _x_if_statement(self, node: Node) -> int | None:
        # if COND; then BODY; [elif COND; then BODY;]* [else BODY;] fi
        branches: list[tuple[list[Node], list[Node]]] = []
        cond: list[Node] = []
        body: list[Node] = []
        in_body = False
        other: Node | None = None
        for c in node.children:
            if c.type in ("if", "fi", ";", "comment", "\n"):
                continue
            if c.type == "then":
                in_body = True
                continue
            if c.type == "elif_clause":
                branches.append((cond, body))
                cond, body, in_body = [], [], False
                for e in c.children:
                    if e.type in ("elif", ";", "comment"):
                        continue
                    if e.type == "then":
                        in_body = True
                        continue
                    (body if in_body else cond).append(e)
                continue
            if c.type == "else_clause":
                other = c
                continue
            (body if in_body else cond).append(c)
        branches.append((cond, body))
        for cond_nodes, body_nodes in branches:
            status = self._condition(cond_nodes)
            if status == 0:
                return self._exec_seq(body_nodes)
        if other is not None:
            return self.exec_node(other)
        return 0

    def _condition(self, nodes: list[Node]) -> int:
        status: int | None = 0
        for n in nodes:
            if n.is_named:
                status = self.exec_node(n)
        if status is None:
            raise self.error("condition depends on a program's exit status, which is known "
                             "only when the script runs", Unsupported)
        return status

    def _exec_seq(self, nodes: list[Node]) -> int | None:
        status: int | None = 0
        for n in nodes:
            if n.is_named and n.type not in _SKIP:
                status = self.exec_node(n)
        return status

    def _loop_body(self, body: Node) -> bool:
        """Run one iteration; False means `break`."""
        try:
            self.exec_node(body)
        except _Continue as e:
            if e.n > 1:
                raise _Continue(e.n - 1)
        except _Break as e:
            if e.n > 1:
                raise _Break(e.n - 1)
            return False
        return True

    def _x_for_statement(self, node: Node) -> int | None:
        var = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        assert var is not None and body is not None
        values = [c for i, c in enumerate(node.children)
                  if node.field_name_for_child(i) == "value"]
        has_in = any(c.type == "in" for c in node.children)
        words = self.expand_words(values) if has_in else list(self.positional)
        name = _text(var)
        for w in words:
            self.set_var(name, w)
            if not self._loop_body(body):
                break
        return 0

    def _x_c_style_for_statement(self, node: Node) -> int | None:
        body = node.child_by_field_name("body")
        assert body is not None
        parts: list[list[Node]] = [[]]
        for c in node.children[2:]:  # after 'for' '(('
            if c.type in (";", "))"):
                parts.append([])
                if c.type == "))":
                    break
                continue
            if c.type == ",":
                continue
            parts[-1].append(c)
        init, cond, upd = (parts + [[], [], []])[:3]
        for n in init:
            self.arith(n)
        for _ in range(MAX_LOOP):
            if cond and all(self.arith(n) == 0 for n in cond[-1:]):
                return 0
            if not self._loop_body(body):
                return 0
            for n in upd:
                self.arith(n)
        raise self.error("loop does not end after a million iterations", Unsupported)

    def _x_while_statement(self, node: Node) -> int | None:
        until = node.children[0].type == "until"
        conds = [c for i, c in enumerate(node.children)
                 if node.field_name_for_child(i) == "condition"]
        body = node.child_by_field_name("body")
        assert body is not None
        for _ in range(MAX_LOOP):
            status = self._condition(conds)
            if (status == 0) == until:
                return 0
            if not self._loop_body(body):
                return 0
        raise self.error("loop does not end after a million iterations", Unsupported)

    def _x_case_statement(self, node: Node) -> int | None:
        value_node = node.child_by_field_name("value")
        assert value_node is not None
        value = self.expand_str(value_node)
        items = [c for c in node.children if c.type == "case_item"]
        matched = False
        for item in items:
            if not matched:
                pats = [c for i, c in enumerate(item.children)
                        if item.field_name_for_child(i) == "value"]
                matched = any(self._match_pattern(value, p) for p in pats)
            if matched:
                fall = item.child_by_field_name("fallthrough")
                body = [c for i, c in enumerate(item.children)
                        if item.field_name_for_child(i) is None and c.is_named]
                status = self._exec_seq(body)
                if fall is not None and _text(fall) == ";&":
                    continue
                if fall is not None and _text(fall) == ";;&":
                    matched = False
                    continue
                return status
        return 0

    def _match_pattern(self, value: str, pat: Node) -> bool:
        f = _Fields()
        self._expand_into(pat, f, quoted=False)
        pattern = "".join(_escape_glob(t) if q else t for fl in f.fields for t, q in fl)
        return fnmatch.fnmatchcase(value, pattern)

    def _x_subshell(self, node: Node) -> int | None:
        with self._saved_state():
            try:
                return self._exec_seq(node.children)
            except _Exit as e:
                return e.status

    @contextmanager
    def _saved_state(self) -> Iterator[None]:
        saved = (self.vars, self.exported, self.positional, self.cwd, self.functions)
        env_valid = self._env_key == (id(self.vars), self._env_gen)
        env_cache = self._env_cache
        self.vars = dict(self.vars)
        self.exported = set(self.exported)
        self.positional = list(self.positional)
        self.functions = dict(self.functions)
        try:
            yield
        finally:
            self.vars, self.exported, self.positional, self.cwd, self.functions = saved
            self._env_gen += 1
            if env_valid:  # the caller's variables are back, unchanged: so is their env
                self._env_key, self._env_cache = (id(self.vars), self._env_gen), env_cache

    def _x_test_command(self, node: Node) -> int:
        hit = self._test_cache.get(node.id)
        if hit is not None and hit[0] == node:
            double, flat = hit[1]
        else:
            double = node.children[0].type == "[["
            flat = []
            for c in node.children[1:-1]:
                self._flatten_test(c, flat, double)
            self._test_cache[node.id] = (node, (double, flat))
        # flat: (node to expand, or a token, and whether it is a pattern)
        words = [self.expand_str(w) if type(w) is not str else w for w, _ in flat]
        return 0 if self._test(words, [p for _, p in flat], double) else 1

    def _flatten_test(self, node: Node, out: list[tuple[Node | str, bool]], double: bool
                      ) -> None:
        if node.type in _WORDLIKE:
            pattern = double and node.type in ("word", "extglob_pattern", "concatenation", "regex")
            # an operator (-lt, -f) expands to itself
            out.append((_text(node) if node.type == "test_operator" else node, pattern))
        elif node.is_named and node.type in ("binary_expression", "unary_expression",
                                             "parenthesized_expression", "negated_expression"):
            for c in node.children:
                self._flatten_test(c, out, double)
        elif not node.is_named:
            tok = _text(node)
            out.append(({"&&": "-a", "||": "-o"}.get(tok, tok) if double else tok, False))
        else:
            out.append((node, False))

    def _x_redirected_statement(self, node: Node) -> int | None:
        body = node.child_by_field_name("body")
        redirects = [c for i, c in enumerate(node.children)
                     if node.field_name_for_child(i) == "redirect"]
        if body is None:  # bare `> file` truncates
            return self._emit_list([("", node)])
        if body.type == "list":
            # tree-sitter hangs `a && b > f` on the list; in bash it belongs to `b` alone
            items = self._flatten_list(body)
            self._extra[_key(items[-1][1])] = redirects
            return self._x_list(body)
        if body.type in ("command", "pipeline", "negated_command"):
            return self._emit_list([("", node)])
        if body.type in ("while_statement", "for_statement", "compound_statement"):
            lines = self._static_input(redirects)
            if lines is not None:
                self._stdin.append(lines)
                try:
                    return self.exec_node(body)
                finally:
                    self._stdin.pop()
        raise self.error(f"redirection of a whole '{body.type.replace('_', ' ')}' is not "
                         "supported (redirect each command inside it)", Unsupported)

    def _static_input(self, redirects: list[Node]) -> list[str] | None:
        if len(redirects) != 1:
            return None
        r = redirects[0]
        if r.type == "herestring_redirect":
            return (self.expand_str(_named(r)[-1]) + "\n").splitlines()
        if r.type == "file_redirect" and any(c.type == "<" for c in r.children):
            dest = r.child_by_field_name("destination")
            assert dest is not None
            return self._read_static_file(self.expand_str(dest)).splitlines()
        return None

    def _read_static_file(self, name: str) -> str:
        path = os.path.normpath(os.path.join(self.cwd, name))
        if path in self.fs.written:
            raise self.error(f"reads '{name}' at compile time, but line {self.fs.written[path]} "
                             "writes it when the script runs", Unsupported)
        if not self.fs.isfile(path):
            raise self.error(f"'{name}' does not exist")
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                return f.read()
        except OSError as exc:
            raise self.error(f"cannot read '{name}': {exc.strerror}")

    def _x_pipeline(self, node: Node) -> int | None:
        parts = _named(node)
        last = parts[-1]
        if last.type in ("while_statement", "for_statement", "compound_statement"):
            text = self._capture_nodes(parts[:-1], pipeline=True)
            self._stdin.append(text.splitlines())
            try:
                return self.exec_node(last)
            finally:
                self._stdin.pop()
        if self._capture:
            return self._static_pipeline(parts)
        return self._emit_list([("", node)])

    def _x_list(self, node: Node) -> int | None:
        items = self._flatten_list(node)
        if any(op == "||" for op, _ in items) and self._dynamic(items[0][1]):
            # `a || b` with `a` decided at run time: one step, run as written
            return self._emit_list(items)
        mark = len(self.steps)
        status = self.exec_node(items[0][1])
        for op, item in items[1:]:
            if status is None:
                if op == "||":
                    raise self.error("'||' after a command whose exit status is known only at "
                                     "run time, mixed with '&&'", Unsupported)
                # `a && b`: b's steps depend on a's, and the runner skips them when a fails
                deps = {s.id for s in self.steps[mark:]}
                mark = len(self.steps)
                self._control.append(deps)
                saved_guard = self._guard
                self._guard = self._guard or self.line
                try:
                    self.exec_node(item)
                finally:
                    self._guard = saved_guard
                    self._control.pop()
                status = None
            elif (op == "&&" and status == 0) or (op == "||" and status != 0):
                mark = len(self.steps)
                status = self.exec_node(item)
        return status

    def _flatten_list(self, node: Node) -> list[tuple[str, Node]]:
        if node.type != "list":
            return [("", node)]
        out: list[tuple[str, Node]] = []
        op = ""
        for c in node.children:
            if c.type in ("&&", "||"):
                op = c.type
            elif c.is_named and c.type != "comment":
                sub = self._flatten_list(c)
                sub[0] = (op, sub[0][1])
                out.extend(sub)
        return out

    def _dynamic(self, node: Node) -> bool:
        """True when executing ``node`` runs a program whose status is known only at run time."""
        if node.type == "negated_command":
            return self._dynamic(_named(node)[0])
        if node.type == "redirected_statement":
            body = node.child_by_field_name("body")
            return body is None or self._dynamic(body)
        if node.type == "pipeline":
            return True
        if node.type == "command":
            name = node.child_by_field_name("name")
            if name is None:
                return False
            prog = _text(name)
            return not (prog in STATIC_BUILTINS or prog in self.functions or prog in ALWAYS_OK)
        return False

    def _parts(self, node: Node) -> tuple[Node | None, list[Node], list[Node], list[Node], list]:  # type: ignore[type-arg]
        """(name, arguments, assignments, redirects, word programs of name and arguments) of a
        command node, cached per node (see :meth:`_word_prog`).

        Loop bodies are walked once per iteration; tree-sitter builds new child objects on
        every access, so this is worth remembering. The cache holds the node itself, which
        keeps its tree alive, so a node id is never reused by another tree meanwhile.
        """
        hit = self._parts_cache.get(node.id)
        if hit is not None and hit[0] == node:
            return hit[1]
        name = None
        args: list[Node] = []
        assigns: list[Node] = []
        redirects: list[Node] = []
        for i, c in enumerate(node.children):
            f = node.field_name_for_child(i)
            if f == "name":
                name = c
            elif f == "argument":
                args.append(c)
            elif f == "redirect":
                redirects.append(c)
            elif c.type == "variable_assignment":
                assigns.append(c)
        words = ([name] if name is not None else []) + args
        parts = (name, args, assigns, redirects, [self._word_prog(w, False) for w in words])
        self._parts_cache[node.id] = (node, parts)
        return parts

    def _stmts(self, node: Node) -> list[Node] | None:
        """The statements of a block node, cached; None for an arithmetic ``(( ))`` command."""
        hit = self._stmts_cache.get(node.id)
        if hit is not None and hit[0] == node:
            return hit[1]
        kids = node.children
        stmts: list[Node] | None
        if node.type == "compound_statement" and kids and kids[0].type == "((":
            stmts = None
        else:
            stmts = [c for c in kids if c.is_named and c.type not in _SKIP]
        self._stmts_cache[node.id] = (node, stmts)  # type: ignore[assignment]
        return stmts

    def _kids(self, node: Node) -> list[Node]:
        """``node.children``, cached like :meth:`_parts`."""
        hit = self._kids_cache.get(node.id)
        if hit is not None and hit[0] == node:
            return hit[1]
        kids = node.children
        self._kids_cache[node.id] = (node, kids)
        return kids

    def _x_command(self, node: Node) -> int | None:
        name_node, _args, assigns, _r, progs = self._parts(node)
        if name_node is None:
            for a in assigns:
                self._assign_node(a)
            return 0
        argv = self._expand_progs(progs)
        if not argv:
            return 0
        prog = argv[0]
        if prog in self.functions:
            return self._call(prog, argv[1:])
        if prog in STATIC_BUILTINS or (self._capture and prog in CAPTURE_HELPERS):
            method = getattr(self, "_b_" + _BUILTIN_METHOD.get(prog, prog), None)
            if method is None:
                raise self.error(f"builtin '{prog}' is not supported", Unsupported)
            return method(argv[1:])
        if self._capture:
            return self._static_pipeline([node])
        if self._extra and _key(node) in self._extra:
            self._pre_argv[_key(node)] = argv  # _stage would expand the same words again
            return self._emit_list([("", node)])
        # a plain command (the usual case): what _emit_list and _stage would do, directly
        st = Stage(argv, [], {})
        for c in assigns:
            self._stage_assign(c, st)
        for r in _r:  # redirects written inside the command node
            self._redirect(r, st)
        return self._emit([st], [[0]], [], [False])

    def _call(self, name: str, args: list[str]) -> int | None:
        saved = self.positional
        self.positional = args
        self.locals.append({})
        try:
            return self.exec_node(self.functions[name])
        except _Return as r:
            return r.status
        finally:
            self.positional = saved
            self._env_gen += 1
            for k, v in self.locals.pop().items():
                if v is None:
                    self.vars.pop(k, None)
                else:
                    self.vars[k] = v

    def _arith_command(self, node: Node) -> int:
        exprs = self._arith_exprs(node)
        value = 0
        for e in exprs:
            value = self.arith(e)
        return 0 if value != 0 else 1

    # ------------------------------------------------------------------ builtins (static)
    def _out(self, text: str) -> None:
        if not self._capture:
            raise AssertionError("static output outside a substitution")
        self._capture[-1].append(text)

    def _b_cd(self, args: list[str]) -> int:
        self._check_guard("cd")
        target = args[0] if args else self.vars.get("HOME", "/")
        if target == "-":
            target = self.vars.get("OLDPWD", self.cwd)
        path = os.path.normpath(os.path.join(self.cwd, target))
        if not self.fs.isdir(path):
            raise self.error(f"cd: '{target}' is not a directory at this point of the script")
        self.vars["OLDPWD"] = self.cwd
        self.cwd = path
        self.vars["PWD"] = path
        return 0

    def _b_pushd(self, args: list[str]) -> int:
        self._dirstack.append(self.cwd)
        return self._b_cd(args)

    def _b_popd(self, args: list[str]) -> int:
        if not self._dirstack:
            raise self.error("popd: directory stack empty")
        self._check_guard("popd")
        self.cwd = self._dirstack.pop()
        return 0

    def _b_export(self, args: list[str]) -> int:
        self._check_guard("export")
        for a in args:
            if a.startswith("-"):
                continue
            name, eq, value = a.partition("=")
            if eq:
                self.vars[name] = value
            self.exported.add(name)
            self._env_gen += 1
        return 0

    def _b_set(self, args: list[str]) -> int:
        self._check_guard("set")
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                self.positional = args[i + 1:]
                return 0
            if a.startswith(("-", "+")) and len(a) > 1:
                on = a[0] == "-"
                if a[1:] == "o" and i + 1 < len(args):
                    if args[i + 1] == "errexit":
                        self.set_e = on
                    i += 2
                    continue
                if "e" in a[1:]:
                    self.set_e = on
                i += 1
                continue
            self.positional = args[i:]
            return 0
        return 0

    def _b_shift(self, args: list[str]) -> int:
        self._check_guard("shift")
        n = int(args[0]) if args else 1
        if n > len(self.positional):
            return 1
        self.positional = self.positional[n:]
        return 0

    def _b_exit(self, args: list[str]) -> int:
        self._check_guard("exit")
        raise _Exit(int(args[0]) if args else (self.last_status or 0))

    def _b_return(self, args: list[str]) -> int:
        raise _Return(int(args[0]) if args else (self.last_status or 0))

    def _b_break(self, args: list[str]) -> int:
        raise _Break(int(args[0]) if args else 1)

    def _b_continue(self, args: list[str]) -> int:
        raise _Continue(int(args[0]) if args else 1)

    def _b_true(self, args: list[str]) -> int:
        return 0

    _b_colon = _b_true

    def _b_false(self, args: list[str]) -> int:
        return 1

    def _b_shopt(self, args: list[str]) -> int:
        return 0

    def _b_trap(self, args: list[str]) -> int:
        if args and args[0] not in ("-", "") and len(args) > 1:
            self.result.warnings.append(f"{self.script}:{self.line}: trap ignored")
        return 0

    _b_umask = _b_shopt
    _b_wait = _b_shopt

    def _b_local(self, args: list[str]) -> int:
        for a in args:
            name, eq, value = a.partition("=")
            self.set_var(name, value if eq else self.vars.get(name, ""), local=True)
        return 0

    def _b_let(self, args: list[str]) -> int:
        value = 0
        for a in args:
            value = self.arith_text(a)
        return 0 if value != 0 else 1

    def _b_test(self, args: list[str]) -> int:
        return 0 if self._test(args, [False] * len(args), False) else 1

    def _b_lbrack(self, args: list[str]) -> int:
        if not args or args[-1] != "]":
            raise self.error("[: missing ']'")
        return self._b_test(args[:-1])

    def _b_source(self, args: list[str]) -> int | None:
        if not args:
            raise self.error("source: file name needed")
        text = self._read_static_file(args[0])
        root = parse(text.encode(errors="surrogateescape"), args[0])
        saved = self.positional
        if len(args) > 1:
            self.positional = args[1:]
        try:
            return self.exec_node(root)
        except _Return as r:
            return r.status
        finally:
            self.positional = saved

    _b_dot = _b_source

    def _b_read(self, args: list[str]) -> int:
        if not self._stdin:
            raise self.error("read from the script's input is known only when the script runs",
                             Unsupported)
        names = [a for a in args if not a.startswith("-")] or ["REPLY"]
        lines = self._stdin[-1]
        if not lines:
            return 1
        line = lines.pop(0)
        if "-r" not in args:
            line = re.sub(r"\\(.)", r"\1", line)
        parts = line.split(None, len(names) - 1) if names != ["REPLY"] else [line]
        for i, n in enumerate(names):
            self.set_var(n, parts[i] if i < len(parts) else "")
        return 0

    def _b_eval(self, args: list[str]) -> int | None:
        root = parse(" ".join(args).encode(), self.script)
        return self.exec_node(root)

    def _b_exec(self, args: list[str]) -> int:
        if args:
            raise self.error("exec of a program is not supported", Unsupported)
        return 0

    def _b_readonly(self, args: list[str]) -> int:
        return self._b_export_like(args)

    def _b_export_like(self, args: list[str]) -> int:
        for a in args:
            name, eq, value = a.partition("=")
            if eq:
                self.set_var(name, value)
        return 0

    _b_declare = _b_export_like
    _b_typeset = _b_export_like

    def _b_alias(self, args: list[str]) -> int:
        raise self.error("alias is not supported", Unsupported)

    # helpers whose output a command substitution needs (only called in capture mode)
    def _b_echo(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        newline, escapes = True, False
        while args and re.fullmatch(r"-[neE]+", args[0]):
            newline = newline and "n" not in args[0]
            escapes = "e" in args[0]
            args = args[1:]
        text = " ".join(args)
        if escapes:
            text = _ansi_c(text)
        self._out(text + ("\n" if newline else ""))
        return 0

    def _b_pwd(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        self._out(self.cwd + "\n")
        return 0

    def _b_basename(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        multi, suffix = False, None
        while args and args[0].startswith("-") and len(args[0]) > 1:
            if args[0] in ("-a", "--multiple"):
                multi = True
            elif args[0] == "-s":
                suffix, multi, args = args[1], True, args[1:]
            elif args[0].startswith("--suffix="):
                suffix, multi = args[0].split("=", 1)[1], True
            args = args[1:]
        if not multi and len(args) == 2:
            args, suffix = args[:1], args[1]
        for a in args:
            b = os.path.basename(a.rstrip("/")) or ("/" if a.startswith("/") else "")
            if suffix and b.endswith(suffix) and b != suffix:
                b = b[: -len(suffix)]
            self._out(b + "\n")
        return 0

    def _b_dirname(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        for a in args:
            a = a.rstrip("/") or "/"
            d = os.path.dirname(a).rstrip("/") if "/" in a else "."
            self._out((d or "/") + "\n")
        return 0

    def _b_seq(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        if all(re.fullmatch(r"-?\d+", a) for a in args) and 1 <= len(args) <= 3:
            nums = [int(a) for a in args]
            first, inc, last = (1, 1, nums[0]) if len(nums) == 1 else (
                (nums[0], 1, nums[1]) if len(nums) == 2 else tuple(nums))
            if inc == 0:
                return 1
            rng = range(first, last + (1 if inc > 0 else -1), inc)
            self._out("".join(f"{v}\n" for v in rng))
            return 0
        return self._run_filter(["seq", *args], "")

    def _b_printf(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        if not args:
            return 1
        fmt, rest = args[0], args[1:]
        parsed = _printf_format(fmt)
        if parsed is not None:
            kinds, template = parsed
            out = []
            while True:
                vals: list[int | float | str] = []
                for k, kind in enumerate(kinds):
                    v = rest[k] if k < len(rest) else ""
                    if kind in "di":
                        vals.append(int(v or 0))
                    elif kind == "f":
                        vals.append(float(v or 0))
                    else:
                        vals.append(v)
                out.append(template % tuple(vals) if kinds else template)
                rest = rest[len(kinds):]
                if not rest or not kinds:
                    break
            self._out("".join(out))
            return 0
        return self._run_filter(["printf", *args], "")

    def _b_expr(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        try:
            value = _Expr(args).parse()
        except (ScriptError, ValueError):
            return 2  # expr prints nothing on stdout for a bad expression
        self._out(f"{value}\n")
        return 0 if value not in ("", "0", 0) else 1

    # ------------------------------------------------------------------ command substitution
    def _capture_nodes(self, nodes: list[Node], pipeline: bool = False) -> str:
        self._capture.append([])
        stdin_depth = len(self._stdin)
        try:
            with self._saved_state():
                if pipeline:
                    status = self._static_pipeline(nodes)
                else:
                    status = self._exec_seq(nodes)
                del status
        except _Exit:
            pass
        finally:
            del self._stdin[stdin_depth:]
            out = "".join(self._capture.pop())
        return out

    def command_substitution(self, node: Node) -> str:
        """The output of ``$(...)`` with trailing newlines removed, computed statically."""
        hit = self._subst_cache.get(node.id)
        if hit is not None and hit[0] == node:
            kind, what = hit[1]
        else:
            kind, what = self._subst_kind(node)
            self._subst_cache[node.id] = (node, (kind, what))
        if kind == "run":
            return self._capture_nodes(what).rstrip("\n")
        if kind == "arith":
            return str(self.arith_text(what))
        return self._read_static_file(self.expand_str(what)).rstrip("\n")

    def _subst_kind(self, node: Node) -> tuple[str, Any]:
        text = _text(node)
        if text.startswith("$((") and text.endswith("))"):
            # tree-sitter reads $(( )) in a here-document as $( (subshell) )
            return ("arith", text[3:-2])
        body = [c for c in node.children if c.is_named]
        if len(body) == 1 and body[0].type == "file_redirect":  # $(< file)
            dest = body[0].child_by_field_name("destination")
            assert dest is not None
            return ("file", dest)
        if len(body) == 1 and body[0].type == "redirected_statement" and \
                body[0].child_by_field_name("body") is None:
            # $(< file)
            r = _named(body[0])[0]
            dest = r.child_by_field_name("destination")
            assert dest is not None
            return ("file", dest)
        return ("run", body)

    def _static_pipeline(self, parts: list[Node]) -> int | None:
        stdin = ""
        status: int | None = 0
        for part in parts:
            self._capture.append([])
            self._stdin.append(stdin.splitlines())
            try:
                status = self._static_stage(part, stdin)
            finally:
                self._stdin.pop()
                stdin = "".join(self._capture.pop())
        self._out(stdin)
        return status

    def _static_stage(self, node: Node, stdin: str) -> int | None:
        if node.type != "command":
            if node.type == "redirected_statement":
                body = node.child_by_field_name("body")
                for r in node.children[1:]:
                    t = _text(r).replace(" ", "")
                    if t not in ("2>/dev/null", "2>&1", ">/dev/null"):
                        raise self.error("redirection inside a command substitution is not "
                                         "supported", Unsupported)
                if body is not None:
                    return self._static_stage(body, stdin)
            return self.exec_node(node)
        name_node = node.child_by_field_name("name")
        if name_node is None:
            return self.exec_node(node)
        argv = self.expand_words([name_node] + [c for i, c in enumerate(node.children)
                                                if node.field_name_for_child(i) == "argument"])
        prog = argv[0]
        if prog in self.functions or prog in STATIC_BUILTINS or prog in CAPTURE_HELPERS:
            return self.exec_node(node)
        if prog == "ls":
            return self._static_ls(argv[1:])
        if prog == "cat" and len(argv) > 1:
            for a in argv[1:]:
                self._out(self._read_static_file(a))
            return 0
        if prog == "cat":
            self._out(stdin)
            return 0
        if os.path.basename(prog) not in PURE_FILTERS:
            raise self.error(f"command substitution runs '{prog}', whose output is known only "
                             "when the script runs", Unsupported)
        spec = self.sem.get(prog)
        if spec is not None:
            an = self.sem.analyze(spec, argv[1:], 0, self.cwd, self.fs)
            for u in an.uses:
                if u.role != IN:
                    raise self.error(f"command substitution runs '{prog}', which writes "
                                     "files", Unsupported)
                if u.path in self.fs.written:
                    raise self.error(f"command substitution reads '{u.path}', which line "
                                     f"{self.fs.written[u.path]} writes when the script runs",
                                     Unsupported)
        return self._run_filter(argv, stdin)

    def _run_filter(self, argv: list[str], stdin: str) -> int:
        env = {k: self.vars[k] for k in self.exported if k in self.vars}
        try:
            p = subprocess.run(argv, input=stdin.encode(errors="surrogateescape"),
                               capture_output=True, cwd=self.cwd, env=env, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise self.error(f"cannot run '{argv[0]}' at compile time: {exc}")
        self._out(p.stdout.decode(errors="surrogateescape"))
        return p.returncode

    def _static_ls(self, args: list[str]) -> int:
        names = [a for a in args if not a.startswith("-")]
        flags = "".join(a[1:] for a in args if a.startswith("-"))
        out: list[str] = []
        status = 0
        if not names:
            names = ["."]
        files = [n for n in names if not self.fs.isdir(os.path.join(self.cwd, n)) or "d" in flags]
        dirs = [n for n in names if n not in files]
        for n in files:
            if not self.fs.exists(os.path.join(self.cwd, n)):
                status = 2
                continue
            out.append(n)
        out.sort()
        for d in sorted(dirs):
            entries = sorted(e for e in self.fs.listdir(os.path.join(self.cwd, d))
                             if "a" in flags or not e.startswith("."))
            if len(names) > 1:
                out.append(f"{d}:")
            out.extend(entries)
        self._out("".join(f"{x}\n" for x in out))
        return status

    # ------------------------------------------------------------------ emitting steps
    def _emit_list(self, items: list[tuple[str, Node]], negate_first: bool = False) -> int | None:
        if self._capture:
            raise self.error("command substitution runs a pipeline whose output is known only "
                             "when the script runs", Unsupported)
        stages: list[Stage] = []
        groups: list[list[int]] = []
        connectors: list[str] = []
        negated: list[bool] = []
        for k, (op, node) in enumerate(items):
            neg = negate_first and k == 0
            while node.type == "negated_command":
                neg = not neg
                node = _named(node)[0]
            extra: list[Node] = list(self._extra.get(_key(node), ()))
            if node.type == "redirected_statement":
                extra = [c for i, c in enumerate(node.children)
                         if node.field_name_for_child(i) == "redirect"] + extra
                body = node.child_by_field_name("body")
                node = body if body is not None else node
            if node.type == "pipeline":
                cmds = _named(node)
            elif node.type in ("command", "redirected_statement"):
                cmds = [node]
            else:
                raise self.error(f"'{node.type.replace('_', ' ')}' inside '&&'/'||' after a "
                                 "command known only at run time is not supported", Unsupported)
            group: list[int] = []
            queue = list(cmds)
            extra_tail = self._heredoc_tail(extra)
            first = True
            while queue:
                cmd = queue.pop(0)
                mine: list[Node] = []
                if extra_tail and first:
                    mine = extra  # the here-document belongs to the command before the tail
                    queue.extend(extra_tail)
                elif not extra_tail and not queue:
                    mine = extra
                first = False
                if cmd.type == "redirected_statement":
                    queue[:0] = self._heredoc_tail(list(cmd.children))
                st = self._stage(cmd, mine)
                group.append(len(stages))
                stages.append(st)
            groups.append(group)
            negated.append(neg)
            if k:
                connectors.append(op)
        return self._emit(stages, groups, connectors, negated)

    def _heredoc_tail(self, redirects: list[Node]) -> list[Node]:
        """Commands tree-sitter nests inside a here-document redirect: `cat <<EOF | tr ..`."""
        tail: list[Node] = []
        for r in redirects:
            if r.type != "heredoc_redirect":
                continue
            for c in r.children:
                if c.type == "pipeline":
                    tail.extend(_named(c))
                elif c.type in ("&&", "||", ";", "&"):
                    raise self.error(f"'{c.type}' after a here-document on the same line is not "
                                     "supported (put it on its own line)", Unsupported)
        return tail

    def _stage(self, cmd: Node, extra_redirects: list[Node], argv: list[str] | None = None
               ) -> Stage:
        redirect_nodes = list(extra_redirects)
        if cmd.type == "redirected_statement":
            redirect_nodes = [c for i, c in enumerate(cmd.children)
                              if cmd.field_name_for_child(i) == "redirect"] + redirect_nodes
            body = cmd.child_by_field_name("body")
            cmd = body if body is not None else cmd
        if cmd.type != "command":
            raise self.error(f"'{cmd.type.replace('_', ' ')}' in a pipeline is not supported",
                             Unsupported)
        assigns: dict[str, str] = {}
        _name, _args, assign_nodes, inner_redirects, progs = self._parts(cmd)
        st = Stage([], [], assigns)
        for c in assign_nodes:
            self._stage_assign(c, st)
        if argv is None:
            argv = self._pre_argv.pop(_key(cmd), None)
        if argv is None:
            argv = self._expand_progs(progs)
        redirect_nodes.extend(inner_redirects)  # redirects written inside the command node
        if argv and argv[0] in self.functions:
            raise self.error(f"function '{argv[0]}' used in a pipeline or with redirections",
                             Unsupported)
        st.argv = argv
        for r in redirect_nodes:
            self._redirect(r, st)
        return st

    def _stage_assign(self, c: Node, st: Stage) -> None:
        """A ``VAR=value`` prefix of a command."""
        n = c.child_by_field_name("name")
        v = c.child_by_field_name("value")
        assert n is not None
        st.assigns[_text(n)] = self.expand_str(v) if v is not None else ""

    def _redirect(self, r: Node, st: Stage) -> None:
        if r.type == "heredoc_redirect":
            body = next((c for c in r.children if c.type == "heredoc_body"), None)
            start = next((c for c in r.children if c.type == "heredoc_start"), None)
            quoted = start is not None and any(q in _text(start) for q in "'\"\\")
            text = ""
            if body is not None:
                text = _text(body) if quoted else self._heredoc_text(body)
            st.heredoc = text if text.endswith("\n") or not text else text + "\n"
            for c in r.children:
                if c.type == "file_redirect":
                    self._redirect(c, st)
            return
        if r.type == "herestring_redirect":
            st.heredoc = self.expand_str(_named(r)[-1]) + "\n"
            return
        fd = ""
        op = ""
        dest: Node | None = None
        for i, c in enumerate(r.children):
            f = r.field_name_for_child(i)
            if c.type == "file_descriptor":
                fd = _text(c)
            elif f == "destination":
                dest = c
            elif not c.is_named:
                op = _text(c)
        if dest is None:
            raise self.error("redirection without a target", Unsupported)
        st.redirects.append(Redirect(fd, op, self.expand_str(dest)))

    def _heredoc_text(self, body: Node) -> str:
        out: list[str] = []
        pos = body.start_byte
        src = body.text or b""
        base = body.start_byte
        for c in body.children:
            if c.type in ("simple_expansion", "expansion", "command_substitution",
                          "arithmetic_expansion"):
                out.append(src[pos - base:c.start_byte - base].decode(errors="surrogateescape"))
                out.append(_lead(c))
                out.append(self.expand_str(c))
                pos = c.end_byte
        out.append(src[pos - base:].decode(errors="surrogateescape"))
        return _dq_unescape("".join(out))

    def _emit(self, stages: list[Stage], groups: list[list[int]], connectors: list[str],
              negated: list[bool]) -> int | None:
        line = self.line
        cwd = self.cwd
        step = Step(len(self.steps), line, stages, groups, connectors, negated, cwd,
                    self._env_diff())
        for d in self._control:
            step.after |= d
        compound = len(groups) > 1
        always_ok = not compound and not any(negated)
        sem = self.sem
        fs = self.fs
        uses = step.uses
        for si, st in enumerate(stages):
            argv = st.argv
            if not argv:
                continue
            prog = argv[0]
            base = prog[prog.rfind("/") + 1:]  # os.path.basename
            step.programs.append(base)
            spec = sem.specs.get(base)
            if spec is None or prog in self.functions:
                step.barrier = True
                self.result.unknown.setdefault(base, []).append(line)
                if self.strict:
                    raise self.error(f"unknown program '{prog}': its files are not known "
                                     "(add it with --commands FILE)")
                always_ok = False
                continue
            an = sem.analyze(spec, argv[1:], si, cwd, fs)
            if an.barrier_reason:
                step.barrier = True
                self.result.unknown.setdefault(an.barrier_reason, []).append(line)
                if self.strict:
                    raise self.error(f"{an.barrier_reason}: its files are not known")
            uses.extend(an.uses)
            if an.mkdirs:
                step.mkdirs.extend(an.mkdirs)
            if always_ok and not (base in ALWAYS_OK or (base == "mkdir" and any(
                    a.startswith("-") and "p" in a for a in argv[1:])) or (
                    base == "rm" and any(a.startswith("-") and "f" in a for a in argv[1:]))):
                always_ok = False
        for si, st in enumerate(stages):
            for ri, r in enumerate(st.redirects):
                if r.op in (">&", "<&") and (r.target.isdigit() or r.target == "-"):
                    continue
                path = os.path.normpath(os.path.join(cwd, r.target))
                if r.target.startswith("/dev/"):
                    continue
                loc = (si, "r", ri)
                if r.op in ("<",):
                    uses.append(FileUse(path, IN, loc))
                elif r.op in (">>", "&>>", "<>"):
                    uses.append(FileUse(path, INOUT if fs.exists(path) else OUT, loc))
                else:
                    uses.append(FileUse(path, OUT, loc))
        if compound:
            # `a || b`: either may not run, so a file it writes may keep its old content
            for u in uses:
                if u.role == OUT and fs.exists(u.path):
                    u.role = INOUT
        self._check_and_apply(step, compound)
        self.steps.append(step)
        return 0 if always_ok else None

    def _env_diff(self) -> dict[str, str]:
        # recomputed only when an exported variable may have changed (set_var/export/unset)
        key = (id(self.vars), self._env_gen)
        if self._env_key == key:
            return self._env_cache
        env: dict[str, str] = {}
        for k in self.exported:
            v = self.vars.get(k)
            if v is not None and self.environ.get(k) != v and k not in ("PWD", "OLDPWD", "_"):
                env[k] = v
        self._env_key, self._env_cache = key, env
        return env

    def _shown(self, path: str) -> str:
        return os.path.relpath(path, self.cwd) if path.startswith(self.workdir) else path

    def _check_and_apply(self, step: Step, compound: bool) -> None:
        fs = self.fs
        written = fs.written
        strict = self.strict
        for u in step.uses:
            role = u.role
            if (role == IN or role == INOUT) and not compound:
                path = u.path
                kind = fs.kind(path)
                if kind is None:
                    shown = self._shown(path)
                    raise self.error(f"{step.programs[0] if step.programs else 'command'} reads "
                                     f"'{shown}', which does not exist at this point of the "
                                     "script (no earlier command creates it)")
                if kind == "f" and path not in written:
                    ok = self._readable.get(path)
                    if ok is None:
                        ok = self._readable[path] = os.access(path, os.R_OK)
                    if not ok:
                        raise self.error(f"cannot read '{self._shown(path)}': permission denied")
            if strict and role in (OUT, INOUT, DEL) and not (
                    u.path == self.workdir or u.path.startswith(self.workdir + os.sep)):
                raise self.error(f"writes '{u.path}', outside the working tree {self.workdir} "
                                 "(--strict)")
        for d in step.mkdirs:
            if strict and not d.startswith(self.workdir):
                raise self.error(f"creates '{d}', outside the working tree (--strict)")
            fs.mkdir(d)
        for u in step.uses:
            role = u.role
            if role == DEL:
                fs.remove(u.path)
            elif role == OUT or role == INOUT:
                fs.add_file(u.path, step.line)

    # ------------------------------------------------------------------ expansion
    def expand_words(self, nodes: list[Node]) -> list[str]:
        """Expand argument nodes into words: parameters, splitting, globbing, braces."""
        return self._expand_progs([self._word_prog(n, True) for n in nodes])

    def _word_prog(self, n: Node, cache: bool) -> str | tuple | Node:  # type: ignore[type-arg]
        """How to expand the word ``n``: a str (a plain word: itself), a plan (a tuple, see
        :meth:`_plan`), or the node itself (the general expander)."""
        t = n.type
        if t == "command_name":
            kids = n.children
            if len(kids) == 1 and kids[0].is_named:
                n = kids[0]  # expands as its only child
                t = n.type
        if t == "word" or t == "number":
            raw = n.text or b""
            if not _SPECIAL_WORD.search(raw):  # plain word: itself (hot path)
                return raw.decode(errors="surrogateescape")
        if t in ("word", "concatenation", "brace_expression") and b"{" in (
                n.text or b"") and _BRACE.search(_text(n)):
            return n
        plan = self._plan(n) if cache else self._make_plan(n)
        return plan if plan else n

    def _expand_progs(self, progs: list) -> list[str]:  # type: ignore[type-arg]
        out: list[str] = []
        for p in progs:
            tp = type(p)
            if tp is str:
                out.append(p)
                continue
            if tp is tuple:
                w = self._plan_word(p)
                if w is not _SLOW:
                    if w is not None:
                        out.append(w)  # type: ignore[arg-type]
                    continue
                f = _Fields()
                self._run_plan(p, f, False)
            else:
                n = p
                t = n.type
                if t in ("word", "concatenation", "brace_expression") and b"{" in (
                        n.text or b"") and _BRACE.search(_text(n)):
                    alts = brace_expand(_text(n))
                    if len(alts) > 1 or alts[0] != _text(n):
                        for alt in alts:
                            sub = parse_fragment(": " + alt).children[0]
                            args = [c for i, c in enumerate(sub.children)
                                    if sub.field_name_for_child(i) == "argument"]
                            out.extend(self.expand_words(args))
                        continue
                f = _Fields()
                self._expand_into(n, f, quoted=False)
            for fl in f.fields:
                out.extend(self._glob_field(fl))
        return out

    def _plan(self, node: Node) -> tuple[tuple[str, str, bool], ...] | None:
        """The word as simple steps (literal text, plain variable), cached per node; None when
        it needs the general expander. Loops expand the same words thousands of times."""
        hit = self._plan_cache.get(node.id)
        if hit is not None and hit[0] == node:
            return hit[1]
        plan = self._make_plan(node)
        self._plan_cache[node.id] = (node, plan)
        return plan

    def _make_plan(self, node: Node) -> tuple[tuple[str, str, bool], ...] | None:
        ops: list[tuple[str, str, bool]] = []
        return tuple(ops) if self._plan_into(node, ops, False) else None

    def _plan_into(self, node: Node, ops: list[tuple[str, str, bool]], quoted: bool) -> bool:
        # ops: ("lit", text, quoted), ("v", name, quoted) for a variable, ("var", name, quoted)
        # for a positional parameter
        t = node.type
        if t in ("word", "number"):
            raw = node.text or b""
            if _SPECIAL_WORD.search(raw) or (quoted and t == "word"):
                return False
            ops.append(("lit", raw.decode(errors="surrogateescape"), quoted))
            return True
        if t == "raw_string":
            ops.append(("lit", _text(node)[1:-1], True))
            return True
        if t in ("simple_expansion", "expansion"):
            kids = node.children
            inner = kids[1:] if t == "simple_expansion" else kids[1:-1]
            if len(inner) != 1 or inner[0].type != "variable_name" or (
                    t == "expansion" and kids[-1].type != "}") or _lead(node):
                return False
            name = _text(inner[0])
            ops.append(("v" if name.isidentifier() else "var", name, quoted))
            return True
        if t == "concatenation":
            return all(c.is_named and self._plan_into(c, ops, quoted) for c in node.children)
        if t == "string" and not quoted:
            kids = node.children
            if len(kids) < 2 or _text(kids[-1]) != '"' or _text(kids[0]) != '"':
                return False
            ops.append(("lit", "", True))
            pos = kids[0].end_byte
            for c in kids[1:-1]:
                if c.start_byte != pos:
                    return False
                if c.type == "string_content":
                    ops.append(("lit", _dq_unescape(_text(c)), True))
                elif not (c.is_named and self._plan_into(c, ops, True)):
                    return False
                pos = c.end_byte
            return kids[-1].start_byte == pos
        return False

    def _plan_word(self, plan: tuple[tuple[str, str, bool], ...]) -> str | None | object:
        """Expand a planned word in argument position when that needs neither word splitting
        nor globbing (the usual case): the word, or None (no field). ``_SLOW`` otherwise."""
        vars_ = self.vars
        ifs = vars_.get("IFS")
        if ifs is not None and ifs != _DEFAULT_IFS and ifs != "":
            return _SLOW
        splits = ifs != ""  # IFS unset or the default: white space splits
        parts: list[str] = []
        field = False
        for op, text, quoted in plan:
            if op == "lit":
                parts.append(text)
                field = True
                continue
            v = vars_.get(text) if op == "v" else self._get(text)
            if quoted:
                field = True
                if v:
                    parts.append(v)
                continue
            if not v:
                continue
            if splits and (" " in v or "\t" in v or "\n" in v):
                return _SLOW  # word splitting
            if "*" in v or "?" in v or "[" in v:
                return _SLOW  # globbing
            parts.append(v)
            field = True
        return "".join(parts) if field else None

    def _run_plan(self, plan: tuple[tuple[str, str, bool], ...], f: _Fields, _q: bool) -> None:
        for op, text, quoted in plan:
            if op == "lit":
                f.lit(text, quoted)
            else:
                value = self.vars.get(text) if op == "v" else self._get(text)
                self._value_into(value or "", f, quoted)

    def _glob_field(self, fl: list[tuple[str, bool]]) -> list[str]:
        if len(fl) == 1:
            t, q = fl[0]
            if q or not has_glob(t):
                return [t]
        if any(not q and has_glob(t) for t, q in fl):
            pattern = "".join(_escape_glob(t) if q else t for t, q in fl)
            matches = self.fs.glob(pattern, self.cwd)
            if matches:
                return matches
        return ["".join(t for t, _ in fl)]

    def expand_str(self, node: Node) -> str:
        """Expand a node to one string (no splitting or globbing: assignments, case, targets)."""
        t = node.type
        if t == "command_substitution":
            return self.command_substitution(node)
        if t == "arithmetic_expansion":
            value = 0
            for e in self._arith_exprs(node):
                value = self.arith(e)
            return str(value)
        plan = self._plan(node)
        if plan:
            vars_ = self.vars
            parts = []
            for op, text, _quoted in plan:
                if op == "lit":
                    parts.append(text)
                else:
                    v = vars_.get(text) if op == "v" else self._get(text)
                    if v:
                        parts.append(v)
            return "".join(parts)
        return self._expand_str_slow(node)

    def _expand_str_slow(self, node: Node) -> str:
        f = _Fields()
        self._expand_into(node, f, quoted=True)
        return " ".join("".join(t for t, _ in fl) for fl in f.fields)

    def _expand_into(self, node: Node, f: _Fields, quoted: bool) -> None:
        t = node.type
        if t in ("word", "number", "extglob_pattern", "regex", "test_operator",
                 "variable_name", "heredoc_content", "file_descriptor", "special_variable_name"):
            text = _text(node)
            if quoted:
                f.lit(text, True if t != "word" else False)
                return
            if t == "word" and text.startswith("~"):
                head, sep, rest = text.partition("/")
                home = self.vars.get("HOME", "~") if head == "~" else None
                if home is not None:
                    f.lit(home, True)
                    text = sep + rest
            for piece, q in _unescape_word(text):
                f.lit(piece, q)
        elif t == "raw_string":
            f.lit(_text(node)[1:-1], True)
        elif t == "ansi_c_string":
            f.lit(_ansi_c(_text(node)[2:-1]), True)
        elif t in ("string", "translated_string"):
            f.lit("", True)  # "" is an (empty) field
            # tree-sitter leaves some text (white space) out of string_content nodes: take
            # the gaps between children from the source
            raw = node.text or b""
            base = node.start_byte
            kids = self._kids(node)
            pos = kids[0].end_byte if kids else base
            for c in kids[1:]:
                if c.start_byte > pos:
                    f.lit(_dq_unescape(raw[pos - base:c.start_byte - base].decode(
                        errors="surrogateescape")), True)
                if c is kids[-1] and not c.is_named:
                    # the closing quote token may carry white space before it: ' "'
                    closing = _text(c)
                    if len(closing) > 1 and closing.endswith('"'):
                        f.lit(_dq_unescape(closing[:-1]), True)
                    break
                if c.type == "string_content":
                    f.lit(_dq_unescape(_text(c)), True)
                elif c.is_named:
                    lead = _lead(c)
                    if lead:
                        f.lit(lead, True)
                    self._expand_into(c, f, quoted=True)
                else:
                    f.lit(_text(c), True)
                pos = c.end_byte
        elif t in ("simple_expansion", "expansion"):
            self._parameter(node, f, quoted)
        elif t == "command_substitution":
            self._value_into(self.command_substitution(node), f, quoted)
        elif t == "arithmetic_expansion":
            exprs = self._arith_exprs(node)
            value = 0
            for e in exprs:
                value = self.arith(e)
            self._value_into(str(value), f, quoted)
        elif t in ("concatenation", "command_name"):
            for c in self._kids(node):
                if c.is_named:
                    self._expand_into(c, f, quoted)
                else:
                    f.lit(_text(c), quoted)
        elif t == "brace_expression":
            f.lit(_text(node), quoted)
        elif t in ("process_substitution",):
            raise self.error("process substitution <(...) is not supported", Unsupported)
        else:
            raise self.error(f"unsupported expansion '{t}'", Unsupported)

    def _value_into(self, value: str, f: _Fields, quoted: bool) -> None:
        if quoted:
            f.lit(value, True)
        else:
            f.split(value, self.vars.get("IFS", " \t\n"))

    def _get(self, name: str) -> str | None:
        if name.isdigit():
            k = int(name)
            if k == 0:
                return self.script
            return self.positional[k - 1] if k <= len(self.positional) else None
        if name == "#":
            return str(len(self.positional))
        if name in ("@", "*"):
            return " ".join(self.positional)
        if name == "?":
            if self.last_status is None:
                raise self.error("$? after a command whose exit status is known only at run "
                                 "time", Unsupported)
            return str(self.last_status)
        if name == "$":
            return str(os.getpid())
        if name == "-":
            return "e" if self.set_e else ""
        if name == "!":
            raise self.error("$! (background jobs) is not supported", Unsupported)
        return self.vars.get(name)

    def _parameter(self, node: Node, f: _Fields, quoted: bool) -> None:
        children = node.children
        if node.type == "simple_expansion":
            name = _text(children[1]) if len(children) > 1 else ""
            self._param_value(name, None, [], f, quoted)
            return
        # ${ [#|!] name [operator args...] }
        inner = children[1:-1]
        prefix = ""
        if inner and not inner[0].is_named and _text(inner[0]) in ("#", "!"):
            prefix = _text(inner[0])
            inner = inner[1:]
        if not inner:
            raise self.error("bad substitution", Unsupported)
        name_node = inner[0]
        if name_node.type == "subscript":
            raise self.error("arrays are not supported", Unsupported)
        name = _text(name_node)
        rest = inner[1:]
        if prefix == "#":
            value = self._get(name)
            if name in ("@", "*"):
                value = str(len(self.positional))
            else:
                value = str(len(value or ""))
            self._value_into(value, f, quoted)
            return
        if prefix == "!":
            target = self._get(name) or ""
            self._param_value(target, None, rest, f, quoted)
            return
        op = _text(rest[0]) if rest and not rest[0].is_named else None
        self._param_value(name, op, rest[1:] if op else rest, f, quoted)

    def _param_value(self, name: str, op: str | None, args: list[Node], f: _Fields,
                     quoted: bool) -> None:
        if name in ("@", "*") and op is None:
            if quoted and name == "@":
                for k, p in enumerate(self.positional):
                    if k:
                        f.brk()
                    f.lit(p, True)
                return
            if quoted:
                f.lit(self.vars.get("IFS", " ")[:1].join(self.positional), True)
                return
            for k, p in enumerate(self.positional):
                if k:
                    f.brk()
                f.split(p, self.vars.get("IFS", " \t\n"))
            return
        value = self._get(name)
        if op is None:
            self._value_into(value or "", f, quoted)
            return

        def word() -> str:
            parts: list[str] = []
            for a in args:
                if a.is_named:
                    parts.append(self.expand_str(a))
                else:
                    parts.append(_text(a))
            return "".join(parts)

        def pattern() -> str:
            parts: list[str] = []
            for a in args:
                if a.type in ("string", "raw_string"):
                    parts.append(_escape_glob(self.expand_str(a)))
                elif a.is_named:
                    parts.append(self.expand_str(a))
                else:
                    parts.append(_text(a))
            return "".join(parts)

        if op in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            unset = value is None or (op.startswith(":") and value == "")
            if op in (":-", "-"):
                result = word() if unset else value or ""
            elif op in (":=", "="):
                if unset:
                    value = word()
                    self.set_var(name, value)
                result = value or ""
            elif op in (":+", "+"):
                result = "" if unset else word()
            else:
                if unset:
                    raise self.error(f"{name}: {word() or 'parameter null or not set'}")
                result = value or ""
            use_word = (op in (":-", "-") and unset) or (op in (":+", "+") and not unset)
            if use_word and not quoted:
                # the word keeps its own quoting: ${x:-"a b"} is one field, ${x:-a b} two
                for a in args:
                    if a.type in ("string", "raw_string", "ansi_c_string"):
                        self._expand_into(a, f, quoted=True)
                    else:
                        self._value_into(self.expand_str(a) if a.is_named else _text(a), f,
                                         False)
                return
            self._value_into(result, f, quoted)
            return
        value = value or ""
        if op in ("#", "##", "%", "%%"):
            pat = pattern()
            result = _trim(value, pat, op)
        elif op in ("/", "//", "/#", "/%"):
            pat_nodes: list[Node] = []
            rep_nodes: list[Node] = []
            cur = pat_nodes
            for a in args:
                if not a.is_named and _text(a) == "/" and cur is pat_nodes:
                    cur = rep_nodes
                    continue
                cur.append(a)
            saved = args
            args = pat_nodes
            pat = pattern()
            args = rep_nodes
            rep = word()
            args = saved
            result = _replace(value, pat, rep, op)
        elif op == ":":
            nums = [self.arith_text(self.expand_str(a)) for a in args if a.is_named]
            off = nums[0] if nums else 0
            if off < 0:
                off = max(0, len(value) + off)
            result = value[off:off + nums[1]] if len(nums) > 1 else value[off:]
        elif op in ("^^", ",,", "^", ","):
            result = {"^^": value.upper(), ",,": value.lower(),
                      "^": value[:1].upper() + value[1:], ",": value[:1].lower() + value[1:]}[op]
        else:
            raise self.error(f"unsupported parameter operator '{op}'", Unsupported)
        self._value_into(result, f, quoted)

    # ------------------------------------------------------------------ arithmetic
    def arith_text(self, text: str) -> int:
        """Evaluate an arithmetic expression given as text (``let``, variable contents)."""
        text = text.strip()
        if text.isdecimal() or re.fullmatch(r"-?\d+", text):
            return int(text)
        if text == "":
            return 0
        prog = _arith_text_prog(text)
        if prog is None:
            raise self.error(f"bad arithmetic expression '{text}'")
        return self._aeval(prog)

    def arith(self, node: Node) -> int:
        """Evaluate an arithmetic tree-sitter node (compiled once per node, see _arith_compile)."""
        hit = self._arith_cache.get(node.id)
        if hit is not None and hit[0] == node:
            return self._aeval(hit[1])
        prog = _arith_compile(node)
        self._arith_cache[node.id] = (node, prog)
        return self._aeval(prog)

    def _arith_exprs(self, node: Node) -> list[Node]:
        """The named children of ``$(( ))`` / ``(( ))``, cached."""
        hit = self._aexprs_cache.get(node.id)
        if hit is not None and hit[0] == node:
            return hit[1]
        exprs = [c for c in node.children if c.is_named]
        self._aexprs_cache[node.id] = (node, exprs)
        return exprs

    def _aeval(self, prog: tuple) -> int:  # type: ignore[type-arg]
        """Evaluate a compiled arithmetic expression (same order of effects as _arith_node)."""
        op = prog[0]
        if op == "n":
            return prog[1]  # type: ignore[no-any-return]
        if op == "var":
            return self._var_int(prog[1])
        if op == "bin":
            return _binop(prog[1], self._aeval(prog[2]), self._aeval(prog[3]), self)
        if op == "text":
            return self.arith_text(self.expand_str(prog[1]))
        if op == "aset":
            name = prog[2]
            r = self._aeval(prog[3])
            v = r if prog[1] == "=" else _binop(prog[1][:-1], self._var_int(name), r, self)
            self.set_var(name, str(v))
            return v
        if op == "pre":
            v = self._var_int(prog[1]) + prog[2]
            self.set_var(prog[1], str(v))
            return v
        if op == "post":
            v = self._var_int(prog[1])
            self.set_var(prog[1], str(v + prog[2]))
            return v
        if op == "un":
            v = self._aeval(prog[2])
            return {"-": -v, "+": v, "!": int(v == 0), "~": ~v}[prog[1]]
        if op == "assign":
            v = self._aeval(prog[2]) if prog[2] is not None else 0
            self.set_var(prog[1], str(v))
            return v
        if op == "tern":
            return self._aeval(prog[2]) if self._aeval(prog[1]) else self._aeval(prog[3])
        if op == "and":
            return int(bool(self._aeval(prog[1])) and bool(self._aeval(prog[2])))
        if op == "or":
            return int(bool(self._aeval(prog[1])) or bool(self._aeval(prog[2])))
        if op == "badnum":
            raise self.error(f"bad number '{prog[1]}' in arithmetic")
        return self._arith_node(prog[1])

    def _arith_node(self, node: Node) -> int:
        """Evaluate an arithmetic node directly (what _arith_compile does not compile)."""
        t = node.type
        if t == "number":
            return _int(_text(node), self)
        if t in ("variable_name", "word"):
            name = _text(node)
            if re.fullmatch(r"-?\d\w*", name):
                return _int(name, self)
            return self._var_int(name)
        if t == "parenthesized_expression":
            return self.arith([c for c in node.children if c.is_named][0])
        if t in ("simple_expansion", "expansion", "command_substitution", "string",
                 "arithmetic_expansion", "concatenation", "raw_string"):
            return self.arith_text(self.expand_str(node))
        if t == "unary_expression" or t == "prefix_expression":
            op = _text(node.children[0])
            operand = node.children[1]
            if op in ("++", "--"):
                name = _text(operand)
                v = self._var_int(name) + (1 if op == "++" else -1)
                self.set_var(name, str(v))
                return v
            v = self.arith(operand)
            return {"-": -v, "+": v, "!": int(v == 0), "~": ~v}[op]
        if t == "postfix_expression":
            name = _text(node.children[0])
            op = _text(node.children[1])
            v = self._var_int(name)
            self.set_var(name, str(v + (1 if op == "++" else -1)))
            return v
        if t == "variable_assignment":
            name_node = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            assert name_node is not None
            v = self.arith(value) if value is not None else 0
            self.set_var(_text(name_node), str(v))
            return v
        if t == "ternary_expression":
            parts = [c for c in node.children if c.is_named]
            return self.arith(parts[1]) if self.arith(parts[0]) else self.arith(parts[2])
        if t == "binary_expression":
            left = node.child_by_field_name("left")
            right = node.child_by_field_name("right")
            opn = node.child_by_field_name("operator")
            assert left is not None and right is not None and opn is not None
            op = _text(opn)
            if op in ("=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^="):
                name = _text(left)
                r = self.arith(right)
                v = r if op == "=" else _binop(op[:-1], self._var_int(name), r, self)
                self.set_var(name, str(v))
                return v
            if op == "&&":
                return int(bool(self.arith(left)) and bool(self.arith(right)))
            if op == "||":
                return int(bool(self.arith(left)) or bool(self.arith(right)))
            return _binop(op, self.arith(left), self.arith(right), self)
        raise self.error(f"unsupported arithmetic '{_text(node)}'", Unsupported)

    def _var_int(self, name: str) -> int:
        value = self.vars.get(name) if name.isidentifier() else self._get(name)
        if value is None:
            return 0
        if value.isdecimal():
            return int(value)
        if value.strip() == "":
            return 0
        if re.fullmatch(r"\s*-?\d+\s*", value):
            return int(value)
        return self.arith_text(value)

    # ------------------------------------------------------------------ test / [ ] / [[ ]]
    def _test(self, words: list[str], pattern: list[bool], double: bool) -> bool:
        n = len(words)
        # the usual shapes, decided as the general parser below would decide them
        if n == 3 and words[1] in _BINARY and words[0] not in ("!", "("):
            return self._binary_test(words[0], words[1], words[2], double and pattern[2])
        if n == 2 and words[0] in _UNARY and words[1] not in _BINARY:
            return self._unary_test(words[0], words[1])
        if n == 1:
            return words[0] != ""
        pos = 0

        def peek(k: int = 0) -> str | None:
            return words[pos + k] if pos + k < len(words) else None

        def expr() -> bool:
            nonlocal pos
            v = conj()
            while peek() == "-o":
                pos += 1
                r = conj()
                v = v or r
            return v

        def conj() -> bool:
            nonlocal pos
            v = neg()
            while peek() == "-a" and pos + 1 < len(words):
                pos += 1
                r = neg()
                v = v and r
            return v

        def neg() -> bool:
            nonlocal pos
            if peek() == "!" and pos + 1 < len(words):
                pos += 1
                return not neg()
            return primary()

        def primary() -> bool:
            nonlocal pos
            w = peek()
            if w is None:
                return False
            if w == "(" and pos + 1 < len(words):
                pos += 1
                v = expr()
                if peek() == ")":
                    pos += 1
                return v
            op = peek(1)
            if op in _BINARY and pos + 2 < len(words):
                right = words[pos + 2]
                is_pat = pattern[pos + 2]
                pos += 3
                return self._binary_test(w, op, right, double and is_pat)
            if w in _UNARY and pos + 1 < len(words) and op not in _BINARY:
                pos += 2
                return self._unary_test(w, words[pos - 1])
            pos += 1
            return w != ""

        result = expr()
        if pos != len(words):
            raise self.error(f"test: cannot parse '{' '.join(words)}'")
        return result

    def _binary_test(self, a: str, op: str, b: str, is_pattern: bool) -> bool:
        if op in ("=", "=="):
            return fnmatch.fnmatchcase(a, b) if is_pattern else a == b
        if op == "!=":
            return not fnmatch.fnmatchcase(a, b) if is_pattern else a != b
        if op == "=~":
            return re.search(b, a) is not None
        if op == "<":
            return a < b
        if op == ">":
            return a > b
        if op in ("-nt", "-ot", "-ef"):
            raise self.error(f"test {op} compares file times, known only at run time",
                             Unsupported)
        try:
            x, y = int(a.strip() or "0"), int(b.strip() or "0")
        except ValueError:
            raise self.error(f"test: integer expression expected: '{a}' {op} '{b}'")
        return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y,
                "-ge": x >= y}[op]

    def _unary_test(self, op: str, arg: str) -> bool:
        if op == "-z":
            return arg == ""
        if op == "-n":
            return arg != ""
        if op in ("-v",):
            return arg in self.vars
        path = os.path.normpath(os.path.join(self.cwd, arg)) if arg else ""
        kind = self.fs.kind(path) if path else None
        if op in ("-e", "-a"):
            return kind is not None
        if op == "-f":
            return kind == "f"
        if op == "-d":
            return kind == "d"
        if op in ("-r", "-w", "-x"):
            if kind is None:
                return False
            if path in self.fs.written:
                return op != "-x"
            return os.access(path, {"-r": os.R_OK, "-w": os.W_OK, "-x": os.X_OK}[op])
        if op in ("-s",):
            if kind is None:
                return False
            if path in self.fs.written:
                raise self.error(f"test -s '{arg}': its size is known only after line "
                                 f"{self.fs.written[path]} runs", Unsupported)
            return kind == "d" or os.path.getsize(path) > 0
        if op in ("-L", "-h"):
            return path not in self.fs.written and os.path.islink(path)
        raise self.error(f"test {op} is not supported", Unsupported)


_BINARY = frozenset({"=", "==", "!=", "=~", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge",
                     "-nt", "-ot", "-ef"})
_UNARY = frozenset({"-z", "-n", "-e", "-f", "-d", "-r", "-w", "-x", "-s", "-L", "-h", "-v",
                    "-a"})


@lru_cache(maxsize=4096)
def _arith_tree(text: str) -> Node | None:
    root = parse_fragment(f"(( {text} ))")
    if root.has_error or not root.children:
        return None
    stmt = root.children[0]
    exprs = [c for c in stmt.children if c.is_named]
    return exprs[-1] if exprs else None


_ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^="})
_EXPANDING = frozenset({"simple_expansion", "expansion", "command_substitution", "string",
                        "arithmetic_expansion", "concatenation", "raw_string"})


def _arith_compile(node: Node) -> tuple:  # type: ignore[type-arg]
    """An arithmetic node as nested tuples, evaluated by ``Interpreter._aeval``; what this does
    not know becomes ``("node", node)``, evaluated by ``Interpreter._arith_node``."""
    t = node.type
    if t == "number":
        return _num_prog(_text(node))
    if t in ("variable_name", "word"):
        name = _text(node)
        if re.fullmatch(r"-?\d\w*", name):
            return _num_prog(name)
        return ("var", name)
    if t == "binary_expression":
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        opn = node.child_by_field_name("operator")
        if left is None or right is None or opn is None:
            return ("node", node)
        op = _text(opn)
        if op in _ASSIGN_OPS:
            return ("aset", op, _text(left), _arith_compile(right))
        if op == "&&":
            return ("and", _arith_compile(left), _arith_compile(right))
        if op == "||":
            return ("or", _arith_compile(left), _arith_compile(right))
        return ("bin", op, _arith_compile(left), _arith_compile(right))
    if t == "parenthesized_expression":
        named = [c for c in node.children if c.is_named]
        return _arith_compile(named[0]) if named else ("node", node)
    if t in _EXPANDING:
        return ("text", node)
    if t == "unary_expression" or t == "prefix_expression":
        kids = node.children
        if len(kids) < 2:
            return ("node", node)
        op = _text(kids[0])
        if op in ("++", "--"):
            return ("pre", _text(kids[1]), 1 if op == "++" else -1)
        if op in ("-", "+", "!", "~"):
            return ("un", op, _arith_compile(kids[1]))
        return ("node", node)
    if t == "postfix_expression":
        kids = node.children
        if len(kids) < 2:
            return ("node", node)
        return ("post", _text(kids[0]), 1 if _text(kids[1]) == "++" else -1)
    if t == "variable_assignment":
        name_node = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name_node is None:
            return ("node", node)
        return ("assign", _text(name_node), None if value is None else _arith_compile(value))
    if t == "ternary_expression":
        parts = [c for c in node.children if c.is_named]
        if len(parts) < 3:
            return ("node", node)
        return ("tern", *(_arith_compile(c) for c in parts[:3]))
    return ("node", node)


def _num_prog(text: str) -> tuple[str, int | str]:
    try:
        return ("n", _parse_int(text))
    except ValueError:
        return ("badnum", text)


@lru_cache(maxsize=4096)
def _arith_text_prog(text: str) -> tuple | None:  # type: ignore[type-arg]
    root = _arith_tree(text)
    return None if root is None else _arith_compile(root)


@lru_cache(maxsize=256)
def _printf_format(fmt: str) -> tuple[str, str] | None:
    """A printf format we compute natively: (conversion letters, %-template or literal text);
    None for one to run with the real printf."""
    if "%" not in fmt.replace("%%", "") or all(
            re.fullmatch(r"%(-?0?\d*(\.\d+)?[sdif]|%)", m.group(0))
            for m in re.finditer(r"%[-0-9.]*[a-zA-Z%]", fmt)):
        specs = re.findall(r"%[-0-9.]*[sdif]", fmt)
        kinds = "".join(spec[-1] for spec in specs)
        template = (_ansi_c(fmt.replace("%i", "%d")) if specs
                    else _ansi_c(fmt).replace("%%", "%"))
        return kinds, template
    return None


def _parse_int(text: str) -> int:
    if "#" in text:
        base, digits = text.split("#", 1)
        return int(digits, int(base))
    if text.lower().startswith(("0x", "-0x")):
        return int(text, 16)
    if len(text.lstrip("-")) > 1 and text.lstrip("-").startswith("0"):
        return int(text, 8)
    return int(text)


def _int(text: str, interp: Interpreter) -> int:
    try:
        return _parse_int(text)
    except ValueError:
        raise interp.error(f"bad number '{text}' in arithmetic")


_BINOPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "**": operator.pow,
    "<": lambda a, b: int(a < b), ">": lambda a, b: int(a > b), "<=": lambda a, b: int(a <= b),
    ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b), "<<": operator.lshift, ">>": operator.rshift,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, ",": lambda a, b: b,
}


def _binop(op: str, a: int, b: int, interp: Interpreter) -> int:
    fn = _BINOPS.get(op)
    if fn is not None:
        return fn(a, b)  # type: ignore[no-any-return]
    if op in ("/", "%") and b == 0:
        raise interp.error("division by zero in arithmetic")
    if op == "/":
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if op == "%":
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    raise interp.error(f"unsupported arithmetic operator '{op}'", Unsupported)


def _trim(value: str, pat: str, op: str) -> str:
    rx = fnmatch.translate(pat)[4:-3] if pat else ""  # strip (?s:...)\Z wrapper
    if op in ("#", "##"):
        m = re.match(f"(?s:{rx})" if op == "##" else f"(?s:{_lazy(rx)})", value)
        if op == "#":
            for k in range(len(value) + 1):
                if fnmatch.fnmatchcase(value[:k], pat):
                    return value[k:]
            return value
        return value[m.end():] if m else value
    # suffix: % shortest, %% longest
    rng = range(len(value), -1, -1) if op == "%" else range(0, len(value) + 1)
    for k in rng:
        if fnmatch.fnmatchcase(value[k:], pat):
            return value[:k]
    return value


def _lazy(rx: str) -> str:
    return rx.replace(".*", ".*?")


def _replace(value: str, pat: str, rep: str, op: str) -> str:
    if not pat:
        return value
    n = len(value)
    if op == "/#":
        for k in range(n, -1, -1):
            if fnmatch.fnmatchcase(value[:k], pat):
                return rep + value[k:]
        return value
    if op == "/%":
        for k in range(0, n + 1):
            if fnmatch.fnmatchcase(value[k:], pat):
                return value[:k] + rep
        return value
    out = []
    i = 0
    replaced = False
    while i <= n:
        match_end = -1
        if not (replaced and op == "/"):
            for k in range(n, i, -1):  # longest match at i
                if fnmatch.fnmatchcase(value[i:k], pat):
                    match_end = k
                    break
        if match_end > i:
            out.append(rep)
            i = match_end
            replaced = True
            continue
        if i < n:
            out.append(value[i])
        i += 1
    return "".join(out)


class _Expr:
    """``expr`` arguments: | & = > >= < <= != + - * / % : and parentheses."""

    def __init__(self, args: list[str]) -> None:
        self.a = args
        self.i = 0

    def parse(self) -> str | int:
        v = self._or()
        if self.i != len(self.a):
            raise ScriptError(f"expr: syntax error near '{self.a[self.i]}'")
        return v

    def _peek(self) -> str | None:
        return self.a[self.i] if self.i < len(self.a) else None

    def _or(self) -> str | int:
        v = self._and()
        while self._peek() == "|":
            self.i += 1
            r = self._and()
            v = v if v not in ("", 0, "0") else r
        return v

    def _and(self) -> str | int:
        v = self._cmp()
        while self._peek() == "&":
            self.i += 1
            r = self._cmp()
            v = v if v not in ("", 0, "0") and r not in ("", 0, "0") else 0
        return v

    def _cmp(self) -> str | int:
        v = self._add()
        while self._peek() in ("=", "!=", "<", "<=", ">", ">="):
            op = self._peek()
            self.i += 1
            r = self._add()
            try:
                x, y = int(v), int(r)
                res = {"=": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y,
                       ">=": x >= y}[op]  # type: ignore[index]
            except ValueError:
                sx, sy = str(v), str(r)
                res = {"=": sx == sy, "!=": sx != sy, "<": sx < sy, "<=": sx <= sy,
                       ">": sx > sy, ">=": sx >= sy}[op]  # type: ignore[index]
            v = int(res)
        return v

    def _add(self) -> str | int:
        v = self._mul()
        while self._peek() in ("+", "-"):
            op = self._peek()
            self.i += 1
            r = self._mul()
            v = int(v) + int(r) if op == "+" else int(v) - int(r)
        return v

    def _mul(self) -> str | int:
        v = self._match()
        while self._peek() in ("*", "/", "%"):
            op = self._peek()
            self.i += 1
            r = int(self._match())
            x = int(v)
            if r == 0:
                raise ScriptError("expr: division by zero")
            q = abs(x) // abs(r) * (1 if (x >= 0) == (r >= 0) else -1)
            v = q if op == "/" else (x - q * r if op == "%" else x * r)
        return v

    def _match(self) -> str | int:
        v = self._atom()
        while self._peek() == ":":
            self.i += 1
            pat = str(self._atom())
            m = re.match(pat.replace(r"\(", "(").replace(r"\)", ")"), str(v))
            if m and m.groups():
                v = m.group(1) or ""
            else:
                v = m.end() if m else 0
        return v

    def _atom(self) -> str | int:
        w = self._peek()
        if w is None:
            raise ScriptError("expr: syntax error")
        self.i += 1
        if w == "(":
            v = self._or()
            self.i += 1
            return v
        if w == "length":
            return len(str(self._atom()))
        return w
