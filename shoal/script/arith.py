"""Shell arithmetic: ``$(( ))``, ``(( ))``, ``let``, ``for (( ))``."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from functools import lru_cache
from typing import NoReturn

from .errors import ScriptError, Unsupported
from .nodes import _text
from .parser import Node, parse_fragment


class ArithError(ScriptError):
    """An arithmetic error inside ``(( ))``, ``let`` or ``for (( ))``: the command fails."""


class ArithMixin:
    """Arithmetic evaluation, as the interpreter's mixin."""

    _arith_soft = 0  # > 0 inside (( )), let, for (( )): an error fails the command only

    # ------------------------------------------------------------------ arithmetic
    def arith_text(self, text: str) -> int:
        """Evaluate an arithmetic expression given as text (``let``, variable contents)."""
        text = text.strip()
        if text.isdecimal() and (text[0] != "0" or len(text) == 1):
            return _wrap(int(text))
        if text == "":
            return 0
        prog = _arith_text_prog(text)
        if prog is None:
            raise self.error(f"arithmetic expression '{text}' (not understood)", Unsupported)
        return self._aeval(prog)

    def arith_error(self, expr: str, message: str, token: str) -> NoReturn:
        """Bash's arithmetic error: in ``(( ))``/``let``/``for (( ))`` the command fails with
        status 1 (ArithError, caught there); anywhere else (``$(( ))``, a ``declare -i``
        assignment) bash prints it and abandons the current top-level command (``_abort``)."""
        text = f'{expr}: {message} (error token is "{token}")'
        if self._arith_soft:
            raise ArithError(text)
        self._abort(text)

    def _arith_status(self, what: str, fn: Callable[[], int]) -> int:
        """Run ``fn`` (an arithmetic command) as bash does: an error prints ``WHAT: ...`` on
        stderr and makes the status 1, the script goes on."""
        self._arith_soft += 1
        try:
            return fn()
        except ArithError as exc:
            self._stderr(f"{what}: {exc.message}")
            return 1
        finally:
            self._arith_soft -= 1

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
            v = _wrap(self._var_int(prog[1]) + prog[2])
            self.set_var(prog[1], str(v))
            return v
        if op == "post":
            v = self._var_int(prog[1])
            self.set_var(prog[1], str(_wrap(v + prog[2])))
            return v
        if op == "un":
            v = self._aeval(prog[2])
            return {"-": _wrap(-v), "+": v, "!": int(v == 0), "~": ~v}[prog[1]]
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
            _int(prog[1], self)  # raises bash's error
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
            return {"-": _wrap(-v), "+": v, "!": int(v == 0), "~": ~v}[op]
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
            if "u" in self.shell_options:
                self._fatal(f"{name}: unbound variable")
            return 0
        if value.isdecimal() and (value[0] != "0" or len(value) == 1):
            return _wrap(int(value))
        return self.arith_text(value)  # a variable's value is an expression in its own right



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
        text = _text(node)
        if "$" in text or "`" in text:
            return ("text", node)  # `10#${y}`: expanded first, then read as a number
        return _num_prog(text)
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
            # tree-sitter nests x = y = 4 as (x = y) = 4; assignment is right-associative
            chain = [(op, right)]
            while left.type == "binary_expression" and _text(
                    left.child_by_field_name("operator") or left) in _ASSIGN_OPS:
                chain.append((_text(left.child_by_field_name("operator")),  # type: ignore[arg-type]
                              left.child_by_field_name("right")))
                left = left.child_by_field_name("left")  # type: ignore[assignment]
            targets = [_text(left)] + [_text(n) for _, n in reversed(chain[1:])]
            ops = [o for o, _ in reversed(chain)]
            prog = _arith_compile(chain[0][1])
            for name, o in zip(reversed(targets), reversed(ops), strict=True):
                prog = ("aset", o, name, prog)
            return prog
        if op == "**":  # tree-sitter nests a ** b ** c to the left; bash to the right
            operands = [right]
            while left.type == "binary_expression" and _text(
                    left.child_by_field_name("operator") or left) == "**":
                operands.append(left.child_by_field_name("right"))  # type: ignore[arg-type]
                left = left.child_by_field_name("left")  # type: ignore[assignment]
            prog = _arith_compile(left)
            progs = [prog] + [_arith_compile(n) for n in reversed(operands)]
            out = progs[-1]
            for p in reversed(progs[:-1]):
                out = ("bin", "**", p, out)
            return out
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
            return _unary((op,), kids[1])
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


def _unary(ops: tuple[str, ...], node: Node) -> tuple:  # type: ignore[type-arg]
    """Unary operators ``ops`` (outermost first) applied to ``node``.

    tree-sitter-bash 0.25 nests ``-2 - 1`` as ``-(2 - 1)``; in bash a unary operator binds
    tighter than every binary one (``-2**2`` is 4), so it applies to the leftmost operand."""
    t = node.type
    kids = node.children
    if t in ("unary_expression", "prefix_expression") and len(kids) >= 2 and \
            _text(kids[0]) in ("-", "+", "!", "~"):
        return _unary((*ops, _text(kids[0])), kids[1])
    if t == "binary_expression":
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        opn = node.child_by_field_name("operator")
        if left is not None and right is not None and opn is not None and \
                _text(opn) not in _ASSIGN_OPS:
            op = _text(opn)
            kind = {"&&": "and", "||": "or"}.get(op)
            lhs, rhs = _unary(ops, left), _arith_compile(right)
            return (kind, lhs, rhs) if kind else ("bin", op, lhs, rhs)
    if t == "ternary_expression":
        parts = [c for c in kids if c.is_named]
        if len(parts) >= 3:
            return ("tern", _unary(ops, parts[0]), _arith_compile(parts[1]),
                    _arith_compile(parts[2]))
    prog = _arith_compile(node)
    for op in reversed(ops):
        prog = ("un", op, prog)
    return prog


def _num_prog(text: str) -> tuple[str, int | str]:
    try:
        return ("n", _parse_int(text))
    except ValueError:
        return ("badnum", text)


@lru_cache(maxsize=4096)
def _arith_text_prog(text: str) -> tuple | None:  # type: ignore[type-arg]
    root = _arith_tree(text)
    return None if root is None else _arith_compile(root)




_MASK = (1 << 64) - 1
_MIN = -(1 << 63)


def _wrap(v: int) -> int:
    """Bash arithmetic is 64-bit two's complement: results wrap around."""
    if _MIN <= v <= -_MIN - 1:
        return v
    return ((v - _MIN) & _MASK) + _MIN


class BadNumber(ValueError):
    """An integer constant bash rejects; ``args[0]`` is bash's message."""


def _digit(c: str, base: int) -> int:
    if c.isdigit():
        return ord(c) - 48
    if "a" <= c <= "z":
        return ord(c) - 87
    if "A" <= c <= "Z":
        return ord(c) - (55 if base <= 36 else 29)
    if c == "@":
        return 62
    if c == "_":
        return 63
    return -1


def _parse_int(text: str) -> int:
    """An integer constant as bash's ``strlong`` reads it: ``0x`` hex, leading ``0`` octal,
    ``BASE#DIGITS`` with bases 2 to 64, 64-bit wrap-around; BadNumber with bash's message."""
    if text[:1] == "-":
        return _wrap(-_parse_int(text[1:]))
    if text.isdecimal() and (text[0] != "0" or len(text) == 1):
        return _wrap(int(text))  # the usual case
    s, i, base, found = text, 0, 10, False
    if s[:1] == "0":
        i = 1
        if len(s) == 1:
            return 0
        if s[1] in "xX":
            base, i = 16, 2
        else:
            base = 8
        found = True
    val = 0
    while i < len(s):
        c = s[i]
        i += 1
        if c == "#":
            if found:
                raise BadNumber("invalid number")
            if val < 2 or val > 64:
                raise BadNumber("invalid arithmetic base")
            base, val, found = val, 0, True
            if i >= len(s) or not 0 <= _digit(s[i], base) < base:
                raise BadNumber("invalid integer constant")
            continue
        d = _digit(c, base)
        if d < 0:
            raise BadNumber("invalid number")
        if d >= base:
            raise BadNumber("value too great for base")
        val = (val * base + d) & _MASK
    return _wrap(val)


def _int(text: str, interp: ArithMixin) -> int:
    try:
        return _parse_int(text)
    except BadNumber as exc:
        interp.arith_error(text.lstrip("-"), str(exc), text.lstrip("-"))
        raise AssertionError("arith_error returned")  # pragma: no cover


def _shl(a: int, b: int) -> int:
    return _wrap(a << (b & 63))  # x86 shifts count modulo 64, as bash's C does


def _shr(a: int, b: int) -> int:
    return a >> (b & 63)


_BINOPS = {
    "+": lambda a, b: _wrap(a + b), "-": lambda a, b: _wrap(a - b),
    "*": lambda a, b: _wrap(a * b),
    "<": lambda a, b: int(a < b), ">": lambda a, b: int(a > b), "<=": lambda a, b: int(a <= b),
    ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b), "<<": _shl, ">>": _shr,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, ",": lambda a, b: b,
}


def _binop(op: str, a: int, b: int, interp: ArithMixin) -> int:
    fn = _BINOPS.get(op)
    if fn is not None:
        return fn(a, b)  # type: ignore[no-any-return]
    if op in ("/", "%") and b == 0:
        interp.arith_error(f"{a}{op}{b}", "division by 0", str(b))
    if op == "/":
        if a == _MIN and b == -1:
            return _MIN
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if op == "%":
        if b == -1:
            return 0
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    if op == "**":
        if b < 0:
            interp.arith_error(f"{a}**{b}", "exponent less than 0", str(b))
        return _wrap(pow(a, b, 1 << 64))
    raise interp.error(f"arithmetic operator '{op}'", Unsupported)
