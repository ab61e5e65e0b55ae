"""Helpers a command substitution computes at compile time (``echo``, ``printf``, ``seq``,
``basename``, ...), static pipelines inside ``$(...)``, and ``printf -v``."""

from __future__ import annotations

import os
import re
import subprocess

from .builtin_text import Expr, echo_output, printf_native, printf_plan
from .errors import ScriptError, Unsupported
from .model import IN, Stage
from .nodes import CAPTURE_HELPERS, PURE_FILTERS, STATIC_BUILTINS, _Exit
from .parser import Node

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class CaptureMixin:
    """Output computed at compile time, as the interpreter's mixin (via BuiltinsMixin)."""

    # ------------------------------------------------------------------ printing helpers
    # echo and printf run statically inside command substitutions and for `printf -v`; the
    # other helpers only inside substitutions (elsewhere they are ordinary steps)
    def _b_echo(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        self._out(echo_output(args))
        return 0

    def _b_printf(self, args: list[str]) -> int | None:
        var = None
        if args[:1] == ["-v"]:
            if len(args) < 2:
                raise self.error("printf -v without a name")
            var, args = args[1], args[2:]
            if not _NAME.match(var):
                self._stderr(f"printf: `{var}': not a valid identifier")
                return 2
        elif not self._capture:
            return None
        if args[:1] == ["--"]:
            args = args[1:]
        if not args:
            self._stderr("printf: usage: printf [-v var] format [arguments]")
            return 2
        plan = printf_plan(args[0])
        text = printf_native(plan, args[1:]) if plan is not None else None
        status = 0
        if text is None:
            text, status = self._bash_printf(args)
        if var is not None:
            self.set_var(var, text)
        else:
            self._out(text)
        return status

    def _bash_printf(self, args: list[str]) -> tuple[str, int]:
        """bash's own printf builtin, for formats and numbers the native path leaves out."""
        try:
            p = subprocess.run(["bash", "-c", 'printf "$@"', "bash", *args],
                               capture_output=True, timeout=30, cwd=self.cwd,
                               env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                    "LC_ALL": self.vars.get("LC_ALL", "C")})
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise self.error(f"cannot run bash's printf at compile time: {exc}")
        if p.stderr:
            err = p.stderr.decode(errors="surrogateescape")
            self._stderr(err.split(": ", 1)[-1].rstrip("\n").replace("line 1: ", "", 1))
        return p.stdout.decode(errors="surrogateescape"), p.returncode

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

    def _b_expr(self, args: list[str]) -> int | None:
        if not self._capture:
            return None
        try:
            value = Expr(args).parse()
        except (ScriptError, ValueError):
            return 2  # expr prints nothing on stdout for a bad expression
        self._out(f"{value}\n")
        return 0 if value not in ("", "0", 0) else 1

    # ------------------------------------------------------------------ command substitution
    # the exit status of the last command substitution (None: known only at run time); bash
    # gives it to a command of assignments only (`x=$(grep ..)`: `$?`, `set -e`)
    subst_status: int | None = 0

    def _capture_nodes(self, nodes: list[Node], pipeline: bool = False) -> str:
        self._capture.append([])
        stdin_depth = len(self._stdin)
        status: int | None = 0
        try:
            with self._saved_state():
                if pipeline:
                    status = self._static_pipeline(nodes)
                else:
                    status = self._exec_seq(nodes)
        except _Exit as e:
            status = e.status
        finally:
            del self._stdin[stdin_depth:]
            out = "".join(self._capture.pop())
        self.subst_status = status
        return out

    def _static_pipeline(self, parts: list[Node]) -> int | None:
        stdin = ""
        status: int | None = 0
        for part in parts:
            self._capture.append([])
            self._stdin.append([stdin])
            try:
                status = self._static_stage(part, stdin)
            finally:
                self._stdin.pop()
                stdin = "".join(self._capture.pop())
        self._out(stdin)
        return status

    def _static_stage(self, node: Node, stdin: str) -> int | None:
        redirects: list[tuple[Node, str]] = []
        while node.type == "redirected_statement":
            body = node.child_by_field_name("body")
            if body is None:
                return self.exec_node(node)
            redirects[:0] = [(c, "") for c in node.children[1:] if c.type.endswith("_redirect")]
            node = body
        if node.type != "command":
            if redirects:
                raise self.error(f"redirection of '{node.type.replace('_', ' ')}' inside a "
                                 "command substitution", Unsupported)
            return self.exec_node(node)
        has_name, _assigns, inner, words = self._parts(node)
        redirects.extend(inner)
        discard, merge, err_null, new_stdin = self._stage_io(redirects)
        if new_stdin is not None:
            stdin = new_stdin
            self._stdin.append([stdin])
        if discard:
            self._capture.append([])
        try:
            return self._static_command(node, has_name, words, stdin, merge, err_null)
        finally:
            if discard:
                self._capture.pop()  # its stdout went to /dev/null
            if new_stdin is not None:
                self._stdin.pop()

    def _stage_io(self, redirects: list[tuple[Node, str]]
                  ) -> tuple[bool, bool, bool, str | None]:
        """The redirections of a command inside ``$(...)``: (stdout discarded, stderr into
        the output, stderr discarded, new stdin text); anything else is refused."""
        st = Stage([], [], {})
        for r, glued in redirects:
            self._redirect(r, st, glued)
        stdin = st.heredoc
        discard = merge = err_null = False
        for r in st.redirects:
            fd = r.fd or ("0" if r.op == "<" else "1")
            if r.op == "<" and fd == "0":
                stdin = self._read_static_file(r.target)
            elif r.op in (">", ">>", "&>", "&>>") and r.target == "/dev/null" and fd in "12":
                discard = discard or fd == "1" or r.op.startswith("&")
                err_null = err_null or fd == "2" or r.op.startswith("&")
            elif r.op == ">&" and fd == "2" and r.target == "1":
                merge = not discard
            else:
                raise self.error(f"redirection '{r.render()}' inside a command substitution",
                                 Unsupported)
        return discard, merge, err_null, stdin

    def _static_command(self, node: Node, has_name: bool, words: list[str], stdin: str,
                        merge: bool, err_null: bool) -> int | None:
        if not has_name:
            return self.exec_node(node)
        argv = self.expand_texts(words)
        if not argv:
            return self.exec_node(node)
        prog = argv[0]
        if prog in self.functions or prog in STATIC_BUILTINS or prog in CAPTURE_HELPERS:
            return self.exec_node(node)
        if prog == "ls":
            return self._static_ls(argv[1:])
        if prog == "cat" and len(argv) > 1:
            status = 0
            for a in argv[1:]:
                path = os.path.normpath(os.path.join(self.cwd, a))
                if self.fs.kind(path) is None and not self.result.unknown:
                    if not err_null:  # as bash's cat says it, on the script's stderr
                        self._print(f"cat: {a}: No such file or directory\n", "2")
                    status = 1
                    continue
                self._out(self._read_static_file(a))
            return status
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
        return self._run_filter(argv, stdin, merge)

    def _run_filter(self, argv: list[str], stdin: str, merge: bool = False) -> int:
        env = {k: self.vars[k] for k in self.exported if k in self.vars}
        try:
            p = subprocess.run(argv, input=stdin.encode(errors="surrogateescape"),
                               stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT if merge else subprocess.DEVNULL,
                               cwd=self.cwd, env=env, timeout=30)
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
