"""Static interpreter: walks the tree-sitter-bash tree the way bash would run the script.

Variables, loops, conditions, functions and expansions are evaluated here, at compile time,
against a simulated file system (:class:`~shoal.script.simfs.SimFS`). What only the running
programs can decide (their output, their exit status) is never guessed: a construct that needs it
raises :class:`~shoal.script.errors.Unsupported` naming the line. Every command that runs a
program becomes a :class:`~shoal.script.model.Step` with the files it reads and writes.
"""

from __future__ import annotations

import copy
import fnmatch
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from .arith import ArithMixin
from .builtins import BuiltinsMixin
from .conditions import TestMixin
from .emit import EmitMixin
from .errors import ScriptError, Unsupported
from .expand import ExpandMixin
from .model import Stage, Step
from .nodes import (
    _BLOCKS,
    _BUILTIN_METHOD,
    _SKIP,
    _WORDLIKE,
    ALWAYS_OK,
    CAPTURE_HELPERS,
    MAX_LOOP,
    QUIET_DEVICES,
    STATIC_BUILTINS,
    Result,
    _Break,
    _Continue,
    _Exit,
    _key,
    _line,
    _named,
    _Return,
    _text,
)
from .parser import Node, parse
from .semantics import Semantics
from .simfs import SimFS

# statements whose status comes from a command inside them, which `set -e` checked already
# (or ignores: `false && x` does not stop the script)
_ERREXIT_INNER = frozenset({"list", "negated_command", "if_statement", "while_statement",
                            "for_statement", "c_style_for_statement", "case_statement",
                            "function_definition", "compound_statement"})

# NAME= or NAME+= at the start of a word before the command name: an assignment
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
# what _parts returns: has a command name, assignments, redirections, word texts
CommandParts = tuple[bool, list[tuple[str, bool, str]], list[tuple[Node, str]], list[str]]


class Interpreter(ExpandMixin, ArithMixin, TestMixin, BuiltinsMixin, EmitMixin):
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
        # > 0 while running what `set -e` ignores: conditions, `!`, list items but the last
        self._no_errexit = 0
        self._body_status: int | None = 0  # status of the last loop body run
        # here-document bodies blanked for tree-sitter: (start byte, original text)
        self._heredoc_masks: list[tuple[int, bytes]] = []
        # shell options in force: `set` letters (e, u, x, f, C, ...) and 'pipefail'
        self.shell_options: set[str] = {"h", "B"}
        self.shopt: set[str] = set()  # `shopt -s` names in force (nullglob, ...)
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
        self._subst_text_cache: dict[tuple[int, str], list[Node]] = {}
        self._subst_cache: dict[int, tuple[Node, tuple]] = {}  # type: ignore[type-arg]
        self._readable: dict[str, bool] = {}
        self._handlers = {name[3:]: getattr(self, name) for name in dir(type(self))
                          if name.startswith("_x_")}
        self._init_builtins()

    # ------------------------------------------------------------------ entry points
    def run_source(self, source: bytes) -> Result:
        """Interpret a whole script."""
        root = parse(source, self.script, self._heredoc_masks)
        try:
            try:
                self._run_units(root)
            except _Exit as e:
                self.result.exit_status = e.status
            except (_Break, _Return):
                pass
            self._run_exit_trap()  # `trap ... EXIT`: at the end, also after `exit`
        except _Exit as e:
            self.result.exit_status = e.status
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
                status = self.last_status = self._arith_command(node)
                if status and self.set_e and not self._capture and not self._no_errexit:
                    raise _Exit(status)
                return status
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
        if status not in (None, 0) and self.set_e and not self._capture and \
                not self._no_errexit and t not in _ERREXIT_INNER:
            raise _Exit(status)
        return status

    def _x_comment(self, node: Node) -> int | None:
        return self.last_status

    # A command of assignments only has the status of its last command substitution
    # (`x=$(grep ..)` sets $? and stops `set -e`), 0 without one.
    def _x_variable_assignment(self, node: Node) -> int | None:
        self.subst_status = 0
        self._assign_node(node)
        return self.subst_status

    def _x_variable_assignments(self, node: Node) -> int | None:
        self.subst_status = 0
        for c in _named(node):
            self._assign_node(c)
        return self.subst_status

    def _assign_node(self, node: Node, local: bool = False) -> None:
        hit = self._assign_cache.get(node.id)
        if hit is not None and hit[0] == node:
            name, append, value = hit[1]
        else:
            name, append, value = self._split_assign(
                (node.text or b"").decode(errors="surrogateescape"))
            self._assign_cache[node.id] = (node, (name, append, value))
        self._assign(name, append, value, local)

    def _assign(self, name: str, append: bool, value: str, local: bool = False) -> None:
        """``name=value`` (``+=`` when ``append``), ``value`` as source text."""
        text = self.expand_str(value, "assign")
        if append:
            text = self._appended(name, text)  # arithmetic for `declare -i` variables
        self.set_var(name, text, local)

    def set_var(self, name: str, value: str, local: bool = False) -> None:
        self._check_guard(f"assignment to {name}")
        if self._attrs and name in self._attrs:  # declare -i/-l/-u/-r
            value = self._attr_value(name, value)
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
        return self._declare(node)  # builtins.py: attributes, scopes, readonly

    def _x_unset_command(self, node: Node) -> int:
        return self._b_unset([self.expand_str(c) for c in node.children[1:] if c.is_named
                              and c.type != "comment"])  # builtins.py

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
        self._no_errexit += 1
        try:
            status = self.exec_node(inner)
        finally:
            self._no_errexit -= 1
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
        self._no_errexit += 1
        try:
            for n in nodes:
                if n.is_named:
                    status = self.exec_node(n)
        finally:
            self._no_errexit -= 1
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
        """Run one iteration; False means `break`. The loop's status is its body's last
        (``self._body_status``; 0 after `break`/`continue`, None when only known at run time)."""
        try:
            self._body_status = self.exec_node(body)
        except _Continue as e:
            self._body_status = 0
            if e.n > 1:
                raise _Continue(e.n - 1)
        except _Break as e:
            self._body_status = 0
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
        self._body_status = 0
        for w in words:
            self.set_var(name, w)
            if not self._loop_body(body):
                break
        return self._body_status

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
        self._body_status = 0
        for _ in range(MAX_LOOP):
            if cond and all(self.arith(n) == 0 for n in cond[-1:]):
                return self._body_status
            if not self._loop_body(body):
                return self._body_status
            for n in upd:
                self.arith(n)
        raise self.error("loop does not end after a million iterations", Unsupported)

    def _x_while_statement(self, node: Node) -> int | None:
        until = node.children[0].type == "until"
        conds = [c for i, c in enumerate(node.children)
                 if node.field_name_for_child(i) == "condition"]
        body = node.child_by_field_name("body")
        assert body is not None
        self._body_status = 0
        for _ in range(MAX_LOOP):
            status = self._condition(conds)
            if (status == 0) == until:
                return self._body_status
            if not self._loop_body(body):
                return self._body_status
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
                matched = any(self._match_pattern(value, p) for p in self.word_texts(pats))
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

    def _match_pattern(self, value: str, pat: str) -> bool:
        return fnmatch.fnmatchcase(value, self.expand_pattern(pat))

    def _x_subshell(self, node: Node) -> int | None:
        with self._saved_state():
            try:
                return self._exec_seq(node.children)
            except _Exit as e:
                return e.status

    @contextmanager
    def _saved_state(self) -> Iterator[None]:
        saved = (self.vars, self.exported, self.positional, self.cwd, self.functions)
        # a subshell's options, attributes, traps and directory stack are its own too
        more = (self.shell_options, self.set_e, self.shopt, self._attrs, self._traps,
                self._exec_fds, self._dirstack)
        env_valid = self._env_key == (id(self.vars), self._env_gen)
        env_cache = self._env_cache
        self.vars = dict(self.vars)
        self.exported = set(self.exported)
        self.positional = list(self.positional)
        self.functions = dict(self.functions)
        self.shell_options, self.shopt = set(self.shell_options), set(self.shopt)
        self._attrs = copy.deepcopy(self._attrs) if self._attrs else {}
        self._traps, self._exec_fds = dict(self._traps), dict(self._exec_fds)
        self._dirstack = list(self._dirstack)
        try:
            yield
        finally:
            self.vars, self.exported, self.positional, self.cwd, self.functions = saved
            (self.shell_options, self.set_e, self.shopt, self._attrs, self._traps,
             self._exec_fds, self._dirstack) = more
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
        words: list[str] = []
        pats: list[bool] = []
        for k, (w, p) in enumerate(flat):
            if type(w) is str:
                words.append(w)
                pats.append(p)
            elif double and k and flat[k - 1][0] in ("==", "=", "!="):
                # the right side of == in [[ ]] is a pattern: unquoted characters, also from
                # expansions ($pat), keep their glob meaning; quoted ones match themselves
                words.append(self.expand_pattern(self._node_src(w)))  # type: ignore[arg-type]
                pats.append(True)
            else:
                words.append(self.expand_str(w))  # type: ignore[arg-type]
                pats.append(False)
        return self._test_status(words, pats, double)

    @staticmethod
    def _node_src(node: Node) -> str:
        return (node.text or b"").decode(errors="surrogateescape")

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
        if body.type == "command" and self._static_name(body):
            return self._static_redirected(body, redirects)  # `read x < f`, `exec > log`
        if body.type == "command" and self._capture:
            return self._static_pipeline([node])  # `$(wc -l < f)`: capture.py
        if body.type in ("command", "pipeline", "negated_command"):
            return self._emit_list([("", node)])
        if body.type in ("while_statement", "for_statement", "compound_statement",
                         "c_style_for_statement", "if_statement", "case_statement",
                         "subshell", "redirected_statement"):
            # their input (read's) and output redirections: builtins.py
            return self._redirected_block(body, [c for c in node.children[1:]
                                                 if c.type.endswith("_redirect")])
        raise self.error(f"redirection of a whole '{body.type.replace('_', ' ')}' is not "
                         "supported (redirect each command inside it)", Unsupported)

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
            self._stdin.append([text])
            try:
                with self._saved_state():  # bash runs a pipeline's last part in a subshell
                    return self.exec_node(last)
            except _Exit as e:
                return e.status
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
        self._no_errexit += 1  # set -e ignores every item but the last
        try:
            status = self.exec_node(items[0][1])
        finally:
            self._no_errexit -= 1
        last = len(items) - 1
        for k, (op, item) in enumerate(items[1:], 1):
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
                self._no_errexit += k < last
                try:
                    status = self.exec_node(item)
                finally:
                    self._no_errexit -= k < last
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
            if "C" in self.shell_options and any(c.type in (">", "&>") for r in node.children
                                                 if r.type == "file_redirect"
                                                 for c in r.children):
                return True  # set -C: `> f` fails when f exists
            for r in node.children:  # `echo x > /dev/full`: the device decides the status
                if r.type == "file_redirect" and any(
                        c.is_named and _text(c).startswith("/dev/") and
                        _text(c) not in QUIET_DEVICES for c in r.children):
                    return True
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

    def _parts(self, node: Node) -> CommandParts:
        """The words of a command node as bash reads them, cached per node: assignments
        ``(name, append, value text)`` before the command name, the source texts of the name
        and arguments, and redirections ``(node, text of words glued to its target)``.

        tree-sitter may split one word into several nodes (``$d/sresalb_$m.nc``); adjacent
        nodes are joined back into one word here. Loop bodies are walked once per iteration
        and tree-sitter builds new child objects on every access, so this is worth
        remembering; the cache holds the node itself, which keeps its tree alive, so a node id
        is never reused by another tree meanwhile.
        """
        hit = self._parts_cache.get(node.id)
        if hit is not None and hit[0] == node:
            return hit[1]  # type: ignore[no-any-return]
        items: list[list] = []  # type: ignore[type-arg]  # [kind, text, end byte, node]
        src = node.text or b""
        base = node.start_byte
        for c in node.children:  # (the parser split commands glued over a newline)
            t = c.type
            start, end = c.start_byte, c.end_byte
            if t in _WORDLIKE or t == "command_name" or t == "$":
                text = src[start - base:end - base].decode(errors="surrogateescape")
                if items and items[-1][2] == start:
                    items[-1][1] += text  # the rest of the word before it
                    items[-1][2] = end
                else:
                    items.append(["word", text, end, c])
            elif t == "variable_assignment":
                text = src[start - base:end - base].decode(errors="surrogateescape")
                items.append(["assign", text, end, c])
            elif t.endswith("_redirect"):
                items.append(["redirect", "", end, c])
            elif t == "process_substitution":
                raise self.error("process substitution <(...) is not supported", Unsupported)
            elif c.is_named and t != "comment":
                raise self.error(f"'{t.replace('_', ' ')}' in a command", Unsupported)
        assigns: list[tuple[str, bool, str]] = []
        words: list[str] = []
        redirects: list[tuple[Node, str]] = []
        for kind, text, _end, c in items:
            if kind == "redirect":
                redirects.append((c, text))
            elif not words and (kind == "assign" or _ASSIGN.match(text)):
                assigns.append(self._split_assign(text))
            else:
                words.append(text)
        parts = (bool(words), assigns, redirects, words)
        self._parts_cache[node.id] = (node, parts)
        return parts

    def _split_assign(self, text: str) -> tuple[str, bool, str]:
        """``NAME=value`` / ``NAME+=value`` source text -> (name, append, value text)."""
        m = _ASSIGN.match(text)
        if m is None:
            if re.match(r"[A-Za-z_]\w*\[", text):
                raise self.error("arrays are not supported", Unsupported)
            raise self.error(f"not an assignment: '{text}'", Unsupported)
        value = text[m.end():]
        if value.startswith("(") :
            raise self.error("arrays are not supported", Unsupported)
        return m.group(1), m.group(2) == "+", value

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
        has_name, assigns, _r, words = self._parts(node)
        self.subst_status = 0
        if not has_name:
            for name, append, value in assigns:
                self._assign(name, append, value)
            return self.subst_status
        argv = self.expand_texts(words)
        if not argv:
            for name, append, value in assigns:  # `x=1 $empty` assigns, as bash does
                self._assign(name, append, value)
            return self.subst_status
        prog = argv[0]
        if prog in self.functions:
            return self._call(prog, argv[1:])
        if prog in STATIC_BUILTINS or (self._capture and prog in CAPTURE_HELPERS) or (
                prog == "printf" and argv[1:2] == ["-v"]):
            method = getattr(self, "_b_" + _BUILTIN_METHOD.get(prog, prog), None)
            if method is None:
                raise self.error(f"builtin '{prog}' is not supported", Unsupported)
            if assigns or _r:  # VAR=x prefixes in effect while it runs; its redirections
                return self._builtin_call(method, argv[1:], assigns, _r)
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
        for r, glued in _r:  # redirects written inside the command node
            self._redirect(r, st, glued)
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

        def run() -> int:
            value = 0
            for e in exprs:
                value = self.arith(e)
            return 0 if value != 0 else 1
        return self._arith_status("((", run)  # an error fails the command, as in bash

