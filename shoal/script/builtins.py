"""Builtins and helpers evaluated at compile time, and command substitution."""

from __future__ import annotations

import os
import re
import subprocess
from functools import lru_cache
from typing import Any

from .errors import ScriptError, Unsupported
from .model import IN
from .nodes import (
    CAPTURE_HELPERS,
    PURE_FILTERS,
    STATIC_BUILTINS,
    _Break,
    _Continue,
    _Exit,
    _named,
    _Return,
    _text,
)
from .parser import Node, parse
from .words import ansi_c as _ansi_c

# `set -o NAME` options that have a letter, and those that have none. Only the ones whose meaning
# the compiler models (or that do not change what runs) are accepted.
SET_O_LETTERS = {"errexit": "e", "nounset": "u", "xtrace": "x", "verbose": "v", "noglob": "f",
                 "noclobber": "C", "allexport": "a", "hashall": "h", "braceexpand": "B"}
SET_O_ONLY = frozenset({"pipefail"})


class BuiltinsMixin:
    """Static builtins, as the interpreter's mixin."""

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
                if a[1:] == "o":
                    if i + 1 >= len(args):
                        raise self.error("'set -o' without an option name (it prints the "
                                         "options)", Unsupported)
                    name = args[i + 1]
                    if name not in SET_O_LETTERS and name not in SET_O_ONLY:
                        raise self.error(f"set -o {name}: not supported", Unsupported)
                    self._set_option(SET_O_LETTERS.get(name, name), on)
                    i += 2
                    continue
                for letter in a[1:]:
                    name = next((k for k, v in SET_O_LETTERS.items() if v == letter), None)
                    if name is None:
                        raise self.error(f"set {a[0]}{letter}: not supported", Unsupported)
                    self._set_option(letter, on)
                i += 1
                continue
            self.positional = args[i:]
            return 0
        return 0

    def _set_option(self, opt: str, on: bool) -> None:
        """Record a shell option (a `set` letter, or a long name without one: pipefail)."""
        if on:
            self.shell_options.add(opt)
        else:
            self.shell_options.discard(opt)
        self.set_e = "e" in self.shell_options

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

