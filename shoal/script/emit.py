"""The command model: turning a command into a Step with its file uses (semantics.py rules)."""

from __future__ import annotations

import os

from .errors import Unsupported
from .model import DEL, IN, INOUT, OUT, FileUse, Redirect, Stage, Step
from .nodes import ALWAYS_OK, QUIET_DEVICES, _key, _named, _text
from .parser import Node
from .simfs import NOCLOBBER, PRESENT, RMTREE, SYMLINK, TREE, VIA

# programs that go on with their other files after one is missing (cp a missing dir/ copies
# a); the rest (NCO, text tools writing one output) fail before writing anything
_PER_FILE = frozenset({"cp", "mv", "ln", "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz",
                       "install", "rsync", "chmod", "touch"})


class EmitMixin:
    """Emitting steps, as the interpreter's mixin."""

    # ------------------------------------------------------------------ emitting steps
    def _emit_list(self, items: list[tuple[str, Node]], negate_first: bool = False) -> int | None:
        if self._capture:
            raise self.error("command substitution runs a pipeline whose output is known only "
                             "when the script runs", Unsupported)
        stages: list[Stage] = []
        groups: list[list[int]] = []
        connectors: list[str] = []
        negated: list[bool] = []
        for k, (op, node) in enumerate(items):
            neg = negate_first and k == 0
            while node.type == "negated_command":
                neg = not neg
                node = _named(node)[0]
            extra: list[Node] = list(self._extra.get(_key(node), ()))
            if node.type == "redirected_statement":
                extra = [c for i, c in enumerate(node.children)
                         if node.field_name_for_child(i) == "redirect"] + extra
                body = node.child_by_field_name("body")
                node = body if body is not None else node
            if node.type == "pipeline":
                cmds = _named(node)
            elif node.type in ("command", "redirected_statement"):
                cmds = [node]
            else:
                raise self.error(f"'{node.type.replace('_', ' ')}' inside '&&'/'||' after a "
                                 "command known only at run time is not supported", Unsupported)
            group: list[int] = []
            queue = list(cmds)
            extra_tail = self._heredoc_tail(extra)
            first = True
            while queue:
                cmd = queue.pop(0)
                mine: list[Node] = []
                if extra_tail and first:
                    mine = extra  # the here-document belongs to the command before the tail
                    queue.extend(extra_tail)
                elif not extra_tail and not queue:
                    mine = extra
                first = False
                if cmd.type == "redirected_statement":
                    queue[:0] = self._heredoc_tail(list(cmd.children))
                st = self._stage(cmd, mine)
                group.append(len(stages))
                stages.append(st)
            groups.append(group)
            negated.append(neg)
            if k:
                connectors.append(op)
        return self._emit(stages, groups, connectors, negated)

    def _heredoc_tail(self, redirects: list[Node]) -> list[Node]:
        """Commands tree-sitter nests inside a here-document redirect: `cat <<EOF | tr ..`."""
        tail: list[Node] = []
        for r in redirects:
            if r.type != "heredoc_redirect":
                continue
            for c in r.children:
                if c.type == "pipeline":
                    tail.extend(_named(c))
                elif c.type in ("&&", "||", ";", "&"):
                    raise self.error(f"'{c.type}' after a here-document on the same line is not "
                                     "supported (put it on its own line)", Unsupported)
        return tail

    def _stage(self, cmd: Node, extra_redirects: list[Node], argv: list[str] | None = None
               ) -> Stage:
        redirect_nodes = list(extra_redirects)
        if cmd.type == "redirected_statement":
            redirect_nodes = [c for i, c in enumerate(cmd.children)
                              if cmd.field_name_for_child(i) == "redirect"] + redirect_nodes
            body = cmd.child_by_field_name("body")
            cmd = body if body is not None else cmd
        if cmd.type != "command":
            raise self.error(f"'{cmd.type.replace('_', ' ')}' in a pipeline is not supported",
                             Unsupported)
        assigns: dict[str, str] = {}
        _has_name, assign_parts, inner_redirects, words = self._parts(cmd)
        st = Stage([], [], assigns)
        for a in assign_parts:
            self._stage_assign(a, st)
        if argv is None:
            argv = self._pre_argv.pop(_key(cmd), None)
        if argv is None:
            argv = self.expand_texts(words)
        glued_text = {r.id: g for r, g in inner_redirects}
        redirect_nodes.extend(r for r, _g in inner_redirects)  # written inside the command
        if argv and argv[0] in self.functions:
            raise self.error(f"function '{argv[0]}' used in a pipeline or with redirections",
                             Unsupported)
        st.argv = argv
        for r in redirect_nodes:
            self._redirect(r, st, glued_text.get(r.id, ""))
        return st

    def _stage_assign(self, a: tuple[str, bool, str], st: Stage) -> None:
        """A ``VAR=value`` prefix of a command: (name, append, value text)."""
        name, append, value = a
        text = self.expand_str(value, "assign")
        st.assigns[name] = (self.vars.get(name, "") + text) if append else text

    def _redirect(self, r: Node, st: Stage, glued: str = "") -> None:
        """Add the redirection ``r`` to ``st``; ``glued`` is source text that follows it with no
        blank (tree-sitter may end the target early: ``>$out/$m.nc``)."""
        if r.type == "heredoc_redirect":
            body = next((c for c in r.children if c.type == "heredoc_body"), None)
            start = next((c for c in r.children if c.type == "heredoc_start"), None)
            quoted = start is not None and any(q in _text(start) for q in "'\"\\")
            source = self._heredoc_source(r, body)
            if not quoted and any(rd.op in (">", ">>", "&>", "&>>", ">|")
                                  for rd in st.redirects) and \
                    any(c in source for c in ("$(", "`")):
                # bash opens `> f` first, so a substitution in the body sees f
                raise self.error("command substitution in a here-document after an output "
                                 "redirection of the same command", Unsupported)
            if any(c.type == "<<-" for c in r.children):  # <<- strips leading tabs
                source = "\n".join(ln.lstrip("\t") for ln in source.split("\n"))
            text = source if quoted else self.expand_str(source, "heredoc")
            st.heredoc = text if text.endswith("\n") or not text else text + "\n"
            for c in r.children:
                if c.type == "file_redirect":
                    self._redirect(c, st)
            return
        if r.type == "herestring_redirect":
            st.heredoc = self.expand_str(_named(r)[-1]) + "\n"
            return
        fd, op, target = self.redirect_parts(r, glued)
        if op in (">&", "<&") and (target.isdigit() or target == "-"):
            st.redirects.append(Redirect(fd, op, target))
            return
        # a target is split and globbed like an argument, and must make exactly one word
        fields = self.expand_texts([target])
        if len(fields) != 1:
            raise self.error(f"redirection to {target} that expands to {len(fields)} words "
                             "(bash: ambiguous redirect)", Unsupported)
        st.redirects.append(Redirect(fd, op, fields[0]))

    def redirect_parts(self, r: Node, glued: str = "") -> tuple[str, str, str]:
        """(fd, operator, target source text) of a file redirection."""
        fd = ""
        op = ""
        dest: list[Node] = []
        for i, c in enumerate(r.children):
            f = r.field_name_for_child(i)
            if c.type == "file_descriptor":
                fd = _text(c)
            elif f == "destination" or (dest and c.is_named):
                dest.append(c)
            elif not c.is_named:
                op = _text(c)
        if not dest:
            raise self.error("redirection without a target", Unsupported)
        words = self.word_texts(dest)
        words[-1] += glued
        if len(words) > 1:
            raise self.error(f"redirection target of several words: {' '.join(words)}",
                             Unsupported)
        return fd, op, words[0]

    def _heredoc_source(self, r: Node, body: Node | None) -> str:
        """The source text of the body of here-document ``r`` (the parser may have blanked
        it in the tree: then it is the whole masked body)."""
        for start, text in self._heredoc_masks:
            if r.start_byte < start < r.end_byte:
                return text.decode(errors="surrogateescape")
        return "" if body is None else _text(body)

    def _emit(self, stages: list[Stage], groups: list[list[int]], connectors: list[str],
              negated: list[bool]) -> int | None:
        line = self.line
        cwd = self.cwd
        step = Step(len(self.steps), line, stages, groups, connectors, negated, cwd,
                    self._env_diff(),
                    options=frozenset(self.shell_options - {"e"} if self._no_errexit
                                      else self.shell_options),
                    shopt=frozenset(self.shopt))
        for d in self._control:
            step.after |= d
        compound = len(groups) > 1
        always_ok = not compound and not any(negated)
        sem = self.sem
        fs = self.fs
        uses = step.uses
        for si, st in enumerate(stages):
            argv = st.argv
            if not argv:
                continue
            prog = argv[0]
            base = prog[prog.rfind("/") + 1:]  # os.path.basename
            step.programs.append(base)
            spec = sem.specs.get(base)
            if spec is None or prog in self.functions:
                step.barrier = True
                self.result.unknown.setdefault(base, []).append(line)
                if self.strict:
                    raise self.error(f"unknown program '{prog}': its files are not known "
                                     "(add it with --commands FILE)")
                always_ok = False
                continue
            an = sem.analyze(spec, argv[1:], si, cwd, fs)
            if an.barrier_reason:
                step.barrier = True
                self.result.unknown.setdefault(an.barrier_reason, []).append(line)
                if self.strict:
                    raise self.error(f"{an.barrier_reason}: its files are not known")
            uses.extend(an.uses)
            if an.mkdirs:
                step.mkdirs.extend(an.mkdirs)
            if always_ok and not (base in ALWAYS_OK or (base == "mkdir" and any(
                    a.startswith("-") and "p" in a for a in argv[1:])) or (
                    base == "rm" and any(a.startswith("-") and "f" in a for a in argv[1:]))):
                always_ok = False
        for si, st in enumerate(stages):
            for ri, r in enumerate(st.redirects):
                if r.op in (">&", "<&") and (r.target.isdigit() or r.target == "-"):
                    continue
                path = os.path.normpath(os.path.join(cwd, r.target))
                if r.target.startswith("/dev/"):
                    if r.target not in QUIET_DEVICES:  # /dev/full, /dev/tcp/...: can fail
                        always_ok = False
                    continue
                loc = (si, "r", ri)
                if r.op in ("<",):
                    uses.append(FileUse(path, IN, loc))
                elif r.op in (">>", "&>>", "<>"):
                    uses.append(FileUse(path, INOUT if fs.exists(path) else OUT, loc))
                elif r.op in (">", "&>") and "C" in self.shell_options:
                    # set -C: `>` fails on an existing file (keeps it, real name, in order)
                    uses.append(FileUse(path, NOCLOBBER, loc))
                else:
                    uses.append(FileUse(path, OUT, loc))
        if always_ok and any(u.role == NOCLOBBER for u in uses):
            always_ok = False  # set -C: `> f` fails when f exists
        if compound:
            # `a || b`: either may not run, so a file it writes may keep its old content
            for u in uses:
                if u.role == OUT and fs.exists(u.path):
                    u.role = INOUT
        self._check_and_apply(step, compound)
        self.steps.append(step)
        return 0 if always_ok else None

    def _env_diff(self) -> dict[str, str | None]:
        # recomputed only when an exported variable may have changed (set_var/export/unset)
        key = (id(self.vars), self._env_gen)
        if self._env_key == key:
            return self._env_cache
        env: dict[str, str | None] = {}
        for k in self.exported:
            v = self.vars.get(k)
            if v is not None and self.environ.get(k) != v and k not in ("PWD", "OLDPWD", "_"):
                env[k] = v
        for k in self.environ:  # unset or no longer exported (`export -n`): None
            if (k not in self.exported or k not in self.vars) and k not in ("PWD", "OLDPWD", "_"):
                env[k] = None
        self._env_key, self._env_cache = key, env  # type: ignore[assignment]
        return env

    def _shown(self, path: str) -> str:
        return os.path.relpath(path, self.cwd) if path.startswith(self.workdir) else path

    def _refuse_outside(self, step: Step, unsure: bool) -> None:
        """--strict: a step may change nothing outside the working tree; the refusal names
        the top-most path it would change (``rm -rf /usr`` names ``/usr``, not a file in it).
        Paths are taken as :meth:`_check_and_apply` takes them: through symbolic links, and
        ``rm -f`` of an absent path changes nothing."""
        top = self.workdir
        outside: list[tuple[str, str]] = []
        for u in step.uses:
            role = u.role
            if role not in (OUT, INOUT, NOCLOBBER, DEL, TREE, RMTREE, SYMLINK):
                continue
            real, kind, _ = self.fs.lookup(u.path, follow=role in (OUT, INOUT, NOCLOBBER))
            if role == RMTREE and kind is None and not unsure and real != "/":
                continue
            if not (real == top or real.startswith(top + os.sep)):
                outside.append((real, role))
        if outside:
            path, role = min(outside, key=lambda o: (o[0].rstrip(os.sep).count(os.sep), o[0]))
            verb = "removes" if role in (DEL, RMTREE) else "writes"
            raise self.error(f"{verb} '{path}', outside the working tree {top} (--strict)")

    def _check_and_apply(self, step: Step, compound: bool) -> None:
        fs = self.fs
        written = fs.written
        strict = self.strict
        # after an unknown program (a barrier) the simulated fs may lack files it made: a path it
        # does not know keeps its real name (the barrier orders it) instead of being refused
        unsure = getattr(self, "_fs_unsure", False)
        vias: list[FileUse] = []
        nowhere: list[FileUse] = []  # writes into a directory that does not exist
        ins: list[str] = []
        failing = False  # reads a file that does not exist
        missing: list[str] = []
        failing_stages: set[int] = set()  # in `a || b`: stages reading a missing file
        if strict:  # first, so that the refusal names what the step would change there
            self._refuse_outside(step, unsure)
        for d in step.mkdirs:  # first: cp -r / mv of a tree write below what they make
            if strict and not d.startswith(self.workdir):
                raise self.error(f"creates '{d}', outside the working tree (--strict)")
            fs.mkdir(d)
        for u in step.uses:
            role = u.role
            if role == VIA:
                continue
            real, kind, there = fs.lookup(u.path, follow=role in (IN, OUT, INOUT, NOCLOBBER))
            if real != u.path:
                # reached through a symbolic link: the file is its target, used by the name
                # the script wrote, and ordered with changes to the link (the name)
                vias.append(FileUse(u.path, VIA, None))
                u.path, u.loc = real, None
            if role == RMTREE and kind is None and not unsure:
                role = u.role = VIA  # rm -f of an absent path: changes nothing, orders nothing
            elif role == NOCLOBBER:
                if unsure or kind is not None:
                    # NCO refuses to overwrite it (and fails, as in bash): the file stays what
                    # it is, an in-place use under its real name after every earlier use
                    role = u.role = INOUT
                    u.loc = None
                else:
                    role = u.role = OUT
            elif role == OUT and unsure and u.loc is not None and u.loc[1] == "r" and \
                    step.stages[u.loc[0]].redirects[u.loc[2]].op in (">>", "&>>") and \
                    kind is None:
                role = u.role = INOUT  # may append to a file the barrier made
                u.loc = None
            if role == OUT and kind is not None and u.path not in written:
                # overwrites a file present at start (or made by an unknown program): the DAG
                # must know a real file is there, in case the new versions go to scratch
                vias.append(FileUse(u.path, PRESENT, None))
            if role == IN or role == INOUT:
                path = u.path
                if role == IN:
                    ins.append(path)
                if kind is None:
                    if unsure:
                        u.loc = None  # maybe made by an unknown program: its real name
                    elif role == INOUT:
                        role = u.role = OUT  # appending to an absent file creates it
                    elif compound and u.loc is not None:
                        failing_stages.add(u.loc[0])  # that part of `a || b` fails
                        u.loc = None
                    elif not compound:
                        # bash runs it and it fails: so does this, reading the real name
                        # (ordered with every later write of it), and the files the program
                        # would have written do not appear (what a redirection opens does)
                        u.loc = None
                        failing = True
                        missing.append(path)
                        self.result.warnings.append(
                            f"{self.script}:{self.line}: warning: "
                            f"{step.programs[0] if step.programs else 'command'} reads "
                            f"'{self._shown(path)}', which does not exist at this point of "
                            "the script (no earlier command creates it): it will fail, as in "
                            "bash")
                elif kind == "f" and not compound and path not in written:
                    ok = self._readable.get(path)
                    if ok is None:
                        ok = self._readable[path] = os.access(path, os.R_OK)
                    if not ok:
                        raise self.error(f"cannot read '{self._shown(path)}': permission denied")
            if not there and (role == OUT or role == INOUT):
                # its directory does not exist: bash fails to write it, so must this (under its
                # real name, not a scratch file that could be made), and no file appears
                u.loc = None
                if not unsure:
                    nowhere.append(u)
        if failing or nowhere:
            # bash runs it and it fails: the program writes and removes nothing (cp, mv,
            # NCO check their inputs and targets first), only what a redirection opens
            # appears; when some of its inputs exist it may do part of its work: refused
            if failing and set(step.programs) & _PER_FILE and any(
                    u.role == IN and u.path not in missing for u in step.uses) and any(
                    u.role in (OUT, DEL) and (u.loc is None or u.loc[1] == "a")
                    for u in step.uses):
                raise self.error(f"{step.programs[0] if step.programs else 'command'} reads "
                                 f"'{self._shown(missing[0])}', which does not exist at this "
                                 "point of the script, besides files that do (it may do part "
                                 "of its work)", Unsupported)
            step.uses = [u for u in step.uses if not (
                u.role in (OUT, DEL, RMTREE, TREE) and (u.loc is None or u.loc[1] == "a")
                and u not in nowhere)]
        if failing_stages:
            # a pipeline of `a || b` that reads a missing file fails: it writes nothing, and
            # what runs after it follows `||` (after `&&` what runs would depend on it)
            for g, group in enumerate(step.groups):
                if failing_stages & set(group):
                    if g < len(step.connectors) and step.connectors[g] == "&&":
                        raise self.error("a command reading a file that does not exist, "
                                         "before '&&'", Unsupported)
                    gone = set(group)
                    step.uses = [u for u in step.uses if not (
                        u.role in (OUT, DEL, RMTREE, TREE) and u.loc is not None
                        and u.loc[0] in gone and u.loc[1] == "a")]
        if vias:
            step.uses.extend(vias)
        if ins:
            for u in step.uses:
                if u.role == OUT and u.path in ins:
                    # read and written by one command (`sort f > f`, `tee f < f`): one file as
                    # in bash, where the write may truncate what is read, not two versions
                    u.role = INOUT
        for u in step.uses:
            role = u.role
            if role == DEL or role == RMTREE:
                fs.remove(u.path)
            elif role == OUT or role == INOUT:
                if not nowhere or u not in nowhere:
                    fs.add_file(u.path, step.line)
            elif role == SYMLINK:
                fs.add_link(u.path, u.prefix)
        if step.barrier:
            self._fs_unsure = True

