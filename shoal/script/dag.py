"""From steps to a DAG: file versions (static single assignment), dependencies, live files.

Every write of a path makes a new *version* of it. Readers depend on the writer of the version
they read (read-after-write), so writes to the same name by independent branches do not order
each other. Versions then get a *physical* place:

* the name the user wrote, for files present before the script starts, for the last version of
  every file that still exists when bash would finish (final outputs land where bash puts them),
  and for files an unknown program (a barrier) might see by name;
* otherwise a scratch file (``g<group>_<basename>`` in the run's scratch directory): an
  intermediate, deleted as soon as its last reader has finished.

Versions that share one physical file (the real name, or an in-place edit chain) are ordered by
write-after-read and write-after-write edges, which is all the ordering renaming cannot remove.

Directories and links are ordered by *tree operations* (``mkdir``, ``rm -r``, ``cp -r``/``mv``
of a directory, making or removing a link: roles in simfs.py): every command that touches a
path, or a path below it, is ordered with every tree operation on that path or on an ancestor,
in script order. Files below a tree that is copied, moved or removed keep their real names
there (semantics.py reads them by name), and so do files reached through links (emit.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .model import DEL, IN, INOUT, OUT, Step
from .simfs import PRESENT, TREE_OPS

CONCATENATING = frozenset({"ncrcat", "ncecat", "cat", "paste", "tar", "zcat"})


@dataclass(slots=True)
class Version:
    """One version of a file: who wrote it, who read it, who removed it."""

    id: int
    path: str
    writer: int | None            # step id; None: present before the script started
    group: int                    # versions sharing one physical file (in-place edits)
    readers: list[int] = field(default_factory=list)
    deleter: int | None = None
    pinned: bool = False          # must keep its real name
    final: bool = False           # exists when the script ends


@dataclass(slots=True)
class Group:
    """A physical file: one version, or a chain of in-place edits of it."""

    id: int
    path: str
    versions: list[int] = field(default_factory=list)
    real: bool = False
    est_size: int = 0             # bytes, estimated from the inputs of its writers

    @property
    def scratch_name(self) -> str:
        return f"g{self.id}_{os.path.basename(self.path)}"


@dataclass
class Dag:
    """The compiled graph."""

    steps: list[Step]
    preds: list[set[int]]
    succs: list[set[int]]
    versions: list[Version]
    groups: list[Group]
    # per step: argv/redirect location -> scratch group id, or -1 to drop the word (rm of scratch)
    subst: list[dict[tuple[int, str, int], int]]
    noop: set[int]                # steps with nothing left to do (rm of scratch files only)
    scratch_users: dict[int, set[int]]  # scratch group -> steps that write or read it

    @property
    def edges(self) -> int:
        return sum(len(p) for p in self.preds)

    def scratch_groups(self) -> list[Group]:
        return [g for g in self.groups if not g.real]

    def final_outputs(self) -> list[str]:
        return sorted({v.path for v in self.versions if v.final and v.writer is not None})


def build_dag(steps: list[Step], workdir: str) -> Dag:
    """Build the DAG of ``steps`` (in script order)."""
    n = len(steps)
    preds: list[set[int]] = [set() for _ in range(n)]
    versions: list[Version] = []
    groups: list[Group] = []
    current: dict[str, Version] = {}
    step_reads: list[list[tuple[int, Version]]] = [[] for _ in range(n)]
    step_writes: list[list[tuple[int, Version]]] = [[] for _ in range(n)]
    step_dels: list[list[tuple[int, Version]]] = [[] for _ in range(n)]

    def new_version(path: str, writer: int | None, group: int | None) -> Version:
        if group is None:
            group = len(groups)
            groups.append(Group(group, path))
        v = Version(len(versions), path, writer, group)
        versions.append(v)
        groups[group].versions.append(v.id)
        return v

    def cur(path: str) -> Version:
        v = current.get(path)
        if v is None:  # first touch of a file present before the script
            v = new_version(path, None, None)
            current[path] = v
        return v

    # tree operations: the paths they act on (known before the walk, so that commands touching
    # them before the first operation are ordered too), the last operation on each, and the
    # commands that touched the path or below it since
    tree_paths = {u.path for s in steps for u in s.uses if u.role in TREE_OPS}
    min_tree = min(map(len, tree_paths), default=0)
    tree_last: dict[str, int] = {}
    tree_touch: dict[str, list[int]] = {p: [] for p in tree_paths}
    has_tree: set[int] = set()
    last_barrier: int | None = None
    since_barrier: list[int] = []
    gone: dict[str, int] = {}  # path -> the step that last removed it (rm, mv)
    for s in steps:
        sid = s.id
        p = preds[sid]
        if s.after:
            p.update(s.after)
        uses = s.uses
        # reads first (they see the versions before this step), then removals, then writes
        reads = step_reads[sid]
        dels = writes = False
        for k, u in enumerate(uses):
            role = u.role
            if role == IN or role == INOUT:
                v = current.get(u.path)
                if v is None:
                    v = cur(u.path)
                    gone_by = gone.get(u.path)
                    if gone_by is not None and gone_by != sid:
                        p.add(gone_by)  # reads what is left after an earlier rm/mv: nothing
                v.readers.append(sid)
                reads.append((k, v))
                if u.loc is None:
                    v.pinned = True
                if role == INOUT:
                    writes = True
            elif role == DEL:
                dels = True
            elif role == OUT:
                writes = True
            elif role == PRESENT:
                cur(u.path)  # a real file there before this step's write
        if dels:
            for k, u in enumerate(uses):
                if u.role == DEL:
                    v = cur(u.path)
                    v.deleter = sid
                    step_dels[sid].append((k, v))
                    del current[u.path]
                    gone[u.path] = sid
        if writes:
            for k, u in enumerate(uses):
                if u.role == OUT:
                    if last_barrier is not None and u.path not in current:
                        cur(u.path)  # the barrier may have made it: a real file to replace
                    v = new_version(u.path, sid, None)
                elif u.role == INOUT:
                    prev = next(pv for kk, pv in reads if kk == k)
                    v = new_version(u.path, sid, prev.group)
                else:
                    continue
                current[u.path] = v
                step_writes[sid].append((k, v))
                if u.loc is None:
                    v.pinned = True
        if tree_paths:
            ops: list[str] = []
            for path in [s.cwd, *[u.path for u in uses]]:
                # this step touches `path`: after the last tree operation on it or an ancestor
                a = path
                while len(a) >= min_tree:
                    if a in tree_paths:
                        last = tree_last.get(a)
                        if last is not None and last != sid:
                            p.add(last)
                        seen = tree_touch[a]
                        if not seen or seen[-1] != sid:
                            seen.append(sid)
                    a = a.rpartition("/")[0]
            for u in uses:
                if u.role in TREE_OPS:
                    ops.append(u.path)
            for a in ops:
                # a tree operation: after everything that touched it or below since the last one
                p.update(tree_touch[a])
                tree_touch[a] = []
                tree_last[a] = sid
            if ops:
                has_tree.add(sid)
        # barriers: an unknown program runs alone and sees every file under its real name
        if s.barrier:
            p.update(since_barrier)
            if last_barrier is not None:
                p.add(last_barrier)
            for v in current.values():
                v.pinned = True
            last_barrier = sid
            since_barrier = []
        else:
            if last_barrier is not None:
                p.add(last_barrier)
            since_barrier.append(sid)
    for v in current.values():
        v.final = True

    # physical placement: a group is real if any of its versions must keep the name
    for v in versions:
        if v.writer is None or v.pinned or v.final:
            groups[v.group].real = True
    # a real file must not outlive its name: when a path whose real file still holds an older
    # version is later removed (rm, mv) while its current version is in scratch, that version
    # goes to the real name too, so the removal removes what bash removes
    live_real: dict[str, bool] = {}
    for v in versions:
        g = groups[v.group]
        if g.real:
            live_real[v.path] = v.deleter is None
        elif v.deleter is not None and live_real.get(v.path):
            g.real = True
            live_real[v.path] = False

    # one pass over the versions: read-after-write edges, versions by physical file, and
    # estimated sizes of scratch files (for /dev/shm placement)
    by_physical: dict[str | int, list[Version]] = {}
    size_of = [0] * len(versions)
    for v in versions:
        w = v.writer
        deleter = v.deleter
        if w is not None:
            for r in v.readers:
                if r != w:
                    preds[r].add(w)
            if deleter is not None and deleter != w:
                preds[deleter].add(w)
        if deleter is not None:
            for r in v.readers:  # remove only after every reader is done
                if r != deleter:
                    preds[deleter].add(r)
        g = groups[v.group]
        key = v.path if g.real else v.group
        chain = by_physical.get(key)
        if chain is None:
            by_physical[key] = [v]
        else:
            chain.append(v)
        if w is None:
            try:
                size = os.path.getsize(v.path)
            except OSError:
                size = 0
        else:
            # reductions and differences are no larger than their largest input; programs
            # that concatenate their inputs produce about their sum (inputs come first)
            ins = [size_of[rv.id] for _k, rv in step_reads[w]]
            if CONCATENATING.isdisjoint(steps[w].programs):
                size = max(max(ins, default=0), 4096)
            else:
                size = max(sum(ins), 4096)
        size_of[v.id] = size
        if size > g.est_size:
            g.est_size = size
    # write-after-read / write-after-write between versions sharing one physical file
    for chain in by_physical.values():
        if len(chain) < 2:
            continue
        for a, b in zip(chain, chain[1:], strict=False):
            if b.writer is None:
                continue
            for x in [a.writer, a.deleter, *a.readers]:
                if x is not None and x != b.writer:
                    preds[b.writer].add(x)
            if a.deleter is not None and a.deleter != b.writer and b.writer is not None:
                preds[b.writer].add(a.deleter)

    # substitutions and scratch users
    subst: list[dict[tuple[int, str, int], int]] = [{} for _ in range(n)]
    noop: set[int] = set()
    scratch_users: dict[int, set[int]] = {}
    for s in steps:
        sid = s.id
        reads, writes = step_reads[sid], step_writes[sid]
        for pairs in (reads, writes):
            for k, v in pairs:
                g = groups[v.group]
                if g.real:
                    continue
                users = scratch_users.get(g.id)
                if users is None:
                    scratch_users[g.id] = {sid}
                else:
                    users.add(sid)
                loc = s.uses[k].loc
                if loc is not None:
                    subst[sid][loc] = g.id
        dels = step_dels[sid]
        if dels and not reads and not writes and s.programs == ["rm"] and sid not in has_tree:
            # rm of intermediates: scratch cleanup removes them, the words are dropped
            scratch = [(k, v) for k, v in dels if not groups[v.group].real]
            for k, _v in scratch:
                loc = s.uses[k].loc
                if loc is not None:
                    subst[sid][loc] = -1
            if len(scratch) == len(dels):
                noop.add(sid)
    for g in groups:
        if not g.real:
            for vid in g.versions:
                v = versions[vid]
                if v.deleter is not None:
                    scratch_users.setdefault(g.id, set()).add(v.deleter)
    succs: list[set[int]] = [set() for _ in range(n)]
    for sid, ps in enumerate(preds):
        ps.discard(sid)
        for q in ps:
            succs[q].add(sid)
    return Dag(steps, preds, succs, versions, groups, subst, noop, scratch_users)

