"""Word expansion as bash does it, in the order the shell specification gives.

A word reaches this module as its source text (see :mod:`shoal.script.words` for why not as
tree-sitter nodes) and goes through: brace expansion (on the text), tilde expansion, parameter
expansion, command substitution and arithmetic expansion (left to right), field splitting on
``IFS`` of the unquoted results, pathname expansion of each field against the simulated file
system (files that exist *at this point of the script*), and quote removal. Assignments, case
words, redirection targets and here-documents take the subset bash applies to them
(:meth:`ExpandMixin.expand_str`, :meth:`ExpandMixin.expand_pattern`).
"""

from __future__ import annotations

import fnmatch
import os
import pwd
import re
from functools import lru_cache

from .errors import Unsupported
from .parser import Node, parse
from .simfs import has_glob
from .words import (
    ARITH,
    CMDSUB,
    LIT,
    PARAM,
    TILDE,
    WordError,
    brace_expand,
    has_braces,
    is_plain,
    parse_word,
    split_pattern_replacement,
)

_SLOW = object()  # a word the fast path cannot expand
_DEFAULT_IFS = " \t\n"
_GLOB_CHARS = frozenset("*?[")
_OPTION_ORDER = "abefhkmnptuvxBCHP"  # the order bash lists option letters in $-


def _escape_glob(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


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
    """Builds the fields of one word during expansion (field splitting happens here)."""

    def __init__(self) -> None:
        self.fields: list[list[tuple[str, bool]]] = []
        self.cur: list[tuple[str, bool]] | None = None

    def lit(self, text: str, quoted: bool) -> None:
        if self.cur is None:
            self.cur = []
            self.fields.append(self.cur)
        self.cur.append((text, quoted))

    def split(self, text: str, ifs: str) -> None:
        """Add the unquoted result of an expansion: split on IFS (bash's rules)."""
        if not text:
            return
        if ifs == "":
            self.lit(text, False)
            return
        ws = "".join(c for c in ifs if c in " \t\n") if ifs != _DEFAULT_IFS else ifs
        if ifs == _DEFAULT_IFS and " " not in text and "\t" not in text and "\n" not in text:
            self.lit(text, False)  # nothing to split (the usual case)
            return
        # leading IFS white space ends the field before; trailing ends this one
        if ws and text[0] in ws:
            self.cur = None
        body = text.strip(ws) if ws else text
        end_break = bool(ws) and text[-1] in ws and body != ""
        if body == "":
            self.cur = None
            return
        pieces = _ifs_splitter(ifs).split(body)
        hard = any(c not in " \t\n" for c in ifs)
        if hard and pieces and pieces[-1] == "" and len(pieces) > 1:
            pieces.pop()  # a trailing non-white separator ends the last field
            end_break = True
        for k, piece in enumerate(pieces):
            if k:
                self.cur = None
            if piece or hard:
                self.lit(piece, False)
        if end_break:
            self.cur = None

    def brk(self) -> None:
        self.cur = None


class ExpandMixin:
    """Expansion of words, as the interpreter's mixin."""

    # ------------------------------------------------------------------ words from the tree
    def word_texts(self, nodes: list[Node]) -> list[str]:
        """Source texts of the words ``nodes`` spell: adjacent nodes are one word (tree-sitter
        splits ``$a/$b.nc`` in two; bash ends a word only at a blank or an operator)."""
        out: list[str] = []
        end = -1
        for n in nodes:
            text = (n.text or b"").decode(errors="surrogateescape")
            if out and n.start_byte == end:
                out[-1] += text
            else:
                out.append(text)
            end = n.end_byte
        return out

    def _parse(self, text: str, mode: str = "word") -> tuple:  # type: ignore[type-arg]
        try:
            return parse_word(text, mode)
        except WordError as e:
            msg = e.message if text in e.message else f"{e.message} in '{text}'"
            raise self.error(msg, Unsupported) from None

    # ------------------------------------------------------------------ argument words
    def expand_words(self, nodes: list[Node]) -> list[str]:
        """Expand argument nodes into fields (all the expansions, splitting and globbing)."""
        return self.expand_texts(self.word_texts(nodes))

    def expand_texts(self, texts: list[str]) -> list[str]:
        """Expand words given as source text into fields."""
        out: list[str] = []
        for text in texts:
            if is_plain(text):
                out.append(text)
            elif has_braces(text) and "B" in self.shell_options:
                try:
                    alts = brace_expand(text)
                except WordError as e:
                    raise self.error(f"{e.message} in '{text}'", Unsupported) from None
                for alt in alts:
                    if not alt:
                        continue  # an empty unquoted word is removed: x{,b} -> x xb
                    if is_plain(alt):
                        out.append(alt)
                    else:
                        self._expand_word(alt, out)
            else:
                self._expand_word(text, out)
        return out

    def _expand_word(self, text: str, out: list[str]) -> None:
        parts = self._parse(text)
        fast = self._fast_word(parts)
        if fast is not _SLOW:
            if fast is not None:
                out.append(fast)  # type: ignore[arg-type]
            return
        f = _Fields()
        self._parts_into(parts, f)
        noglob = "f" in self.shell_options
        for fl in f.fields:
            if noglob:
                out.append("".join(t for t, _ in fl))
            else:
                out.extend(self._glob_field(fl))

    def _fast_word(self, parts: tuple) -> object:  # type: ignore[type-arg]
        """A word of literals and plain variables whose values need neither splitting nor
        globbing (the usual case) as one string, None for no field; ``_SLOW`` otherwise."""
        vars_ = self.vars
        ifs = vars_.get("IFS")
        if ifs is not None and ifs != _DEFAULT_IFS:
            return _SLOW
        out: list[str] = []
        field = False
        for p in parts:
            kind = p[0]
            if kind == LIT:
                if not p[2] and has_glob(p[1]):
                    return _SLOW
                out.append(p[1])
                field = True
                continue
            if kind != PARAM or p[2] is not None or p[1] in ("@", "*"):
                return _SLOW
            name = p[1]
            if name.isidentifier():
                v = vars_.get(name)
            elif name[0] in "#!" and len(name) > 1:
                return _SLOW  # ${#name}, ${!name}
            else:
                v = self._get(name)
            if v is None and "u" in self.shell_options:
                return _SLOW
            if p[4]:
                field = True
                if v:
                    out.append(v)
                continue
            if not v:
                continue
            if " " in v or "\t" in v or "\n" in v or "*" in v or "?" in v or "[" in v:
                return _SLOW
            out.append(v)
            field = True
        return "".join(out) if field else None

    def _parts_into(self, parts: tuple, f: _Fields) -> None:  # type: ignore[type-arg]
        for p in parts:
            kind = p[0]
            if kind == LIT:
                f.lit(p[1], p[2])
            elif kind == PARAM:
                self._param(p[1], p[2], p[3], p[4], f)
            elif kind == CMDSUB:
                self._value_into(self.substitute(p[1]), f, p[2])
            elif kind == ARITH:
                self._value_into(str(self._arith_expansion(p[1])), f, p[2])
            else:  # TILDE
                f.lit(self._tilde(p[1]), True)

    def _value_into(self, value: str, f: _Fields, quoted: bool) -> None:
        if quoted:
            f.lit(value, True)
        else:
            f.split(value, self.vars.get("IFS", _DEFAULT_IFS))

    def _arith_expansion(self, expr: str) -> int:
        # parameters and substitutions in the expression are expanded first (as bash does)
        if "$" in expr or "`" in expr:
            expr = self.expand_str(expr, "dq")
        return self.arith_text(expr)  # type: ignore[attr-defined,no-any-return]

    def _tilde(self, user: str) -> str:
        if user == "":
            return self.vars.get("HOME", "~")
        if user == "+":
            return self.vars.get("PWD", self.cwd)
        if user == "-":
            return self.vars.get("OLDPWD", "~-")
        try:
            return pwd.getpwnam(user).pw_dir
        except KeyError:
            return "~" + user

    # ------------------------------------------------------------------ single strings
    def expand_str(self, node: Node | str, mode: str = "word") -> str:
        """Expand a word to one string: no field splitting or globbing (assignments, case
        words, redirection targets, here-documents). ``node`` is a tree node or source text;
        ``mode`` as for :func:`~shoal.script.words.parse_word`."""
        if type(node) is not str:
            if node.type == "regex":  # type: ignore[union-attr]
                mode = "heredoc"  # `[[ x =~ re ]]`: backslashes keep their regex meaning
            text = (node.text or b"").decode(errors="surrogateescape")  # type: ignore[union-attr]
        else:
            text = node  # type: ignore[assignment]
        if is_plain(text):
            return text  # type: ignore[return-value]
        parts = self._parse(text, mode)  # type: ignore[arg-type]
        out: list[str] = []
        for p in parts:
            kind = p[0]
            if kind == LIT:
                out.append(p[1])
            elif kind == PARAM and p[2] is None and p[1].isidentifier():
                v = self.vars.get(p[1])
                if v is None and "u" in self.shell_options:
                    self._unbound(p[1])
                out.append(v or "")
            elif kind == TILDE:
                out.append(self._tilde(p[1]))
            else:
                f = _Fields()
                self._parts_into(((kind, *p[1:-1], True),), f)
                out.append(" ".join("".join(t for t, _ in fl) for fl in f.fields))
        return "".join(out)

    def expand_pattern(self, text: str) -> str:
        """Expand a pattern word (case patterns, ``${v#pat}``): quoted characters match
        themselves, unquoted ones (literal or from expansions) keep their glob meaning."""
        parts = self._parse(text)
        out: list[str] = []
        for p in parts:
            kind = p[0]
            if kind == LIT:
                out.append(_escape_glob(p[1]) if p[2] else p[1])
            elif kind == TILDE:
                out.append(_escape_glob(self._tilde(p[1])))
            else:
                f = _Fields()
                self._parts_into(((kind, *p[1:-1], True),), f)
                value = " ".join("".join(t for t, _ in fl) for fl in f.fields)
                out.append(_escape_glob(value) if p[-1] else value)
        return "".join(out)

    # ------------------------------------------------------------------ pathname expansion
    def _glob_field(self, fl: list[tuple[str, bool]]) -> list[str]:
        if len(fl) == 1:
            t, q = fl[0]
            if q or not has_glob(t):
                return [t]
        if any(not q and has_glob(t) for t, q in fl):
            pattern = "".join(_escape_glob(t) if q else t for t, q in fl)
            matches = self.fs.glob(pattern, self.cwd, "dotglob" in self.shopt)
            if matches:
                seen = self.result.observed
                for m in matches:
                    seen.setdefault(os.path.normpath(os.path.join(self.cwd, m)), self.line)
                return matches
            if "nullglob" in self.shopt:
                return []
            if "failglob" in self.shopt:  # bash abandons the current top-level command
                self._abort(f"no match: {''.join(t for t, _ in fl)}")  # type: ignore[attr-defined]
        return ["".join(t for t, _ in fl)]

    # ------------------------------------------------------------------ parameters
    def _unbound(self, name: str) -> None:
        # set -u: bash prints this and exits with status 1 (builtins.py: _fatal)
        self._fatal(f"{name}: unbound variable")  # type: ignore[attr-defined]

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
            return "".join(c for c in _OPTION_ORDER if c in self.shell_options)
        if name == "!":
            raise self.error("$! (background jobs) is not supported", Unsupported)
        return self.vars.get(name)

    def _param(self, name: str, op: str | None, arg: str | None, quoted: bool, f: _Fields
               ) -> None:
        """One ``$name`` / ``${...}`` into the fields."""
        if name[0] == "#" and len(name) > 1:  # ${#name}
            base = name[1:]
            if base in ("@", "*"):
                value = str(len(self.positional))
            else:
                v = self._get(base)
                if v is None and "u" in self.shell_options:
                    self._unbound(base)
                value = str(len(v or ""))
            self._value_into(value, f, quoted)
            return
        if name[0] == "!" and len(name) > 1:  # ${!name}: the variable name holds
            target = self._get(name[1:]) or ""
            if not (target.isidentifier() or target.isdigit() or target in "@*#?$-"):
                raise self.error(f"${{!{name[1:]}}}: invalid indirect name '{target}'")
            name = target
        self._param_value(name, op, arg, quoted, f)

    def _param_value(self, name: str, op: str | None, arg: str | None, quoted: bool,
                     f: _Fields) -> None:
        if name in ("@", "*") and op is None:
            ifs = self.vars.get("IFS", _DEFAULT_IFS)
            if quoted and name == "@":  # "$@": one field per parameter, none without any
                for k, p in enumerate(self.positional):
                    if k:
                        f.brk()
                    f.lit(p, True)
                return
            if quoted:  # "$*": one field, joined with IFS's first character
                f.lit((ifs[:1] if ifs is not None else " ").join(self.positional), True)
                return
            for k, p in enumerate(self.positional):
                if k:
                    f.brk()
                f.split(p, ifs)
            return
        value = self._get(name)
        if op is None:
            if value is None and "u" in self.shell_options:
                self._unbound(name)
            self._value_into(value or "", f, quoted)
            return
        arg = arg or ""
        mode = "dqparam" if quoted else "word"
        if op in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            unset = value is None or (op[0] == ":" and value == "")
            if op in (":-", "-", ":+", "+"):
                if unset == (op in (":-", "-")):
                    # the word keeps its own quoting: ${x:-"a b"} is one field, ${x:-a b} two
                    self._operand_into(self._parse(arg, mode), quoted, f)
                    return
                result = value or ""
            elif op in (":=", "="):
                if unset:
                    value = self.expand_str(arg, mode)
                    self.set_var(name, value)  # type: ignore[attr-defined]
                result = value or ""
            else:
                if unset:
                    msg = self.expand_str(arg, mode) or (
                        "parameter null or not set" if op == ":?" else "parameter not set")
                    self._fatal(f"{name}: {msg}")  # type: ignore[attr-defined]
                result = value or ""
            self._value_into(result, f, quoted)
            return
        if value is None and "u" in self.shell_options:
            self._unbound(name)
        value = value or ""
        if op in ("#", "##", "%", "%%"):
            result = _trim(value, self.expand_pattern(arg), op)
        elif op in ("/", "//", "/#", "/%"):
            pat, rep = split_pattern_replacement(arg)
            result = _replace(value, self.expand_pattern(pat), self.expand_str(rep, mode), op)
        elif op == ":":
            off_text, sep, len_text = arg.partition(":")
            off = self.arith_text(self.expand_str(off_text, "dq"))  # type: ignore[attr-defined]
            if off < 0:
                off = max(0, len(value) + off)
            if sep:
                n = self.arith_text(self.expand_str(len_text, "dq"))  # type: ignore[attr-defined]
                end = off + n if n >= 0 else len(value) + n
                if end < off:
                    raise self.error(f"{name}: substring expression < 0")
                result = value[off:end]
            else:
                result = value[off:]
        elif op in ("^^", ",,", "^", ","):
            if arg:
                raise self.error(f"${{{name}{op}{arg}}}: case conversion of a pattern is not "
                                 "supported", Unsupported)
            result = {"^^": value.upper(), ",,": value.lower(),
                      "^": value[:1].upper() + value[1:], ",": value[:1].lower() + value[1:]}[op]
        else:
            raise self.error(f"unsupported parameter operator '{op}'", Unsupported)
        self._value_into(result, f, quoted)

    def _operand_into(self, parts: tuple, quoted: bool,  # type: ignore[type-arg]
                      f: _Fields) -> None:
        """The word of ``${v:-word}`` / ``${v:+word}``: inside double quotes all of it is
        quoted; outside, its unquoted literals are split like any expansion's result."""
        ifs = self.vars.get("IFS", _DEFAULT_IFS)
        for p in parts:
            if p[0] == LIT:
                if quoted or p[2]:
                    f.lit(p[1], True)
                else:
                    f.split(p[1], ifs)
            elif p[0] == TILDE:
                f.lit(self._tilde(p[1]), True)
            else:
                self._parts_into(((*p[:-1], quoted or p[-1]),), f)

    # ------------------------------------------------------------------ command substitution
    def substitute(self, body: str) -> str:
        """The output of ``$(body)`` with trailing newlines removed, computed statically."""
        stripped = body.strip()
        if stripped.startswith("<") and not stripped.startswith("<<") and "\n" not in stripped:
            target = self.expand_str(stripped[1:].strip())
            return self._read_static_file(target).rstrip("\n")  # type: ignore[attr-defined]
        line = self.line
        try:
            nodes = self._subst_nodes(body, line)
            return self._capture_nodes(nodes).rstrip("\n")  # type: ignore[attr-defined]
        finally:
            self.line = line

    def _subst_nodes(self, body: str, line: int) -> list[Node]:
        """The statements of a substitution's body, parsed once per (line, body); the body is
        parsed on its own line so errors inside it name the script's line."""
        key = (line, body)
        hit = self._subst_text_cache.get(key)
        if hit is None:
            root = parse(("\n" * (line - 1) + body).encode(errors="surrogateescape"),
                         self.script)
            hit = [c for c in root.children if c.is_named and c.type != "comment"]
            self._subst_text_cache[key] = hit
        return hit

    def command_substitution(self, node: Node) -> str:
        """``$(...)`` given as a tree node."""
        text = (node.text or b"").decode(errors="surrogateescape")
        if text.startswith("`"):
            return self.substitute(re.sub(r"\\([$`\\])", r"\1", text[1:-1]))
        if text.startswith("$((") and text.endswith("))"):
            return str(self._arith_expansion(text[3:-2]))
        return self.substitute(text[2:-1])


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


