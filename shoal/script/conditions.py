"""``test``, ``[ ]`` and ``[[ ]]`` evaluated against the simulated file system."""

from __future__ import annotations

import fnmatch
import os
import re

from .arith import ArithError
from .errors import Unsupported

_TEST_INT = re.compile(r"[ \t\n]*[-+]?[0-9]+[ \t\n]*")


class _TestError(Exception):
    """A test bash reports as an error: ``[`` gives status 2, ``[[`` status 1."""


class TestMixin:
    """Conditions, as the interpreter's mixin."""

    # ------------------------------------------------------------------ test / [ ] / [[ ]]
    def _test_status(self, words: list[str], pattern: list[bool], double: bool,
                     name: str = "[") -> int:
        """The exit status of ``test``/``[``/``[[`` with these operands (an error prints
        bash's message: ``[: x: integer expression expected`` is status 2)."""
        self._test_double = double
        try:
            return 0 if self._test(words, pattern, double) else 1
        except _TestError as exc:
            self._stderr(f"{'[[' if double else name}: {exc}")  # type: ignore[attr-defined]
            return 1 if double else 2

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
        x, y = self._test_int(a), self._test_int(b)
        return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y,
                "-ge": x >= y}[op]

    def _test_int(self, text: str) -> int:
        if getattr(self, "_test_double", False):  # [[ ]]: operands are arithmetic
            self._arith_soft += 1  # type: ignore[has-type]
            try:
                return self.arith_text(text)  # type: ignore[attr-defined,no-any-return]
            except ArithError as exc:
                raise _TestError(exc.message) from None
            finally:
                self._arith_soft -= 1
        if _TEST_INT.fullmatch(text):
            v = int(text)
            if -(1 << 63) <= v < (1 << 63):
                return v
        raise _TestError(f"{text}: integer expression expected")

    def _unary_test(self, op: str, arg: str) -> bool:
        if op == "-z":
            return arg == ""
        if op == "-n":
            return arg != ""
        if op in ("-v",):
            return arg in self.vars
        path = os.path.normpath(os.path.join(self.cwd, arg)) if arg else ""
        kind = self.fs.kind(path) if path else None
        if path:
            self.result.observed.setdefault(path, self.line)
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


