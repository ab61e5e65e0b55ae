"""Shell words as bash reads them: the lexical half of word expansion, with no interpreter state.

tree-sitter-bash gives statement structure, but its word boundaries are not bash's
(``$out/ens_t$i.nc`` comes out as ``$out/ens_t$`` and ``i.nc``). So the interpreter takes each
word's *source text* (adjacent nodes joined: in bash, words end only at unquoted blanks and
operators) and this module reads it the way bash does, into a flat tuple of parts:

* ``(LIT, text, quoted)``: literal text; ``quoted`` text is never split or globbed
* ``(PARAM, name, op, arg, quoted)``: ``$name``, ``${name}``, ``${name<op><arg>}``; ``name`` may
  be ``#name`` (length) or ``!name`` (indirection); ``arg`` is the raw text of the operand
* ``(CMDSUB, body, quoted)``: ``$(body)`` or a backquoted body (already unescaped)
* ``(ARITH, expr, quoted)``: ``$((expr))``
* ``(TILDE, user)``: a tilde prefix (``~`` or ``~user``) at the start of the word

The order of expansions (brace, tilde, parameter/command/arithmetic, field splitting, pathname
expansion, quote removal) is applied by :mod:`shoal.script.expand`; :func:`brace_expand` is here
because it works on source text, before anything else.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from .errors import Unsupported

LIT, PARAM, CMDSUB, ARITH, TILDE = range(5)

Part = tuple  # type: ignore[type-arg]
Word = tuple  # tuple of parts

# a word with none of these is a literal: itself (the hot path)
_SPECIAL = re.compile(r"[\\'\"$`~*?\[{]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL_PARAMS = "@*#?$!-0123456789"
# ${name OP arg}: longest operators first
_PARAM_OPS = (":-", ":=", ":+", ":?", "##", "%%", "//", "/#", "/%", "^^", ",,", "-", "=", "+",
              "?", "#", "%", "/", "^", ",", ":", "@")
_ANSI = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
         "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


class WordError(Unsupported):
    """A word bash would reject, or that the compiler cannot read (unbalanced quotes, ...)."""


def is_plain(text: str) -> bool:
    """True for a word that expands to itself (no quotes, expansions, globs or braces)."""
    return _SPECIAL.search(text) is None


def ansi_c(text: str) -> str:
    """The value of a ``$'...'`` string's contents, as bash decodes it."""
    return backslash_escapes(text)[0]


def backslash_escapes(text: str, echo: bool = False) -> tuple[str, bool]:
    """Decode backslash escapes as bash does in ``$'...'`` or, with ``echo``, in ``echo -e``:
    (text, stopped), where ``\\c`` stops echo's output. They differ in octal (``\\nnn`` vs
    ``\\0nnn``), ``\\c`` (a control character vs a stop) and ``\\'`` ``\\"`` ``\\?``."""
    if "\\" not in text:
        return text, False
    simple = _ECHO if echo else _ANSI
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        d = text[i + 1]
        if d in simple:
            out.append(simple[d])
            i += 2
        elif (m := (_ECHO_OCTAL if echo else _OCTAL).match(text, i + 1)):
            out.append(chr(int(m.group(1) or "0", 8) & 0xFF))
            i = m.end()
        elif d in "xuU" and (m := _HEX[d].match(text, i + 2)):
            out.append(chr(int(m.group(), 16)))
            i = m.end()
        elif d == "c" and echo:
            return "".join(out), True
        elif d == "c" and i + 2 < n:
            out.append(chr(ord(text[i + 2]) & 0x1F))
            i += 3
        else:
            out.append(c + d)
            i += 2
    return "".join(out), False


_ECHO = {k: v for k, v in _ANSI.items() if k not in "'\"?"}
_OCTAL = re.compile(r"([0-7]{1,3})")        # $'\nnn'
_ECHO_OCTAL = re.compile(r"0([0-7]{0,3})")  # echo -e '\0nnn'
_HEX = {"x": re.compile(r"[0-9A-Fa-f]{1,2}"), "u": re.compile(r"[0-9A-Fa-f]{1,4}"),
        "U": re.compile(r"[0-9A-Fa-f]{1,8}")}


# ---------------------------------------------------------------- scanning helpers
def _skip_squote(text: str, i: int) -> int:
    """Index after the ``'`` closing the single-quoted string whose opening quote is at i-1."""
    j = text.find("'", i)
    if j < 0:
        raise WordError("unterminated single quote")
    return j + 1


def _skip_ansi(text: str, i: int) -> int:
    """Index after the closing quote of ``$'...'`` (contents start at i)."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            return i + 1
        i += 1
    raise WordError("unterminated $'...' string")


def _skip_dquote(text: str, i: int) -> int:
    """Index after the ``"`` closing the double-quoted string whose contents start at i."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "$" and text.startswith(("$(", "${"), i):
            i = _skip_dollar(text, i)
        elif c == "`":
            i = _skip_backquote(text, i + 1)
        else:
            i += 1
    raise WordError("unterminated double quote")


def _skip_backquote(text: str, i: int) -> int:
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "`":
            return i + 1
        else:
            i += 1
    raise WordError("unterminated backquote")


def _skip_dollar(text: str, i: int) -> int:
    """Index after the ``$(...)``, ``$((...))`` or ``${...}`` starting at i (text[i] == '$')."""
    opener = text[i + 1]
    close = ")" if opener == "(" else "}"
    depth = 1
    j = i + 2
    n = len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "'" and close == ")":
            j = _skip_squote(text, j + 1)
            continue
        if c == "'" and close == "}":
            # inside ${...} single quotes quote only outside double quotes; treat as quotes
            j = _skip_squote(text, j + 1)
            continue
        if c == '"':
            j = _skip_dquote(text, j + 1)
            continue
        if c == "`":
            j = _skip_backquote(text, j + 1)
            continue
        if c == "$" and j + 1 < n and text[j + 1] in "({":
            j = _skip_dollar(text, j)
            continue
        if c == "#" and close == ")" and (j == 0 or text[j - 1] in " \t\n;|&("):
            k = text.find("\n", j)  # a comment inside $( ): skip to the end of the line
            j = n if k < 0 else k
            continue
        if c == opener:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise WordError(f"unterminated '${opener}'")


def _unquoted(text: str, i: int = 0) -> Iterator[tuple[int, str]]:
    """(index, character) of each character of ``text`` from ``i`` that is outside quotes,
    backslash escapes and ``$(..)``/``${..}``/backquoted parts."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "'":
            i = _skip_squote(text, i + 1)
        elif c == '"':
            i = _skip_dquote(text, i + 1)
        elif c == "$" and i + 1 < n and text[i + 1] in "({":
            i = _skip_dollar(text, i)
        elif c == "`":
            i = _skip_backquote(text, i + 1)
        else:
            yield i, c
            i += 1


# ---------------------------------------------------------------- the lexer
@lru_cache(maxsize=65536)
def parse_word(text: str, mode: str = "word") -> Word:
    """The parts of a word's source text.

    ``mode``: ``"word"`` (a shell word: quotes, backslashes, tilde prefix), ``"dq"`` (the
    contents of double quotes: here-documents and ``"..."``, where a backslash quotes only
    ``$ ` " \\`` and newline), ``"heredoc"`` (like dq, but ``"`` is an ordinary character),
    ``"assign"`` (a word after ``NAME=``: tilde also after ``:``), ``"dqparam"`` (the operand
    of ``${v:-word}`` inside double quotes: dq, where ``"..."`` pairs are removed too).
    """
    parts: list[Part] = []
    quoted = mode in ("dq", "heredoc", "dqparam")
    _lex(text, 0, len(text), mode, quoted, parts)
    return _merge(parts)


def _merge(parts: list[Part]) -> Word:
    """Join adjacent literals of the same quoting (fewer parts: faster expansion)."""
    out: list[Part] = []
    for p in parts:
        if p[0] == LIT and out and out[-1][0] == LIT and out[-1][2] == p[2] and p[1] and \
                out[-1][1]:
            out[-1] = (LIT, out[-1][1] + p[1], p[2])
        else:
            out.append(p)
    return tuple(out)


def _lex(text: str, i: int, end: int, mode: str, quoted: bool, parts: list[Part]) -> None:
    buf: list[str] = []

    def flush() -> None:
        if buf:
            parts.append((LIT, "".join(buf), quoted))
            buf.clear()

    in_dq = mode in ("dq", "heredoc", "dqparam")
    if mode in ("word", "assign") and text.startswith("~", i):
        i = _tilde(text, i, end, parts)
    while i < end:
        c = text[i]
        if c == "\\":
            if i + 1 >= end:
                buf.append("\\")
                i += 1
                continue
            d = text[i + 1]
            if d == "\n":
                i += 2  # line continuation
                continue
            if in_dq and d not in '$`"\\' and not (mode == "heredoc" and d == '"'):
                buf.append("\\" + d)
            elif in_dq and mode == "heredoc" and d == '"':
                buf.append('\\"')
            else:
                flush()
                parts.append((LIT, d, True))
            i += 2
            continue
        if c == "'" and not in_dq:
            flush()
            j = _skip_squote(text, i + 1)
            parts.append((LIT, text[i + 1:j - 1], True))
            i = j
            continue
        if c == '"' and mode != "heredoc":
            if in_dq and mode != "dqparam":
                raise WordError('unexpected \'"\'')
            flush()
            j = _skip_dquote(text, i + 1)
            inner: list[Part] = []
            _lex(text, i + 1, j - 1, "dq", True, inner)
            if not inner:
                inner.append((LIT, "", True))  # "" is an (empty) field
            parts.extend(inner)
            i = j
            continue
        if c == "`":
            flush()
            j = _skip_backquote(text, i + 1)
            body = re.sub(r"\\([$`\\])", r"\1", text[i + 1:j - 1])
            parts.append((CMDSUB, body, quoted))
            i = j
            continue
        if c == "$" and i + 1 < end:
            d = text[i + 1]
            if d == "'" and not in_dq:
                flush()
                j = _skip_ansi(text, i + 2)
                parts.append((LIT, ansi_c(text[i + 2:j - 1]), True))
                i = j
                continue
            if d == '"' and not in_dq:
                flush()
                j = _skip_dquote(text, i + 2)
                inner = []
                _lex(text, i + 2, j - 1, "dq", True, inner)
                parts.extend(inner or [(LIT, "", True)])
                i = j
                continue
            if d == "(":
                flush()
                j = _skip_dollar(text, i)
                if text.startswith("$((", i) and text[j - 2:j] == "))" and \
                        _arith_balanced(text[i + 3:j - 2]):
                    parts.append((ARITH, text[i + 3:j - 2], quoted))
                else:
                    parts.append((CMDSUB, text[i + 2:j - 1], quoted))
                i = j
                continue
            if d == "{":
                flush()
                j = _skip_dollar(text, i)
                parts.append(_braced_param(text[i + 2:j - 1], quoted))
                i = j
                continue
            m = _NAME.match(text, i + 1)
            if m is not None:
                flush()
                parts.append((PARAM, m.group(), None, None, quoted))
                i = m.end()
                continue
            if d in _SPECIAL_PARAMS:
                flush()
                parts.append((PARAM, d, None, None, quoted))
                i += 2
                continue
        if mode == "assign" and c == ":" and text.startswith("~", i + 1):
            buf.append(":")
            flush()
            i = _tilde(text, i + 1, end, parts)
            continue
        buf.append(c)
        i += 1
    flush()


def _arith_balanced(expr: str) -> bool:
    """``$((a) + (b))`` is arithmetic; ``$((cmd) | x)`` is a subshell in a substitution."""
    depth = 0
    for c in expr:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _tilde(text: str, i: int, end: int, parts: list[Part]) -> int:
    """A tilde prefix at i: up to the first unquoted ``/`` (or ``:`` in assignments)."""
    j = i + 1
    while j < end and text[j] not in "/:":
        if text[j] in "\\'\"$`":
            return _lit_tilde(i, parts)  # a quoted prefix is no tilde prefix
        j += 1
    user = text[i + 1:j]
    if user and not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*|[+-]", user):
        return _lit_tilde(i, parts)
    parts.append((TILDE, user))
    return j


def _lit_tilde(i: int, parts: list[Part]) -> int:
    parts.append((LIT, "~", False))
    return i + 1


def _braced_param(body: str, quoted: bool) -> Part:
    """``${...}`` contents -> (PARAM, name, op, arg, quoted)."""
    if body == "":
        raise WordError("${}: bad substitution")
    prefix = ""
    if body[0] == "#" and len(body) > 1 and body[1] not in "}:-=+?#%/":
        prefix, body = "#", body[1:]          # ${#name}: length
    elif body[0] == "#" and len(body) > 1 and body[1] == "#" and len(body) == 2:
        prefix, body = "#", body[1:]          # ${##}: length of $#
    elif body[0] == "!" and len(body) > 1:
        prefix, body = "!", body[1:]          # ${!name}: indirection
    m = _NAME.match(body)
    if m is not None:
        name, rest = m.group(), body[m.end():]
    elif body[0].isdigit():
        m = re.match(r"\d+", body)
        assert m is not None
        name, rest = m.group(), body[m.end():]
    elif body[0] in _SPECIAL_PARAMS:
        name, rest = body[0], body[1:]
    else:
        raise WordError(f"${{{body}}}: bad substitution")
    if rest.startswith("["):
        raise WordError(f"${{{prefix}{body}}}: arrays are not supported")
    if prefix == "#" and rest:
        raise WordError(f"${{#{body}}}: bad substitution")
    if prefix == "!" and rest in ("*", "@"):
        raise WordError(f"${{!{body}}}: name lists are not supported")
    if not rest:
        return (PARAM, prefix + name, None, None, quoted)
    for op in _PARAM_OPS:
        if rest.startswith(op):
            if op == "@":
                raise WordError(f"${{{body}}}: the @ operators are not supported")
            return (PARAM, prefix + name, op, rest[len(op):], quoted)
    raise WordError(f"${{{body}}}: bad substitution")


def split_pattern_replacement(arg: str) -> tuple[str, str]:
    """``pat/rep`` of ``${v/pat/rep}``: split at the first unquoted, unescaped ``/``."""
    for i, c in _unquoted(arg):
        if c == "/":
            return arg[:i], arg[i + 1:]
    return arg, ""


# ---------------------------------------------------------------- brace expansion
_BRACE_HINT = re.compile(r"\{[^{}]*(,|\.\.)")


def has_braces(text: str) -> bool:
    return "{" in text and _BRACE_HINT.search(text) is not None


@lru_cache(maxsize=4096)
def brace_expand(text: str) -> tuple[str, ...]:
    """Bash brace expansion of one word's source text (``a{b,c}d``, ``x{1..3}``), done before
    every other expansion; quoted braces and ``${`` are left alone."""
    for i, c in _unquoted(text):
        if c == "{":
            found = _brace_at(text, i)
            if found is not None:
                pre, alts, post = found
                out: list[str] = []
                tails = brace_expand(post)
                for alt in alts:
                    for tail in tails:
                        out.extend(brace_expand(pre + alt + tail))
                return tuple(out)
    return (text,)


def _brace_at(text: str, i: int) -> tuple[str, list[str], str] | None:
    """The brace expression opening at i, as (prefix, alternatives, suffix); None if it is
    not one (then the brace is literal)."""
    depth = 0
    j = len(text)
    commas: list[int] = []
    for k, c in _unquoted(text, i):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                j = k
                break
        elif c == "," and depth == 1:
            commas.append(k)
    if j >= len(text):
        return None
    pre, body, post = text[:i], text[i + 1:j], text[j + 1:]
    if commas:
        cuts = [i] + commas + [j]
        return pre, [text[a + 1:b] for a, b in zip(cuts, cuts[1:], strict=False)], post
    m = re.fullmatch(r"([+-]?\d+|[A-Za-z])\.\.([+-]?\d+|[A-Za-z])(?:\.\.([+-]?\d+))?", body)
    if not m:
        return None  # literal braces: braces inside and after them may still expand
    a, b = m.group(1), m.group(2)
    step = abs(int(m.group(3) or 1)) or 1
    if re.fullmatch(r"[+-]?\d+", a) and re.fullmatch(r"[+-]?\d+", b):
        lo, hi = int(a), int(b)
        rng = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        padded = any(re.fullmatch(r"[+-]?0\d+", x) for x in (a, b))
        width = max(len(a), len(b)) if padded else 0
        alts = [(f"-{str(-v).zfill(width - 1)}" if v < 0 else str(v).zfill(width))
                for v in rng]
    elif a.isdigit() or b.isdigit():
        return None
    else:
        lo, hi = ord(a), ord(b)
        rng = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        # bash quotes characters that are special to the shell in a letter range
        alts = [chr(v) if chr(v).isalnum() or chr(v) == "_" else "\\" + chr(v) for v in rng]
    return pre, alts, post
