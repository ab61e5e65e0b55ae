"""Text rules of bash 5.2 builtins, as pure functions: ``echo`` escapes, ``read``'s line reading
and field splitting, a native ``printf`` for the common formats, ``getopts``, ``expr``.

Each follows bash's own C code (``builtins/echo.def``, ``read.def``, ``getopts.def``); the tests
check them against real bash.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .errors import ScriptError
from .words import backslash_escapes


def echo_escapes(text: str) -> tuple[str, bool]:
    """``echo -e`` escapes: (text, stopped); ``\\c`` stops all further output."""
    return backslash_escapes(text, echo=True)


def echo_output(args: list[str]) -> str:
    """What bash's ``echo ARGS`` writes (xpg_echo off): options ``-n``, ``-e``, ``-E`` in any
    combination, up to the first word that is not one of them."""
    newline, escapes = True, False
    while args and re.fullmatch(r"-[neE]+", args[0]):
        for letter in args[0][1:]:
            if letter == "n":
                newline = False
            else:
                escapes = letter == "e"
        args = args[1:]
    text = " ".join(args)
    if escapes:
        text, stopped = echo_escapes(text)
        if stopped:
            return text
    return text + ("\n" if newline else "")


# ---------------------------------------------------------------------------------- read
def read_record(buf: str, delim: str, raw: bool) -> tuple[list[tuple[str, bool]], str, bool]:
    """Read one record as ``read`` does: (characters with 'escaped' flags, the rest of the input,
    whether the delimiter was found). Without ``-r`` a backslash quotes the next character and
    backslash-newline is removed (the record continues on the next line)."""
    chars: list[tuple[str, bool]] = []
    i, n = 0, len(buf)
    while i < n:
        c = buf[i]
        if c == delim:
            return chars, buf[i + 1:], True
        if c == "\\" and not raw:
            if i + 1 >= n:
                i += 1
                break
            nxt = buf[i + 1]
            i += 2
            if nxt == "\n":
                continue
            chars.append((nxt, True))
            continue
        chars.append((c, False))
        i += 1
    return chars, "", False


def read_fields(chars: list[tuple[str, bool]], names: int, ifs: str) -> list[str]:
    """Split a record over ``names`` variables as bash's ``read`` does (``read.def``): the last
    one gets the rest of the line, less trailing IFS white space; a trailing single delimiter
    is dropped when the rest is exactly one field."""
    ws = {c for c in ifs if c in " \t\n"}

    def is_ws(k: int) -> bool:
        return chars[k][0] in ws and not chars[k][1]

    def is_sep(k: int) -> bool:
        return chars[k][0] in ifs and not chars[k][1]

    pos, n = 0, len(chars)
    while pos < n and is_ws(pos):  # leading IFS white space goes
        pos += 1

    def word(p: int) -> tuple[str, int]:
        # get_word_from_string: a field, then white space, one other delimiter, white space
        while p < n and is_ws(p):
            p += 1
        start = p
        while p < n and not is_sep(p):
            p += 1
        text = "".join(c for c, _ in chars[start:p])
        while p < n and is_ws(p):
            p += 1
        if p < n and is_sep(p):
            p += 1
            while p < n and is_ws(p):
                p += 1
        return text, p

    out: list[str] = []
    if not ifs:
        whole = "".join(c for c, _ in chars)
        return [whole] + [""] * (names - 1)
    for _ in range(names - 1):
        if pos >= n:
            out.append("")
            continue
        text, pos = word(pos)
        out.append(text)
    if pos >= n:
        out.append("")
        return out
    text, after = word(pos)
    if after >= n:
        out.append(text)
        return out
    end = n
    while end > pos and is_ws(end - 1):
        end -= 1
    out.append("".join(c for c, _ in chars[pos:end]))
    return out


# ---------------------------------------------------------------------------------- printf
_PLAIN_ESC = re.compile(r"\\(.)", re.S)
_SIMPLE_SPEC = re.compile(r"%(?:%|[-0 +#]*\d*(?:\.\d*)?([sdi]))")


@lru_cache(maxsize=256)
def printf_plan(fmt: str) -> tuple[str, ...] | None:
    """A format of literal text and ``%s``/``%d``/``%i`` conversions (with flags, width,
    precision) and only the escapes ``\\n \\t \\\\ \\" \\'``, as pieces: literal text and
    conversion specs alternate; None for anything else (real bash formats those)."""
    for m in _PLAIN_ESC.finditer(fmt):
        if m.group(1) not in "nt\\\"'":
            return None
    pieces: list[str] = []
    pos = 0
    for m in re.finditer(r"%", fmt):
        if m.start() < pos:
            continue
        spec = _SIMPLE_SPEC.match(fmt, m.start())
        if spec is None:
            return None
        pieces.append(_unescape(fmt[pos:m.start()]))
        if spec.group(0) == "%%":
            pieces[-1] += "%"
            pieces.append("")
        else:
            pieces.append(spec.group(0))
        pos = spec.end()
    pieces.append(_unescape(fmt[pos:]))
    return tuple(pieces)


def _unescape(text: str) -> str:
    return _PLAIN_ESC.sub(lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def printf_native(plan: tuple[str, ...], args: list[str]) -> str | None:
    """Apply a :func:`printf_plan` to ``args`` (the format is reused while arguments remain);
    None when an argument needs bash's own number parsing (not a plain decimal)."""
    specs = plan[1::2]
    convs = [s for s in specs if s]
    out: list[str] = []
    k = 0
    while True:
        for idx, piece in enumerate(plan):
            if idx % 2 == 0:
                out.append(piece)
                continue
            if not piece:
                continue
            v = args[k] if k < len(args) else ""
            k += 1
            if piece[-1] == "s":
                out.append(piece % v)
                continue
            if v == "":
                num = 0
            elif re.fullmatch(r"[-+]?(0|[1-9]\d*)", v):
                num = int(v)
            else:
                return None
            if not -(1 << 63) <= num < (1 << 63):
                return None
            out.append(piece.replace("i", "d") % num)
        if not convs or k >= len(args):
            break
    return "".join(out)


# ---------------------------------------------------------------------------------- getopts
def getopts_step(optstring: str, params: list[str], optind: int, charpos: int
                 ) -> tuple[int, str, str | None, int, int, str | None]:
    """One ``getopts`` call (``getopts.def``, ``getopt.c``): (status, the option name's new
    value, OPTARG or None to unset, new OPTIND, new position inside the word, error message or
    None). ``charpos`` is the index inside ``params[optind-1]`` (0 at the start of a word)."""
    silent = optstring.startswith(":")
    spec = optstring[1:] if silent else optstring
    if charpos == 0:
        if optind > len(params):
            return 1, "?", None, optind, 0, None
        word = params[optind - 1]
        if word == "--":
            return 1, "?", None, optind + 1, 0, None
        if not word.startswith("-") or word == "-":
            return 1, "?", None, optind, 0, None
        charpos = 1
    word = params[optind - 1]
    c = word[charpos]
    charpos += 1
    at_end = charpos >= len(word)
    k = spec.find(c)
    if c == ":" or k < 0:
        if at_end:
            optind, charpos = optind + 1, 0
        if silent:
            return 0, "?", c, optind, charpos, None
        return 0, "?", None, optind, charpos, f"illegal option -- {c}"
    if k + 1 < len(spec) and spec[k + 1] == ":":
        if not at_end:
            return 0, c, word[charpos:], optind + 1, 0, None
        if optind + 1 > len(params):
            if silent:
                return 0, ":", c, optind + 1, 0, None
            return 0, "?", None, optind + 1, 0, f"option requires an argument -- {c}"
        return 0, c, params[optind], optind + 2, 0, None
    if at_end:
        optind, charpos = optind + 1, 0
    return 0, c, None, optind, charpos, None


# ---------------------------------------------------------------------------------- expr
class Expr:
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
