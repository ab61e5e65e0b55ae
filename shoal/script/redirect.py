"""Redirections around builtins and blocks, and ``exec``'s: what a builtin reads (``read x <
f``), where its output goes (``pushd d > /dev/null``), and descriptors every later command
starts with (``exec > log 2>&1``, ``for ... done > out``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import Unsupported
from .model import IN, Redirect, Stage
from .nodes import QUIET_DEVICES, STATIC_BUILTINS, _text
from .parser import Node


class RedirectMixin:
    """Redirections, as the interpreter's mixin (via BuiltinsMixin)."""

    def _static_name(self, node: Node) -> bool:
        """Whether the command ``node`` runs a static builtin (by its literal name)."""
        name = node.child_by_field_name("name")
        prog = _text(name) if name is not None else ""
        return prog in STATIC_BUILTINS and prog not in self.functions

    def _static_redirected(self, body: Node, redirects: list[Node]) -> int | None:
        """``BUILTIN ... < in > out``: a redirected_statement around a static builtin."""
        with self._redirected(redirects, [""] * len(redirects)):
            return self.exec_node(body)

    @contextmanager
    def _redirected(self, nodes: list[Node], glued: list[str]) -> Iterator[None]:
        if not nodes:
            yield
            return
        st = Stage([], [], {})
        for r, g in zip(nodes, glued, strict=True):
            self._redirect(r, st, g)
        for r in st.redirects:  # opened before the builtin runs (popd > f: f is here)
            if not (r.op in (">&", "<&") and (r.target.isdigit() or r.target == "-")):
                r.target = os.path.normpath(os.path.join(self.cwd, r.target))
        text: str | None = st.heredoc
        own: list[Redirect] = []
        for r in st.redirects:
            if r.op == "<" and r.fd in ("", "0"):
                text = self._read_static_file(r.target)
            elif r.op in (">&", "<&") and (r.target.isdigit() or r.target == "-"):
                if r.op == "<&" or r.target == "-":
                    raise self.error(f"redirection '{r.render()}' of a builtin", Unsupported)
                own.append(r)
            elif r.op in (">", ">>", ">|", "&>", "&>>") and r.fd in ("", "1", "2"):
                _known_device(self, r, "a builtin")
                own.append(r)
            else:
                raise self.error(f"redirection '{r.render()}' of a builtin", Unsupported)
        for r in own:  # a file written by the redirection is created even if nothing prints
            if not r.target.isdigit() and not r.target.startswith("/dev/"):
                if self._capture:
                    raise self.error(f"redirection '{r.render()}' of a builtin inside a "
                                     "command substitution", Unsupported)
                self._check_guard("redirection")
                self._emit([Stage(["true"], [r], {})], [[0]], [], [False])
        own = [Redirect(r.fd, ">>" if r.op in (">", ">|") else (
            "&>>" if r.op == "&>" else r.op), r.target) if not r.target.isdigit() and
            not r.target.startswith("/dev/") else r for r in own]
        if text is not None:
            self._stdin.append([text])
        self._out_redirects.append(own)
        try:
            yield
        finally:
            self._out_redirects.pop()
            if text is not None:
                self._stdin.pop()

    def _b_exec(self, args: list[str]) -> int:
        if args:
            raise self.error("exec of a program", Unsupported)
        own = self._out_redirects[-1] if self._out_redirects else []
        if not own:
            return 0
        if self._capture or self.vars is not self._root_vars or self.locals:
            raise self.error("exec redirection inside a subshell, substitution or function",
                             Unsupported)
        self._out_redirects[-1] = []  # the redirections now apply to everything that follows
        self._map_fds(own, "exec")
        return 0

    def _map_fds(self, own: list[Redirect], what: str) -> None:
        """Make later steps start with these descriptors (targets absolute, truncated)."""
        for r in own:
            fd = "1" if r.fd in ("", "1") else r.fd
            if r.op in (">&",):
                if r.target not in ("1", "2") or fd not in ("1", "2"):
                    raise self.error(f"{what} {r.render()}", Unsupported)
                self._exec_fds[fd] = self._exec_fds.get(r.target, ("fd", r.target))
                continue
            path = os.path.normpath(os.path.join(self.cwd, r.target))
            for f in (("1", "2") if r.op.startswith("&") else (fd,)):
                if any(v == ("fd", f) for k, v in self._exec_fds.items() if k != f):
                    # `exec 2>&1; exec > log`: fd 2 keeps the old stdout, which a step
                    # cannot name
                    raise self.error(f"{what} {r.render()} after a descriptor was made a "
                                     f"copy of {f}", Unsupported)
                self._exec_fds[f] = ("file", path)
        for f, (k, v) in list(self._exec_fds.items()):
            if k == "fd" and v == f:
                del self._exec_fds[f]

    def _redirected_block(self, body: Node, redirects: list[Node]) -> int | None:
        """``for/while/if/case/{ } ... > out < in``: output redirections apply to every
        command inside (each appends, in script order, after one truncation, as bash's one
        open file does); input is what ``read`` inside reads."""
        st = Stage([], [], {})
        for r in redirects:
            self._redirect(r, st, "")
        text: str | None = st.heredoc
        outs: list[Redirect] = []
        for r in st.redirects:
            if r.op == "<" and r.fd in ("", "0"):
                text = self._read_static_file(r.target)
            elif (r.op in (">", ">>", ">|", "&>", "&>>") and r.fd in ("", "1", "2")) or (
                    r.op == ">&" and r.target in ("1", "2") and r.fd in ("", "1", "2")):
                outs.append(r)
            else:
                raise self.error(f"redirection '{r.render()}' of a whole "
                                 f"'{body.type.replace('_', ' ')}'", Unsupported)
        if outs and self._capture:
            raise self.error(f"output redirection of a whole '{body.type.replace('_', ' ')}' "
                             "inside a command substitution", Unsupported)
        saved = dict(self._exec_fds)
        try:
            if outs:
                self._check_guard("redirection")
                for r in outs:
                    if r.op != ">&":
                        _known_device(self, r, f"a whole '{body.type.replace('_', ' ')}'")
                    if r.op == ">&" or r.target.startswith("/dev/"):
                        continue
                    r.target = os.path.normpath(os.path.join(self.cwd, r.target))
                    if r.op in (">", ">|", "&>"):  # truncated once, before the block runs
                        self._emit([Stage(["true"], [Redirect(r.fd, r.op, r.target)], {})],
                                   [[0]], [], [False])
                        r.op = "&>>" if r.op == "&>" else ">>"
                self._map_fds(outs, "redirection")
            if text is not None:
                self._stdin.append([text])
            try:
                return self.exec_node(body)
            finally:
                if text is not None:
                    self._stdin.pop()
        finally:
            self._exec_fds = saved

    def _emit(self, stages: list[Stage], groups: list[list[int]], connectors: list[str],
              negated: list[bool]) -> int | None:
        # `exec > log 2>&1`: every later command starts with those descriptors, which its own
        # redirections (written after them) may change; in a pipeline only the last command's
        # stdout is not the pipe
        if not self._exec_fds:
            return super()._emit(stages, groups, connectors, negated)  # type: ignore[misc]
        added: dict[int, int] = {}
        for group in groups:
            for si in group:
                pre: list[Redirect] = []
                for fd in ("1", "2"):
                    target = self._exec_fds.get(fd)
                    if target is None or (fd == "1" and si != group[-1]):
                        continue
                    if target[0] == "file":
                        pre.append(Redirect("" if fd == "1" else "2", ">>", target[1]))
                    else:
                        pre.append(Redirect(fd, ">&", target[1]))
                stages[si].redirects[:0] = pre
                added[si] = len(pre)
        status = super()._emit(stages, groups, connectors, negated)  # type: ignore[misc]
        # bash writes through one descriptor at its own offset: a command writing the same
        # file by another route would interleave differently than appends do
        shared = {v for k, v in self._exec_fds.values() if k == "file"}
        for u in self.steps[-1].uses:
            if u.path in shared and u.role != IN and not (
                    u.loc is not None and u.loc[1] == "r" and u.loc[2] < added.get(u.loc[0], 0)):
                raise self.error(f"a command writing '{self._shown(u.path)}' while the output "
                                 "of the script or block is redirected there", Unsupported)
        return status  # type: ignore[no-any-return]



def _known_device(interp: Any, r: Redirect, what: str) -> None:
    if r.target.startswith("/dev/") and r.target not in QUIET_DEVICES:
        raise interp.error(f"redirection '{r.render()}' of {what}: writing to "
                           f"{r.target} can fail at run time", Unsupported)
