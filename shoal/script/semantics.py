"""Which arguments of a program are input and output files, from the data file commands.toml."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .errors import ScriptError
from .model import DEL, IN, INOUT, OUT, FileUse
from .simfs import SimFS

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
    "side_output_options",
)


@dataclass
class Spec:
    """The file semantics of one program (see the header of commands.toml)."""

    name: str
    positional: str = "none"
    single: str = "input"
    skip: int = 0
    lists: dict[str, frozenset[str]] = field(default_factory=dict)
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
                    **{k: sorted(v) for k, v in parent.lists.items() if k != "aliases"}}
        merged = {**base, **{k: v for k, v in entry.items() if k != "like"}}
        pos = merged.get("positional", "none")
        if pos not in POSITIONAL_KINDS:
            raise ScriptError(f"command table: {name}: unknown positional kind '{pos}'")
        lists = {k: frozenset(merged.get(k, ())) for k in _LIST_FIELDS}
        return Spec(name, pos, merged.get("single", "input"), int(merged.get("skip", 0)), lists)

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

        def inp(path: str, idx: int) -> None:
            if prefix_dir is not None and not path.startswith("/"):
                # NCO -p DIR prefixes input names: the name itself cannot be substituted
                use(os.path.join(prefix_dir, path), IN, None)
            else:
                use(path, IN, idx)

        if kind == "none":
            pass
        elif kind == "inputs":
            for a, k in pos:
                use(a, INOUT if inplace else IN, k)
            for v, idx, p in out_opt:
                use(v, out_role, idx, p)
        elif kind == "inputs_output":
            if out_opt:
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
                    inp(a, k)
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
                kind_of = fs.kind(full)
                if kind_of == "d":
                    if not recursive:
                        continue  # rm DIR fails in bash too; nothing changes
                    for f in _files_under(fs, full):
                        res.uses.append(FileUse(f, DEL, None))
                    res.uses.append(FileUse(full, DEL, None))  # the directory itself
                elif kind_of is not None:
                    use(a, DEL, k)
        elif kind == "touch":
            for a, k in pos:
                full = os.path.normpath(os.path.join(cwd, a))
                use(a, INOUT if fs.exists(full) else OUT, k)
        elif kind == "mkdir":
            res.mkdirs.extend(os.path.normpath(os.path.join(cwd, a)) for a, _k in pos)
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
        dest_full = os.path.normpath(os.path.join(cwd, dest))
        into_dir = target_dir is not None or fs.isdir(dest_full) or len(srcs) > 1
        symlink = kind == "link" and ("-s" in flags or "--symbolic" in flags)
        for a, k in srcs:
            src_full = os.path.normpath(os.path.join(cwd, a))
            if fs.isdir(src_full):
                res.barrier_reason = f"{spec.name} of a directory ({a})"
                continue
            if symlink:
                # a relative symlink target is relative to the link's directory
                base = dest_full if into_dir else os.path.dirname(dest_full)
                src_full = os.path.normpath(os.path.join(base, a))
                if fs.exists(src_full):
                    res.uses.append(FileUse(src_full, IN, None))
            else:
                use(a, IN, k)
            if into_dir:
                use(os.path.join(dest, os.path.basename(a)), OUT, None)
            else:
                # a link keeps its name: what it points to is resolved by name
                use(dest, OUT, dest_idx if kind != "link" else None)
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
    out: list[str] = []
    for name in fs.listdir(d):
        p = os.path.join(d, name)
        if fs.isdir(p):
            out.extend(_files_under(fs, p))
        else:
            out.append(p)
    return out
