"""`set -e` as bash has it: which commands end the script when they fail, and how a run whose
commands start early still leaves exactly what bash leaves when it stops at the first failure.

Under `set -e` bash runs nothing after the first failing command (outside `&&`/`||` lists
except their last command, `!` pipelines and conditions). The runner starts commands early
anyway; what they do becomes visible only in script order:

* every file the script writes under its real name is written to a *staged* name (a scratch
  file on disk) and moved to its name at the end, or at the point where the script stopped;
* commands that change files in place or remove them (in-place edits, `mv`, `rm` of real
  files, `mkdir`, writes to names that cannot be renamed, unknown programs) are *in order*:
  they start only once every earlier command has succeeded;
* an intermediate is deleted only once the command that ends it (its `rm`, or the next write
  of its name) is known to run; so when the script stops at command K, every file alive after
  K still exists and goes to its real name.

:func:`mark_errexit` runs at compile time; :func:`analyze` gives the runner its plan.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from .dag import Dag
from .errors import Unsupported
from .model import DEL, IN, INOUT, OUT, Step
from .simfs import PRESENT, VIA

# uses that only order (no name on the command line, nothing written)
ORDER_ONLY = frozenset({VIA, PRESENT})
# uses that a staged command can make without changing what exists: reads, fresh writes
PLAIN = frozenset({IN, OUT}) | ORDER_ONLY


def mark_errexit(steps: list[Step], script: str) -> bool:
    """Set ``Step.errexit`` (a failure ends the script) from the options each step ran with.

    Steps of a `&&` list item other than the last are waited for by the next item's steps
    (``after``): bash does not stop when they fail. Returns whether any step has errexit.
    """
    exempt: set[int] = set()
    for s in steps:
        if s.after:
            exempt |= s.after
    anyone = False
    for s in steps:
        if "e" not in s.options or s.id in exempt:
            continue
        if len(s.groups) == 1:
            s.errexit = not s.negated[0]
        elif s.negated[-1]:
            s.errexit = False  # only the last pipeline can stop the script; `!` never does
        elif s.connectors[-1] == "||":
            s.errexit = True  # non-zero only when the last pipeline ran and failed
        else:
            # `a || b && c`: non-zero if c failed (stop) or if b failed and c did not run
            raise Unsupported("a '||' list ending in '&&' after a command known only at run "
                              "time, under set -e", s.line, script)
        anyone = anyone or s.errexit
    return anyone


@dataclass
class Staging:
    """What the runner does for `set -e` (empty when no step has errexit)."""

    on: bool = False
    staged: set[int] = field(default_factory=set)      # groups written under staged names
    in_order: set[int] = field(default_factory=set)    # steps run once all before succeeded
    subst: list[dict[tuple[int, str, int], int]] = field(default_factory=list)  # staged words
    ends: dict[int, int] = field(default_factory=dict)  # group -> step that ends its content
    by_path: dict[str, list[int]] = field(default_factory=dict)  # path -> versions, in order
    # staged versions alive at an unknown program (a barrier): moved to their real names just
    # before it runs; the commands after it use the real names (it may have changed them)
    pins: dict[int, list[int]] = field(default_factory=dict)  # barrier step -> versions


def analyze(dag: Dag, on: bool) -> Staging:
    """The staging plan of ``dag``; ``on``: some step has errexit."""
    st = Staging(on=on)
    steps, versions, groups = dag.steps, dag.versions, dag.groups
    end_of: dict[int, int] = {}  # version -> the step that ends it
    last_of: dict[str, int] = {}
    for v in versions:
        st.by_path.setdefault(v.path, []).append(v.id)
        prev = last_of.get(v.path)
        if prev is not None and versions[prev].deleter is None and v.writer is not None:
            end_of[prev] = v.writer
        last_of[v.path] = v.id
        if v.deleter is not None:
            end_of[v.id] = v.deleter
    for vid, e in end_of.items():
        _end(st, versions[vid].group, e)
    if not on:
        return st  # ends and versions only: for removals that may not run (`a && rm f`)
    # names written where the command line does not show them (`cp a b dir/`) cannot be staged
    unnamed = {u.path for s in steps for u in s.uses
               if u.loc is None and u.role not in ORDER_ONLY}
    # a real group is staged when all its versions are the script's, with literal names
    for g in groups:
        if g.real and g.path not in unnamed and all(versions[v].writer is not None
                                                    for v in g.versions):
            st.staged.add(g.id)
    st.subst = [{} for _ in steps]
    barriers = [s.id for s in steps if s.barrier]
    for v in versions:
        if v.group not in st.staged:
            continue
        pin = len(steps)  # uses from this step on name the real file
        if v.pinned and barriers:
            end = end_of.get(v.id, len(steps))
            pin = next((b for b in barriers if b > (v.writer or 0) and b <= end), len(steps))
            if pin < len(steps):
                st.pins.setdefault(pin, []).append(v.id)
        for sid, roles in [(v.writer, (OUT, INOUT))] + [(r, (IN, INOUT)) for r in v.readers]:
            if sid is None or sid >= pin:
                continue
            for u in steps[sid].uses:
                if u.path == v.path and u.role in roles and u.loc is not None:
                    st.subst[sid][u.loc] = v.group
    for s in steps:  # changes in place: edits, removals, trees, links, directories
        if s.barrier or s.mkdirs or any(
                u.role not in PLAIN and not (u.role == DEL and s.id in dag.noop)
                for u in s.uses):
            st.in_order.add(s.id)
    for v in versions:  # writes under a real name that cannot be staged
        if v.writer is not None and groups[v.group].real and v.group not in st.staged:
            st.in_order.add(v.writer)
    return st


def _end(st: Staging, group: int, step: int) -> None:
    if step > st.ends.get(group, -1):
        st.ends[group] = step


def unpin(dag: Dag, st: Staging, barrier: int, physical: dict[int, str]) -> list[str]:
    """Before the unknown program ``barrier`` runs: its files go to their real names."""
    errors: list[str] = []
    for vid in st.pins.get(barrier, ()):
        v = dag.versions[vid]
        _move(physical.get(v.group), v.path, errors)
    return errors


def _move(src: str | None, path: str, errors: list[str]) -> None:
    if src is None or not os.path.lexists(src):
        return  # a real name already, or its writer failed without writing it
    try:
        try:
            os.replace(src, path)
        except OSError:  # another file system (memory scratch, --scratch elsewhere)
            shutil.move(src, path)
    except OSError as exc:
        errors.append(f"cannot move {src} to {path}: {exc.strerror}")


def materialize(dag: Dag, st: Staging, upto: int, physical: dict[int, str],
                ran: set[int]) -> list[str]:
    """Put on their real names the files as bash leaves them after step ``upto`` (the last one
    run), from their staged or scratch files. ``physical`` gives the file of each non-real
    group, ``ran`` the steps that ran. A write whose command left no file (NCO failing before
    it renames its output) keeps the version before it, and a removal that did not run (after a
    failed `&&`) keeps its file, as in bash. Returns error messages (best effort)."""
    errors: list[str] = []
    versions = dag.versions
    for path, vids in st.by_path.items():
        state = None  # the version the path holds
        for vid in vids:
            v = versions[vid]
            if v.writer is not None:
                if v.writer > upto:
                    break
                src = physical.get(v.group)
                if v.writer in ran and (src is None or os.path.lexists(src)):
                    state = v
            else:
                state = v
            if v.deleter is not None and v.deleter <= upto and v.deleter in ran:
                state = None
        if state is not None and state.writer is not None:
            _move(physical.get(state.group), path, errors)
    return errors
