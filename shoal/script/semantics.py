"""Which arguments of a program are input and output files, from the data file commands.toml."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .errors import ScriptError
from .model import DEL, IN, INOUT, OUT, FileUse
from .simfs import DIR, LINK, NOCLOBBER, RMTREE, SYMLINK, TREE, SimFS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

POSITIONAL_KINDS = {
    "none", "inputs", "inputs_output", "input_output", "outputs", "copy", "move", "link",
    "remove", "touch", "mkdir", "compress", "decompress",
}
_LIST_FIELDS = (
    "aliases", "with_value", "optional_value", "input_options", "output_options", "append_flags",
    "inplace_flags", "keep_flags", "stdout_flags", "decompress_flags", "prefix_options",
    "barrier_options", "dir_flags", "parents_flags", "skip_unless", "flags",
    "side_output_options", "overwrite_flags",
)


@dataclass
class Spec:
    """The file semantics of one program (see the header of commands.toml)."""

    name: str
    positional: str = "none"
    single: str = "input"
    skip: int = 0
    lists: dict[str, frozenset[str]] = field(default_factory=dict)
    stdin_names: str = ""  # "", "none" or "one" (see commands.toml)
    shows_names: bool = False  # prints its input files' names: they keep them (commands.toml)
    # command-line shape -> parsed options (see _parse_shape); filled as commands are analyzed
    shapes: dict[tuple[str, ...], tuple] = field(  # type: ignore[type-arg]
        default_factory=dict, repr=False, compare=False)

    def has(self, key: str, opt: str) -> bool:
        return opt in self.lists.get(key, ())

    def long_option(self, name: str) -> str | None:
        """The long option ``name`` (``--x``) means, as getopt_long reads it: itself if listed,
        else the one listed option it abbreviates (``--var`` = ``--variable``), else None.
        Abbreviations are resolved only for programs that list their ``flags`` too (then the
        table names every long option); several candidates that disagree are ambiguous."""
        known = self.lists.get("with_value", frozenset()) | self.lists.get("flags", frozenset())
        if name in known:
            return name
        if not self.lists.get("flags"):
            return None
        cands = sorted(o for o in known if o.startswith(name) and o[:2] == "--")
        if not cands:
            return None
        roles = {tuple(k for k, v in self.lists.items() if o in v and k != "aliases")
                 for o in cands}
        return cands[0] if len(roles) == 1 else None


@dataclass
class Analysis:
    """What one command does to files."""

    uses: list[FileUse] = field(default_factory=list)
    mkdirs: list[str] = field(default_factory=list)
    barrier_reason: str | None = None


def _load_toml(data: dict[str, Any], origin: str) -> dict[str, dict[str, Any]]:
    programs = data.get("program")
    if not isinstance(programs, dict):
        raise ScriptError(f"{origin}: no [program.NAME] tables")
    return programs


class Semantics:
    """The program table: built-in commands.toml plus user files (later files override)."""

    def __init__(self, extra_files: list[str] | None = None) -> None:
        raw: dict[str, dict[str, Any]] = {}
        text = resources.files(__package__).joinpath("commands.toml").read_bytes()
        raw.update(_load_toml(tomllib.loads(text.decode()), "commands.toml"))
        for path in extra_files or []:
            try:
                with open(path, "rb") as f:
                    raw.update(_load_toml(tomllib.load(f), path))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ScriptError(f"cannot read command table: {exc}", script=path)
        self.specs: dict[str, Spec] = {}
        for name in raw:
            spec = self._resolve(raw, name, [])
            if name.startswith("_"):
                continue
            self.specs[name] = spec
            for alias in spec.lists.get("aliases", ()):
                self.specs.setdefault(alias, spec)

    def _resolve(self, raw: dict[str, dict[str, Any]], name: str, seen: list[str]) -> Spec:
        if name in seen:
            raise ScriptError(f"command table: 'like' cycle through {name}")
        entry = raw[name]
        base: dict[str, Any] = {}
        if "like" in entry:
            if entry["like"] not in raw:
                raise ScriptError(f"command table: {name}: 'like' names unknown '{entry['like']}'")
            parent = self._resolve(raw, entry["like"], seen + [name])
            base = {"positional": parent.positional, "single": parent.single, "skip": parent.skip,
                    "stdin_names": parent.stdin_names, "shows_names": parent.shows_names,
                    **{k: sorted(v) for k, v in parent.lists.items() if k != "aliases"}}
        merged = {**base, **{k: v for k, v in entry.items() if k != "like"}}
        pos = merged.get("positional", "none")
        if pos not in POSITIONAL_KINDS:
            raise ScriptError(f"command table: {name}: unknown positional kind '{pos}'")
        lists = {k: frozenset(merged.get(k, ())) for k in _LIST_FIELDS}
        return Spec(name, pos, merged.get("single", "input"), int(merged.get("skip", 0)), lists,
                    str(merged.get("stdin_names", "")), bool(merged.get("shows_names", False)))

    def get(self, program: str) -> Spec | None:
        """The spec of ``program`` (its basename), or None for an unknown program."""
        return self.specs.get(os.path.basename(program))

    def analyze(self, spec: Spec, args: list[str], stage: int, cwd: str, fs: SimFS) -> Analysis:
        """File uses of ``argv[1:] == args`` run in ``cwd``; argv indices in ``loc`` start at 1."""
        res = Analysis()
        # how the options parse depends only on the words that start with '-': remember it
        # per program and shape of the command line (a script repeats a few shapes many times)
        shape = tuple([a if a[:1] == "-" and len(a) > 1 else "" for a in args])
        tpl = spec.shapes.get(shape)
        if tpl is None:
            tpl = spec.shapes[shape] = _parse_shape(spec, shape)
        opt_tpl, flags, pos_idx, barrier_reason, append, inplace, in_opts, out_opts, prefix_opt, \
            side_opts = tpl
        # (option, value, argv index, prefix); an index in place of a value: args[index]
        opts = [(o, args[v] if type(v) is int else v, idx, p) for o, v, idx, p in opt_tpl]
        pos = [(args[k], k + 1) for k in pos_idx]
        res.barrier_reason = barrier_reason

        uses = res.uses

        def use(path: str, role: str, idx: int | None, prefix: str = "") -> None:
            if path in ("", "-") or path.startswith("/dev/"):
                return
            if path[0] not in "/~." and "/." not in path and "//" not in path and \
                    path[-1] != "/" and cwd != "/":
                full = cwd + "/" + path  # already normal: skip normpath (hot path)
            elif path[0] != "~":
                full = _join(cwd, path)
            else:
                full = os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))
            uses.append(FileUse(full, role, None if idx is None else (stage, "a", idx), prefix))

        out_opt = [opts[k][1:] for k in out_opts]
        for k in in_opts:
            _o, v, idx, p = opts[k]
            use(v, IN, idx, p)
        for k in side_opts:
            _o, v, idx, p = opts[k]
            use(v, OUT, idx, p)
        prefix_dir = None if prefix_opt is None else opts[prefix_opt][1]

        if spec.name in ("awk", "gawk", "mawk"):
            # awk operands of the form var=value are assignments, not files
            pos = [(a, k) for a, k in pos if not (a.split("=", 1)[0].isidentifier() and "=" in a)]

        kind = spec.positional
        out_role = INOUT if append else OUT
        if not append and spec.lists.get("overwrite_flags") and \
                spec.lists["overwrite_flags"].isdisjoint(flags):
            out_role = NOCLOBBER  # NCO without -O: fails if the output exists (emit decides)

        def inp(path: str, idx: int | None) -> None:
            if prefix_dir is not None and not path.startswith("/"):
                # NCO -p DIR prefixes input names: the name itself cannot be substituted
                use(os.path.join(prefix_dir, path), IN, None)
            else:
                use(path, IN, idx)

        if kind == "none":
            pass
        elif kind == "inputs":
            for a, k in pos:
                # a program that prints its files' names (wc, ncdump) reads them by their names
                use(a, INOUT if inplace else IN, None if spec.shows_names else k)
            for v, idx, p in out_opt:
                use(v, out_role, idx, p)
        elif kind == "inputs_output":
            n_in = len(pos) if out_opt or spec.stdin_names != "one" else len(pos) - 1
            if spec.stdin_names and n_in <= 0:
                # no input named: NCO reads the input names from stdin, which no word says
                res.barrier_reason = f"{spec.name} reads its input file names from stdin"
                for a, k in pos:
                    use(a, out_role, k)
                for v, idx, p in out_opt:
                    use(v, out_role, idx, p)
            elif out_opt:
                for a, k in pos:
                    inp(a, k)
                for v, idx, p in out_opt:
                    use(v, out_role, idx, p)
            elif len(pos) == 1:
                a, k = pos[0]
                if spec.single == "inplace":
                    use(a, INOUT, k)
                elif spec.single == "output":
                    use(a, out_role, k)
                else:
                    inp(a, None if spec.shows_names else k)  # ncks prints it, and its name
            elif pos:
                for a, k in pos[:-1]:
                    inp(a, k)
                a, k = pos[-1]
                use(a, out_role, k)
        elif kind == "input_output":
            if pos:
                use(pos[0][0], IN, pos[0][1])
            if len(pos) > 1:
                use(pos[1][0], OUT, pos[1][1])
        elif kind == "outputs":
            for a, k in pos:
                use(a, out_role, k)
        elif kind in ("copy", "move", "link"):
            self._copy_like(spec, kind, pos, opts, flags, cwd, fs, use, res)
        elif kind == "remove":
            recursive = any(spec.has("dir_flags", f) for f in flags) or spec.name == "rmdir"
            for a, k in pos:
                full = _join(cwd, a)
                kind_of = fs.kind(full, follow=False)  # rm removes a link, not its target
                if kind_of == DIR:
                    below = _files_under(fs, full)
                    if not recursive or (spec.name == "rmdir" and fs.listdir(full)):
                        continue  # rm DIR / rmdir of a non-empty one fail in bash too
                    # the files below keep their real names here (read, then removed)
                    for f in below:
                        res.uses.append(FileUse(f, IN, None))
                        res.uses.append(FileUse(f, DEL, None))
                    res.uses.append(FileUse(full, RMTREE, None))
                elif kind_of is not None and kind_of[0] == LINK:
                    # the link goes: ordered with every use of a path through it
                    res.uses.append(FileUse(full, RMTREE, None))
                elif kind_of is not None:
                    use(a, DEL, k)
                else:
                    # absent here, unless an unknown program (a barrier) made it: ordered with
                    # every use of the path and below it, changes nothing in the simulated fs
                    res.uses.append(FileUse(full, RMTREE, None))
        elif kind == "touch":
            for a, k in pos:
                full = os.path.normpath(os.path.join(cwd, a))
                use(a, INOUT if fs.exists(full) else OUT, k)
        elif kind == "mkdir":
            parents = any(spec.has("parents_flags", f) for f in flags)
            for a, _k in pos:
                d = _join(cwd, a)
                res.mkdirs.append(d)
                # each directory it makes is a tree operation (mkdir -p of one that exists
                # changes nothing)
                while d != "/" and not fs.isdir(d):
                    res.uses.append(FileUse(d, TREE, None))
                    if not parents:
                        break
                    d = os.path.dirname(d)
        elif kind in ("compress", "decompress"):
            dec = kind == "decompress" or any(spec.has("decompress_flags", f) for f in flags)
            to_stdout = any(spec.has("stdout_flags", f) for f in flags)
            keep = any(spec.has("keep_flags", f) for f in flags)
            suffix = next((v for o, v, _i, _p in opts if o in ("-S", "--suffix")), None)
            suffix = suffix or {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz"}.get(spec.name, ".gz")
            if spec.name in ("gunzip", "bunzip2", "unxz"):
                suffix = {"gunzip": ".gz", "bunzip2": ".bz2", "unxz": ".xz"}[spec.name]
            for a, k in pos:
                # the output name derives from the input's: both keep their names
                use(a, IN, k if to_stdout else None)
                if to_stdout:
                    continue
                if dec:
                    target = a[: -len(suffix)] if a.endswith(suffix) else a + ".out"
                else:
                    target = a + suffix
                use(target, OUT, None)  # the name is derived, not written: pinned
                if not keep:
                    use(a, DEL, None)
        return res

    @staticmethod
    def _copy_like(spec: Spec, kind: str, pos: list[tuple[str, int]],
                   opts: list[tuple[str, str, int, str]], flags: set[str], cwd: str, fs: SimFS,
                   use: Any, res: Analysis) -> None:
        target_dir = next((v for o, v, _i, _p in opts if o in ("-t", "--target-directory")), None)
        if target_dir is None:
            if len(pos) < 2:
                return
            dest, dest_idx = pos[-1]
            srcs = pos[:-1]
        else:
            dest, dest_idx, srcs = target_dir, None, pos
        dest_full = _join(cwd, dest)
        no_target = "-T" in flags or "--no-target-directory" in flags
        if kind == "link" and ("-n" in flags or "--no-dereference" in flags) and \
                (fs.kind(dest_full, follow=False) or " ")[0] == LINK:
            no_target = True  # ln -n: a link to a directory is replaced, not entered
        into_dir = target_dir is not None or len(srcs) > 1 or (
            not no_target and fs.isdir(dest_full))
        recursive = any(spec.has("dir_flags", f) for f in flags)
        force = "-f" in flags or "--force" in flags
        # cp copies a link as a link with -P/-d/-a, and with -r unless -L/-H
        links_as_links = kind == "move" or any(
            f in flags for f in ("-P", "-d", "-a", "--no-dereference", "--archive")) or (
            recursive and not any(f in flags for f in ("-L", "-H", "--dereference")))
        for a, k in srcs:
            src_full = _join(cwd, a)
            out = os.path.join(dest, os.path.basename(a.rstrip("/"))) if into_dir else dest
            out_full = _join(cwd, out)
            if kind == "link":
                if fs.kind(out_full, follow=False) is not None and not force:
                    continue  # ln fails: the name exists
                if "-s" in flags or "--symbolic" in flags:
                    target = a  # relative to the link's directory, as the kernel reads it
                elif fs.kind(src_full) == "f":
                    # a hard link: modelled as a name of the same file (ordered, real names)
                    target = fs.resolve(src_full)
                else:
                    continue  # hard links to directories or missing files fail
                res.uses.append(FileUse(out_full, SYMLINK, None, target))
                continue
            if kind != "link" and fs.resolve(src_full) == fs.resolve(out_full):
                continue  # "are the same file": an error in bash, nothing changes
            src_kind = fs.kind(src_full, follow=False)
            if src_kind is not None and src_kind[0] == LINK and links_as_links:
                if out_full != src_full:
                    res.uses.append(FileUse(out_full, SYMLINK, None, src_kind[1:]))
                    if kind == "move":
                        res.uses.append(FileUse(src_full, RMTREE, None))
                continue
            if fs.isdir(src_full):
                if kind == "copy" and not recursive:
                    continue  # cp omits a directory without -r (an error, nothing changes)
                _copy_tree(fs, src_full, out_full, kind == "move", res)
                continue
            # into a directory the new name is made from the source's: both keep their names
            use(a, IN, None if into_dir else k)
            use(out, OUT, None if into_dir else dest_idx)
            if kind == "move":
                use(a, DEL, None)


def _parse_shape(spec: Spec, shape: tuple[str, ...]) -> tuple:  # type: ignore[type-arg]
    """Parse the options of a command line given as its shape: the words starting with '-'
    verbatim, every other word as "". Values of separate words are given by their index."""
    opts: list[tuple[str, str | int, int, str]] = []  # (option, value or index, argv index, prefix)
    flags: set[str] = set()
    pos: list[int] = []
    i = 0
    n = len(shape)
    while i < n:
        a = shape[i]
        if a == "--":
            pos.extend(range(i + 1, n))
            break
        if a.startswith("--") and len(a) > 2:
            name, eq, val = a.partition("=")
            name = spec.long_option(name) or name
            if spec.has("with_value", name) and not eq and i + 1 < n:
                opts.append((name, i + 1, i + 2, ""))
                i += 1
            elif eq:
                opts.append((name, val, i + 1, a[: len(a) - len(val)]))
            flags.add(name)
        elif a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                o = "-" + a[j]
                flags.add(o)
                if spec.has("optional_value", o):
                    opts.append((o, a[j + 1:], i + 1, a[: j + 1]))
                    break
                if spec.has("with_value", o):
                    if j + 1 < len(a):
                        opts.append((o, a[j + 1:], i + 1, a[: j + 1]))
                    elif i + 1 < n:
                        opts.append((o, i + 1, i + 2, ""))
                        i += 1
                    break
                j += 1
        else:
            pos.append(i)
        i += 1
    barrier_reason = None
    for o, _v, _idx, _p in opts:
        if spec.has("barrier_options", o):
            barrier_reason = f"option {o} of {spec.name}"
    for o in flags:
        if spec.has("barrier_options", o) and barrier_reason is None:
            barrier_reason = f"option {o} of {spec.name}"
    append = any(spec.has("append_flags", f) for f in flags)
    inplace = any(spec.has("inplace_flags", f) for f in flags)
    in_opts = [k for k, o in enumerate(opts) if spec.has("input_options", o[0])]
    out_opts = [k for k, o in enumerate(opts) if spec.has("output_options", o[0])]
    side_opts = [k for k, o in enumerate(opts) if spec.has("side_output_options", o[0])]
    prefix_opt = next((k for k, o in enumerate(opts) if spec.has("prefix_options", o[0])), None)
    if spec.skip and not any(spec.has("skip_unless", f) for f in flags):
        pos = pos[spec.skip:]
    return (opts, flags, pos, barrier_reason, append, inplace, in_opts, out_opts, prefix_opt,
            side_opts)


def _join(cwd: str, path: str) -> str:
    """``os.path.normpath(os.path.join(cwd, path))``, short when nothing needs normalizing."""
    if path and path[0] not in "/." and "/." not in path and "//" not in path and \
            not path.endswith("/") and cwd != "/":
        return cwd + "/" + path
    return os.path.normpath(os.path.join(cwd, path))


def _files_under(fs: SimFS, d: str) -> list[str]:
    """Files (and links) below directory ``d``; links to directories are not entered."""
    out: list[str] = []
    for name, kind in fs.entries(d):
        p = os.path.join(d, name)
        if kind == DIR:
            out.extend(_files_under(fs, p))
        else:
            out.append(p)
    return out


def _copy_tree(fs: SimFS, src: str, out: str, move: bool, res: Analysis) -> None:
    """``cp -r SRC OUT`` / ``mv SRC OUT`` of a directory: every file below SRC appears below OUT
    (mv: and leaves SRC). Both trees are tree operations; the files keep their real names."""
    if out == src or out.startswith(src + "/"):
        return  # into itself: an error in bash, nothing changes
    out_kind = fs.kind(out)
    if out_kind == "f" or (out_kind == DIR and move and fs.listdir(out)) or \
            not fs.isdir(os.path.dirname(out)):
        return  # onto a file / a non-empty directory / into nowhere: an error, nothing changes
    uses = res.uses
    uses.append(FileUse(src, RMTREE if move else TREE, None))
    uses.append(FileUse(out, TREE, None))
    res.mkdirs.append(out)
    todo = [""]
    while todo:
        rel = todo.pop()
        for name, kind in fs.entries(src + rel):
            s, o = src + rel + "/" + name, out + rel + "/" + name
            if kind == DIR:
                res.mkdirs.append(o)
                todo.append(rel + "/" + name)
                continue
            if kind[0] == LINK:
                uses.append(FileUse(o, SYMLINK, None, kind[1:]))
            else:
                uses.append(FileUse(s, IN, None))
                uses.append(FileUse(o, OUT, None))
            if move:
                uses.append(FileUse(s, DEL, None))
