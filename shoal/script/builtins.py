"""Builtins evaluated at compile time, exactly as bash 5.2 runs them, or refused.

State bash keeps for builtins lives here too: variable attributes (``declare -i/-l/-u/-r/-x``),
the directory stack, ``getopts``' position, the ``EXIT`` trap and ``exec``'s redirections.
What a builtin prints outside a command substitution becomes a small ``printf`` step, so it
reaches the script's stdout/stderr in script order like every other command's output.
"""

from __future__ import annotations

import os
import re
from typing import Any, NoReturn

from .builtin_text import getopts_step, read_fields, read_record
from .capture import CaptureMixin
from .errors import ScriptError, Unsupported
from .model import Redirect, Stage
from .nodes import (
    _Break,
    _Continue,
    _Exit,
    _Return,
    _text,
)
from .parser import Node, parse
from .redirect import RedirectMixin

# `set -o NAME` options that have a letter, and those that have none. Only the ones whose meaning
# the compiler models (or that do not change what runs) are accepted.
SET_O_LETTERS = {"errexit": "e", "nounset": "u", "xtrace": "x", "verbose": "v", "noglob": "f",
                 "noclobber": "C", "allexport": "a", "hashall": "h", "braceexpand": "B"}
SET_O_ONLY = frozenset({"pipefail"})
# `shopt -s/-u` names whose meaning is modelled: the glob options (expand.py's _glob_field
# honours them) and ones that change nothing a script without aliases or a terminal does
SHOPT_MODELLED = frozenset({"nullglob", "failglob", "dotglob", "expand_aliases", "checkwinsize",
                            "histappend", "progcomp", "promptvars", "sourcepath",
                            "interactive_comments", "cmdhist", "complete_fullquote",
                            "extquote", "force_fignore", "hostcomplete"})
_ASSIGN_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=", re.S)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT_ARG = re.compile(r"[ \t]*[-+]?[0-9]+[ \t]*")


class _Abort(_Exit):
    """An error after which bash abandons the current top-level command (the rest of its line,
    the loop or function call it is in) and goes on with the next one, ``$?`` = 1: an
    arithmetic error in an expansion, an assignment to a readonly variable, ``failglob``. A
    subshell or command substitution ends there (it is an ``_Exit`` for them)."""


class _ReadonlyError(ScriptError):
    """Assignment to a readonly variable where bash only fails the builtin (status 1)."""


class BuiltinsMixin(RedirectMixin, CaptureMixin):
    """Static builtins, as the interpreter's mixin."""

    _ro_soft = 0  # > 0 inside a builtin that turns a readonly violation into status 1
    _sourcing = 0  # > 0 while a `source`d file runs (`return` ends it)

    def _init_builtins(self) -> None:
        # name -> [(attribute letters, the locals frame they belong to, None: global)]
        self._attrs: dict[str, list[tuple[set[str], dict[str, str | None] | None]]] = {}
        self._traps: dict[str, str] = {}      # EXIT -> its command text
        self._exec_fds: dict[str, tuple[str, str]] = {}  # fd -> ("file", path) | ("fd", "1")
        self._getopts_at: tuple[int, int] = (1, 0)  # (OPTIND we left, index in that word)
        self._out_redirects: list[list[Redirect]] = []  # a builtin's own output redirections
        self._root_vars = self.vars

    # ------------------------------------------------------------------ output and errors
    def _out(self, text: str) -> None:
        if not self._capture:
            raise AssertionError("static output outside a substitution")
        self._capture[-1].append(text)

    def _print(self, text: str, fd: str = "1") -> None:
        """Output of a static builtin: captured inside ``$(...)``; else a ``printf`` step, so
        it reaches the script's stdout/stderr in script order (``exec`` redirections and the
        builtin's own apply)."""
        if not text:
            return
        own = self._out_redirects[-1] if self._out_redirects else []
        if self._capture and fd == "1":
            for r in own:
                if r.fd in ("", "1") and r.op in (">", ">>", ">|", "&>", "&>>"):
                    if r.target != "/dev/null":
                        raise self.error("output of a builtin inside a command substitution "
                                         f"redirected to '{r.target}'", Unsupported)
                    return
            self._out(text)
            return
        self._check_guard("output of a builtin")
        redirects = [Redirect("", ">&", "2")] if fd == "2" else []
        st = Stage(["printf", "%s", text], redirects + list(own), {})
        self._emit([st], [[0]], [], [False])

    def _stderr(self, message: str) -> None:
        """An error message as bash prints it: ``SCRIPT: line N: MESSAGE``."""
        self._print(f"{self.script}: line {self.line}: {message}\n", "2")

    def _fatal(self, message: str, status: int = 1) -> NoReturn:
        """An error that ends a non-interactive bash (an expansion error, ``set -u``): the
        message on stderr, then exit ``status`` (a subshell or substitution ends there)."""
        if self._guard is not None:
            raise self.error(f"error '{message}' after a command whose exit status is known "
                             "only when the script runs", Unsupported)
        self._stderr(message)
        raise _Exit(status)

    def _abort(self, message: str) -> NoReturn:
        """See :class:`_Abort`: the message on stderr, then back to the top level."""
        if self._guard is not None:
            raise self.error(f"error '{message}' after a command whose exit status is known "
                             "only when the script runs", Unsupported)
        self._stderr(message)
        raise _Abort(1)

    def _run_units(self, root: Node) -> None:
        """The script's top-level commands, as bash reads them: one line (or one compound
        command) at a time, so an :class:`_Abort` skips the rest of that unit only."""
        skip_row = -1
        for stmt in self._stmts(root) or []:
            if stmt.start_point[0] <= skip_row:
                continue  # on the line the aborted command ends on: same unit
            try:
                self.exec_node(stmt)
            except _Abort as a:
                self.last_status = a.status
                skip_row = stmt.end_point[0]
            except _Break:
                pass  # `break 5` in two loops leaves them all, the script goes on
        if self.last_status:  # a script's status is its last command's (if known now)
            self.result.exit_status = self.last_status

    # ------------------------------------------------------------------ calling builtins
    def _builtin_call(self, method: Any, args: list[str], assigns: list[Any],
                      redirects: list[Any]) -> int | None:
        """A builtin with ``VAR=value`` prefixes (in effect only while it runs, as bash does
        for regular builtins) and redirections (input it reads, output it prints)."""
        saved: dict[str, str | None] = {}
        for a in assigns:
            if isinstance(a, tuple):
                name, append, value = a
                text = self.expand_str(value, "assign")
            else:
                n, v = a.child_by_field_name("name"), a.child_by_field_name("value")
                name, append = _text(n), any(c.type == "+=" for c in a.children)
                text = self.expand_str(v) if v is not None else ""
            saved.setdefault(name, self.vars.get(name))
            self.set_var(name, self._appended(name, text) if append else text)
        try:
            with self._redirected([r[0] if isinstance(r, tuple) else r for r in redirects],
                                  [r[1] if isinstance(r, tuple) else "" for r in redirects]):
                return method(args)  # type: ignore[no-any-return]
        finally:
            for name, old in saved.items():
                if old is None:
                    self.vars.pop(name, None)
                else:
                    self.vars[name] = old
                self._env_gen += 1

    # ------------------------------------------------------------------ variables
    def _attr_list(self, name: str) -> set[str] | None:
        """The attributes in force for ``name`` (entries of returned functions dropped)."""
        stack = self._attrs.get(name)
        while stack:
            letters, frame = stack[-1]
            if frame is None or any(f is frame for f in self.locals):
                return letters
            stack.pop()
        if stack is not None:
            del self._attrs[name]
        return None

    def _attr_value(self, name: str, value: str) -> str:
        """What assigning ``value`` to ``name`` stores, given its attributes (set_var calls
        this when any variable has attributes)."""
        a = self._attr_list(name)
        if not a:
            return value
        if "r" in a:
            if self._ro_soft:
                raise _ReadonlyError(f"{name}: readonly variable")
            self._abort(f"{name}: readonly variable")
        if "i" in a:
            value = str(self.arith_text(value))
        if "l" in a and "u" not in a:
            value = value.lower()
        elif "u" in a and "l" not in a:
            value = value.upper()
        return value

    def _appended(self, name: str, text: str) -> str:
        """``name+=text``: arithmetic addition for an integer variable, else concatenation."""
        a = self._attr_list(name) if self._attrs else None
        if a and "i" in a:
            return str(self._var_int(name) + self.arith_text(text))
        return self.vars.get(name, "") + text

    def _declare(self, node: Node) -> int:
        """``declare``/``typeset``/``local``/``readonly``/``export`` as written in the script."""
        kind = _text(node.children[0])
        items: list[str | tuple[str, bool, str]] = []
        # adjacent nodes are one word (tree-sitter splits `v=$d/$m.nc`)
        for text in self.word_texts([c for c in node.children[1:]
                                     if c.is_named and c.type != "comment"]):
            m = _ASSIGN_WORD.match(text)
            if m:
                value = text[m.end():]
                if value.startswith("("):
                    raise self.error(f"{kind} of an array", Unsupported)
                items.append((m.group(1), m.group(2) == "+",
                              self.expand_str(value, "assign")))
            else:
                items.extend(self.expand_texts([text]))
        return self._declare_items(kind, items)

    def _declare_items(self, kind: str, items: list[Any]) -> int:
        self._check_guard(kind)
        add: set[str] = set()
        remove: set[str] = set()
        glob = False
        k = 0
        while k < len(items) and isinstance(items[k], str) and items[k][:1] in "-+" and \
                len(items[k]) > 1:
            word = items[k]
            k += 1
            if word == "--":
                break
            allowed = {"export": "fn", "readonly": "", "local": "ilrux"}.get(kind, "gilrux")
            for letter in word[1:]:
                if letter not in allowed or (word[0] == "+" and letter == "r"):
                    raise self.error(f"{kind} {word[0]}{letter}", Unsupported)
                if letter == "g":
                    glob = word[0] == "-"
                elif letter == "n" and kind == "export":
                    remove.add("x")
                elif letter == "f":
                    raise self.error(f"{kind} -f (functions)", Unsupported)
                else:
                    (add if word[0] == "-" else remove).add(letter)
        if kind == "readonly":
            add.add("r")
        elif kind == "export" and "x" not in remove:
            add.add("x")
        names = items[k:]
        if not names:
            raise self.error(f"'{kind}' without names (it prints variables)", Unsupported)
        if kind == "local" and not self.locals:
            self._stderr("local: can only be used in a function")
            return 1
        local = kind == "local" or (kind in ("declare", "typeset") and bool(self.locals)
                                    and not glob)
        status = 0
        for item in names:
            if isinstance(item, tuple):
                name, append, value = item
            else:
                name, eq, v = item.partition("=")
                append = name.endswith("+") and bool(eq)
                name = name[:-1] if append else name
                value = v if eq else None
            if not _NAME.match(name):
                shown = item if isinstance(item, str) else f"{name}={value}"
                self._stderr(f"{kind}: `{shown}': not a valid identifier")
                status = 1
                continue
            try:
                self._declare_one(kind, name, value, append, add, remove, local)
            except _ReadonlyError as exc:
                self._stderr(exc.message if kind == "readonly" else f"{kind}: {exc.message}")
                status = 1
        return status

    def _declare_one(self, kind: str, name: str, value: str | None, append: bool,
                     add: set[str], remove: set[str], local: bool) -> None:
        cur = self._attr_list(name) or set()
        if "r" in cur and (value is not None or (add - cur) - {"x"} or remove):
            raise _ReadonlyError(f"{name}: readonly variable")
        frame = self.locals[-1] if local and self.locals else None
        if frame is not None and name not in frame:
            frame[name] = self.vars.get(name)  # restored when the function returns
            if value is None:
                self.vars.pop(name, None)  # `local x`: a new, unset variable
                self._env_gen += 1
        letters = ((set() if frame is not None else set(cur)) | add) - remove - {"x"}
        stack = self._attrs.setdefault(name, [])
        if stack and stack[-1][1] is frame:
            stack[-1] = (letters, frame)
        else:
            stack.append((letters, frame))
        if value is not None:
            letters.discard("r")  # assign first, then make it readonly
            self._ro_soft += 1
            try:
                self.set_var(name, self._appended(name, value) if append else value)
            finally:
                self._ro_soft -= 1
            if "r" in add:
                letters.add("r")
        if not letters:
            stack.pop()
            if not stack:
                del self._attrs[name]
        if "x" in add:
            self.exported.add(name)
            self._env_gen += 1
        elif "x" in remove:
            self.exported.discard(name)
            self._env_gen += 1

    def _b_export(self, args: list[str]) -> int:
        return self._declare_items("export", list(args))

    def _b_readonly(self, args: list[str]) -> int:
        return self._declare_items("readonly", list(args))

    def _b_declare(self, args: list[str]) -> int:
        return self._declare_items("declare", list(args))

    def _b_typeset(self, args: list[str]) -> int:
        return self._declare_items("typeset", list(args))

    def _b_local(self, args: list[str]) -> int:
        return self._declare_items("local", list(args))

    def _b_unset(self, args: list[str]) -> int:
        self._check_guard("unset")
        mode = ""
        while args and args[0].startswith("-") and len(args[0]) > 1:
            if args[0] == "--":
                args = args[1:]
                break
            if args[0] not in ("-f", "-v"):
                raise self.error(f"unset {args[0]}", Unsupported)
            mode, args = args[0][1], args[1:]
        status = 0
        for name in args:
            a = self._attr_list(name) if self._attrs else None
            if mode != "f" and a and "r" in a:
                self._stderr(f"unset: {name}: cannot unset: readonly variable")
                status = 1
                continue
            if mode == "f" or (not mode and name not in self.vars and name in self.functions):
                self.functions.pop(name, None)
                continue
            self.vars.pop(name, None)  # a variable goes with its attributes and export
            self._attrs.pop(name, None)
            self.exported.discard(name)
            self._env_gen += 1
        return status

    # ------------------------------------------------------------------ directories
    def _b_cd(self, args: list[str]) -> int:
        self._check_guard("cd")
        args = [a for a in args if a not in ("-L", "--")]
        if any(a.startswith("-") and a != "-" for a in args):
            raise self.error(f"cd {' '.join(args)}", Unsupported)
        target = args[0] if args else self.vars.get("HOME", "/")
        if target == "-":
            target = self.vars.get("OLDPWD", self.cwd)
            if not self._chdir(target, "cd"):
                return 1
            self._print(self.cwd + "\n")  # `cd -` prints the new directory
            return 0
        return 0 if self._chdir(target, "cd") else 1

    def _chdir(self, target: str, what: str) -> bool:
        """Change directory; False (bash's message printed) when ``target`` is not one."""
        path = os.path.normpath(os.path.join(self.cwd, target))
        if not self.fs.isdir(path):
            if self.result.unknown:  # an unknown program may have made it: not decidable
                raise self.error(f"{what}: '{target}' is not a directory at this point of the "
                                 "script (or made by an unknown program)", Unsupported)
            why = "Not a directory" if self.fs.exists(path) else "No such file or directory"
            self._stderr(f"{what}: {target}: {why}")
            return False
        self.vars["OLDPWD"] = self.cwd
        self.cwd = path
        self.vars["PWD"] = path
        self._env_gen += 1
        return True

    def _dirs_words(self, long: bool = False) -> list[str]:
        home = self.vars.get("HOME", "")
        out = []
        for d in [self.cwd, *reversed(self._dirstack)]:
            if not long and home and home != "/" and (d == home or d.startswith(home + "/")):
                d = "~" + d[len(home):]
            out.append(d)
        return out

    def _b_dirs(self, args: list[str]) -> int:
        flags = set("".join(a[1:] for a in args if a.startswith("-")))
        if any(not a.startswith("-") for a in args) or flags - set("clpv"):
            raise self.error(f"dirs {' '.join(args)}", Unsupported)
        if "c" in flags:
            self._dirstack.clear()
            return 0
        words = self._dirs_words("l" in flags)
        if "v" in flags:
            self._print("".join(f"{k:2d}  {w}\n" for k, w in enumerate(words)))
        elif "p" in flags:
            self._print("".join(w + "\n" for w in words))
        else:
            self._print(" ".join(words) + "\n")
        return 0

    def _b_pushd(self, args: list[str]) -> int:
        self._check_guard("pushd")
        if len(args) > 1 or (args and (args[0][:1] in "+-") and args[0] != "-"):
            raise self.error(f"pushd {' '.join(args)}", Unsupported)
        if not args:
            if not self._dirstack:
                self._stderr("pushd: no other directory")
                return 1
            target = self._dirstack.pop()
        else:
            target = self.vars.get("OLDPWD", self.cwd) if args[0] == "-" else args[0]
        old = self.cwd
        if not self._chdir(target, "pushd"):
            return 1
        self._dirstack.append(old)
        self._print(" ".join(self._dirs_words()) + "\n")
        return 0

    def _b_popd(self, args: list[str]) -> int:
        self._check_guard("popd")
        if args:
            raise self.error(f"popd {' '.join(args)}", Unsupported)
        if not self._dirstack:
            self._stderr("popd: directory stack empty")
            return 1
        if not self._chdir(self._dirstack[-1], "popd"):
            return 1
        self._dirstack.pop()
        self._print(" ".join(self._dirs_words()) + "\n")
        return 0

    # ------------------------------------------------------------------ options
    def _b_set(self, args: list[str]) -> int:
        self._check_guard("set")
        if not args:
            raise self.error("'set' without arguments (it prints the variables)", Unsupported)
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                self.positional = args[i + 1:]
                return 0
            if a.startswith(("-", "+")) and len(a) > 1:
                on = a[0] == "-"
                i += 1
                for letter in a[1:]:
                    if letter == "o":  # `set -o NAME`, also inside a group: `set -eo pipefail`
                        if i >= len(args):
                            raise self.error("'set -o' without an option name (it prints the "
                                             "options)", Unsupported)
                        name = args[i]
                        i += 1
                        if name not in SET_O_LETTERS and name not in SET_O_ONLY:
                            raise self.error(f"set -o {name}", Unsupported)
                        self._set_option(SET_O_LETTERS.get(name, name), on)
                        continue
                    name = next((k for k, v in SET_O_LETTERS.items() if v == letter), None)
                    if name is None:
                        raise self.error(f"set {a[0]}{letter}", Unsupported)
                    self._set_option(letter, on)
                continue
            self.positional = args[i:]
            return 0
        return 0

    def _set_option(self, opt: str, on: bool) -> None:
        """Record a shell option (a `set` letter, or a long name without one: pipefail)."""
        if on and opt == "e" and "EXIT" in self._traps:
            self._refuse_exit_trap_with_errexit()
        if on:
            self.shell_options.add(opt)
        else:
            self.shell_options.discard(opt)
        self.set_e = "e" in self.shell_options

    def _b_shopt(self, args: list[str]) -> int:
        self._check_guard("shopt")
        mode = None
        names: list[str] = []
        for a in args:
            if a in ("-s", "-u", "-q"):
                mode = a if mode in (None, "-q") or a != "-q" else mode
            elif a.startswith("-"):
                raise self.error(f"shopt {a}", Unsupported)
            else:
                names.append(a)
        if mode is None or not names:
            raise self.error("'shopt' that prints options", Unsupported)
        for n in names:
            if n not in SHOPT_MODELLED:
                raise self.error(f"shopt {mode} {n}", Unsupported)
        if mode == "-q":
            return 0 if all(n in self.shopt for n in names) else 1
        for n in names:
            (self.shopt.add if mode == "-s" else self.shopt.discard)(n)
        return 0

    # ------------------------------------------------------------------ traps and exec
    def _b_trap(self, args: list[str]) -> int:
        self._check_guard("trap")
        if args[:1] == ["--"]:
            args = args[1:]
        if len(args) < 2 or args[0].startswith("-") and args[0] != "-":
            raise self.error(f"trap {' '.join(args)}", Unsupported)
        action, sigs = args[0], args[1:]
        for sig in sigs:
            if sig.upper() not in ("EXIT", "0", "SIGEXIT"):
                raise self.error(f"trap on {sig} (only EXIT is modelled)", Unsupported)
        if self._capture or self.vars is not self._root_vars:
            raise self.error("trap inside a subshell or command substitution", Unsupported)
        if action == "-":
            self._traps.pop("EXIT", None)
            return 0
        if "e" in self.shell_options:
            self._refuse_exit_trap_with_errexit()
        self._traps["EXIT"] = action
        return 0

    def _refuse_exit_trap_with_errexit(self) -> NoReturn:
        raise self.error("trap ... EXIT with set -e (the trap also runs when a command fails, "
                         "which is known only when the script runs)", Unsupported)

    def _run_exit_trap(self) -> None:
        """At the end of the script (or at ``exit``): the EXIT trap's commands, once."""
        action = self._traps.pop("EXIT", None)
        if action:
            if self.result.exit_status is not None:
                self.last_status = self.result.exit_status  # `$?` in the trap
            self._run_text(action)

    def _run_text(self, text: str) -> int | None:
        """Run shell text (``eval``, a trap), its lines counted from the current line."""
        line = self.line
        root = parse(("\n" * (line - 1) + text).encode(errors="surrogateescape"), self.script)
        try:
            return self.exec_node(root)
        finally:
            self.line = line

    # ------------------------------------------------------------------ control
    def _b_shift(self, args: list[str]) -> int:
        self._check_guard("shift")
        n = self._int_arg("shift", args, 1)
        if n is None:
            return 1
        if n < 0:
            self._stderr(f"shift: {args[0]}: shift count out of range")
            return 1
        if n > len(self.positional):
            return 1
        self.positional = self.positional[n:]
        return 0

    def _int_arg(self, name: str, args: list[str], default: int) -> int | None:
        """The numeric argument of exit/return/shift; None (message printed) when bad."""
        if not args:
            return default
        if len(args) > 1:
            self._stderr(f"{name}: too many arguments")
            return None
        if not _INT_ARG.fullmatch(args[0]):
            self._stderr(f"{name}: {args[0]}: numeric argument required")
            return None
        return int(args[0])

    def _b_exit(self, args: list[str]) -> int:
        self._check_guard("exit")
        if not args and self.last_status is None:
            # the status of the command before, known when it has run: the runner's
            raise _Exit(None)  # type: ignore[arg-type]
        n = self._int_arg("exit", args, self.last_status or 0)
        if n is None:
            if len(args) > 1:
                return 1  # bash does not exit then
            raise _Exit(2)
        raise _Exit(n & 255)

    def _b_return(self, args: list[str]) -> int:
        if not self.locals and not self._sourcing:
            self._stderr("return: can only `return' from a function or sourced script")
            return 2
        n = self._int_arg("return", args, self.last_status or 0)
        if n is None:
            if len(args) > 1:
                return 1
            raise _Return(2)
        raise _Return(n & 255)

    def _b_break(self, args: list[str]) -> int:
        raise _Break(self._loop_count("break", args))

    def _b_continue(self, args: list[str]) -> int:
        raise _Continue(self._loop_count("continue", args))

    def _loop_count(self, name: str, args: list[str]) -> int:
        if not args:
            return 1
        if len(args) > 1 or not args[0].isdecimal() or int(args[0]) < 1:
            raise self.error(f"{name} {' '.join(args)}", Unsupported)
        return int(args[0])

    def _b_true(self, args: list[str]) -> int:
        return 0

    _b_colon = _b_true

    def _b_false(self, args: list[str]) -> int:
        return 1

    def _b_umask(self, args: list[str]) -> int:
        if not args:
            raise self.error("'umask' that prints the mask", Unsupported)
        return 0

    def _b_wait(self, args: list[str]) -> int:
        return 0

    def _b_let(self, args: list[str]) -> int:
        def run() -> int:
            value = 0
            for a in args:
                value = self.arith_text(a)
            return 0 if value != 0 else 1
        return self._arith_status("let", run)

    def _b_test(self, args: list[str]) -> int:
        return self._test_status(args, [False] * len(args), False, "test")

    def _b_lbrack(self, args: list[str]) -> int:
        if not args or args[-1] != "]":
            raise self.error("[: missing ']'")
        return self._test_status(args[:-1], [False] * (len(args) - 1), False, "[")

    def _b_source(self, args: list[str]) -> int | None:
        if not args:
            raise self.error("source: file name needed")
        text = self._read_static_file(args[0])  # refuses a file the script writes
        root = parse(text.encode(errors="surrogateescape"), args[0])
        saved = self.positional
        if len(args) > 1:
            self.positional = args[1:]
        self._sourcing += 1
        try:
            return self.exec_node(root)
        except _Return as r:
            return r.status
        finally:
            self.positional = saved
            self._sourcing -= 1

    _b_dot = _b_source

    def _b_eval(self, args: list[str]) -> int | None:
        text = " ".join(args)
        try:
            return self._run_text(text)
        except ScriptError as exc:
            if isinstance(exc, Unsupported):
                raise
            raise self.error(f"eval of '{text[:40]}' ({exc.message})", Unsupported) from None

    def _b_alias(self, args: list[str]) -> int:
        raise self.error("alias", Unsupported)

    # ------------------------------------------------------------------ read, getopts
    def _b_read(self, args: list[str]) -> int:
        raw, delim = False, "\n"
        i = 0
        while i < len(args) and args[i].startswith("-") and len(args[i]) > 1:
            a = args[i]
            i += 1
            if a == "--":
                break
            k = 1
            while k < len(a):
                letter = a[k]
                k += 1
                if letter == "r":
                    raw = True
                elif letter in "se":
                    pass  # terminal only: the input here never is one
                elif letter == "p":  # the prompt is printed only when reading a terminal
                    if k >= len(a):
                        i += 1
                    break
                elif letter == "d":
                    value = a[k:] if k < len(a) else (args[i] if i < len(args) else None)
                    if value is None:
                        raise self.error("read -d without a delimiter")
                    if k >= len(a):
                        i += 1
                    delim = value[:1] or "\0"
                    break
                else:
                    raise self.error(f"read -{letter}", Unsupported)
        names = args[i:]
        for n in names:
            if not _NAME.match(n):
                self._stderr(f"read: `{n}': not a valid identifier")
                return 1
        if not self._stdin:
            raise self.error("read from the script's standard input (known only when the "
                             "script runs)", Unsupported)
        buf = self._stdin[-1]
        chars, buf[0], found = read_record(buf[0], delim, raw)
        ifs = self.vars.get("IFS", " \t\n")
        if not names:
            values, names = ["".join(c for c, _ in chars)], ["REPLY"]
        else:
            values = read_fields(chars, len(names), ifs)
        self._ro_soft += 1
        try:
            for n, v in zip(names, values, strict=True):
                self.set_var(n, v)
        except _ReadonlyError as exc:
            self._stderr(exc.message)
            return 1
        finally:
            self._ro_soft -= 1
        return 0 if found else 1

    def _b_getopts(self, args: list[str]) -> int:
        self._check_guard("getopts")
        if len(args) < 2:
            raise self.error("getopts without an option string and a name", Unsupported)
        optstring, name = args[0], args[1]
        params = args[2:] if len(args) > 2 else self.positional
        try:
            optind = int(self.vars.get("OPTIND", "1"))
        except ValueError:
            raise self.error(f"getopts with OPTIND={self.vars.get('OPTIND')!r}", Unsupported)
        last, pos = self._getopts_at
        if optind != last or optind < 1:
            pos = 0  # the script set OPTIND: start at the beginning of that word
            optind = max(optind, 1)
        status, value, optarg, optind, pos, err = getopts_step(optstring, params, optind, pos)
        if err and self.vars.get("OPTERR", "1") != "0":
            self._print(f"{self.script}: {err}\n", "2")
        self._getopts_at = (optind, pos)
        self.set_var("OPTIND", str(optind))
        self.set_var(name, value)
        if optarg is None:
            self.vars.pop("OPTARG", None)
        else:
            self.set_var("OPTARG", optarg)
        return status
