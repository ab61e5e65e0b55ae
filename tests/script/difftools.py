"""Differential testing of `shoal script` against bash: data sets, script directives, snapshots
of a run directory, and a comparison that reports every difference readably.

A corpus script may start with directives (comment lines before the first command):

    # args: a "b c"          arguments ($1...), split like a shell would
    # data: models=3 text    the input data set (see ``DATASETS``); default: nothing
    # expect: refused        shoal must refuse it (exit 2, one line naming file:line)
    # stderr: exact          compare stderr text, not only whether it is empty

netCDF files are compared as ncdump text without the attributes NCO fills with command lines
and times (``script_helpers.ncdump_normal``; the same lines are dropped from text files, which may
hold ncdump output); gzip files on their uncompressed bytes (the header holds a time stamp);
symlinks on their targets. In stdout, stderr and file names the run directory reads ``<DIR>`` and
NCO's ``.pid123.`` temporary suffix ``.pid<N>.``. Stderr: with ``# stderr: exact`` the text must
agree; otherwise whether the programs wrote anything to it, leaving out the shell's own
diagnostics on both sides (bash's ``name: line N: ...``, shoal's ``name:N: command failed ...``
and warnings, the ``chains/cN.sh: N:`` lines of the shell running a chain).
"""

from __future__ import annotations

import difflib
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from script_helpers import REPO, make_models, ncdump_normal

CORPUS = Path(__file__).resolve().parent / "corpus"
# the checkout whose shoal is tested (another one, e.g. an older commit, to compare versions)
SHOAL_REPO = os.environ.get("SHOAL_DIFF_REPO", str(REPO))
TIMEOUT = 120


@dataclass
class Directives:
    args: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    expect: str = "same"
    stderr: str = "empty"


def directives(text: str) -> Directives:
    """The ``# key: value`` lines of the script's leading comment block."""
    d = Directives()
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("#"):
            break
        m = re.match(r"#\s*(args|data|expect|stderr):\s*(.*)$", s)
        if not m:
            continue
        key, val = m.group(1), m.group(2).strip()
        if key == "args":
            d.args = shlex.split(val)
        elif key == "data":
            d.data = val.split()
        elif key == "expect":
            d.expect = val
        else:
            d.stderr = val
    return d


# -- input data sets --------------------------------------------------------------------------

TEXT_FILES = {
    "models.txt": "ccma_cgcm3_1\nncar_ccsm3_0\ngfdl_cm2_0\nmiroc3_2_medres\n",
    "stations.csv": "id,name,lat,lon,elev\n"
                    "3,Oslo,59.9,10.7,94\n1,Bergen,60.4,5.3,12\n"
                    "4,Tromso,69.6,18.9,100\n2,Stavanger,58.9,5.7,36\n"
                    "5,Bodo,67.3,14.4,11\n1,Bergen,60.4,5.3,12\n",
    "params.txt": "region=nordic\nstart=1990\nend=2010\nvar=tas\nscale=2\n",
    "years.txt": "1990\n1995\n2000\n2005\n2010\n",
    "obs.txt": "2001 12.5 ok\n2002 13.1 ok\n2003 -999 missing\n2004 12.9 ok\n"
               "2005 14.2 ok\n2006 -999 missing\n2007 13.7 ok\n",
}


def _build(spec: str, d: Path) -> None:
    kind, _, val = spec.partition("=")
    if kind == "models":
        make_models(d, int(val or 2), nt=24)
    elif kind == "text":
        for name, body in TEXT_FILES.items():
            (d / name).write_text(body)
    elif kind == "spaces":
        (d / "input data").mkdir()
        (d / "input data" / "run one.txt").write_text("alpha\nbeta\n")
        (d / "input data" / "run two.txt").write_text("gamma\n")
    elif kind == "tree":
        for sub in ("raw/2001", "raw/2002", "raw/2003"):
            (d / sub).mkdir(parents=True)
            (d / sub / "readme.txt").write_text(f"year {sub[-4:]}\n")
    else:
        raise ValueError(f"unknown data set {spec!r}")


def populate(data: list[str], d: Path, cache: Path) -> None:
    """Copy the data sets named in ``data`` into ``d``; each is built once under ``cache``."""
    for spec in data:
        src = cache / re.sub(r"[^A-Za-z0-9]", "_", spec)
        if not src.exists():
            cache.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=cache, prefix=src.name + "."))
            _build(spec, tmp)
            try:
                tmp.rename(src)
            except OSError:  # built meanwhile by a concurrent run
                shutil.rmtree(tmp)
        shutil.copytree(src, d, symlinks=True, dirs_exist_ok=True)


# -- running ----------------------------------------------------------------------------------

def _env(d: Path) -> dict[str, str]:
    # same environment for both runs; HOME is the run directory, so `~` is a path inside it
    return {**os.environ, "HOME": str(d), "LC_ALL": "C", "TZ": "UTC",
            "PYTHONPATH": SHOAL_REPO}


def run_bash(d: Path, name: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", name, *args], cwd=d, capture_output=True, text=True,
                          timeout=TIMEOUT, env=_env(d), stdin=subprocess.DEVNULL)


def run_shoal(d: Path, name: str, args: list[str], extra: tuple[str, ...] = ()
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal", "script", *extra, name, *args],
                          cwd=d, capture_output=True, text=True, timeout=TIMEOUT,
                          env=_env(d), stdin=subprocess.DEVNULL)


# -- snapshots --------------------------------------------------------------------------------

def snapshot(d: Path) -> dict[str, str]:
    """Every entry under ``d`` as comparable text, by relative path."""
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(d):
        dirs[:] = [x for x in dirs if not x.startswith(".shoal-scratch")]
        for name in sorted(dirs + files):
            p = Path(root) / name
            rel = re.sub(r"\.pid\d+\.", ".pid<N>.", str(p.relative_to(d)))
            if rel.startswith(".shoal-scratch"):
                continue
            if p.is_symlink():
                out[rel] = f"<symlink to {os.readlink(p)}>"
            elif p.is_dir():
                out[rel + "/"] = f"<directory {p.stat().st_mode & 0o777:o}>"
            else:
                out[rel] = f"<mode {p.stat().st_mode & 0o777:o}>\n" + _content(p)
    return out


def _content(p: Path) -> str:
    raw = p.read_bytes()
    if raw[:3] in (b"CDF", b"\x89HD"):
        try:
            return ncdump_normal(p)
        except subprocess.CalledProcessError:
            return f"<unreadable netCDF, {len(raw)} bytes>"
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = b"<gzip>\n" + gzip.decompress(raw)
        except (OSError, EOFError):
            pass
    # ncdump/ncks text saved by the script holds the same time-stamped attributes
    return _VOLATILE.sub("", raw.decode("utf-8", "backslashreplace"))


_VOLATILE = re.compile(r"^[ \t]*:(history|NCO|history_of_appended_files) = .*\n", re.MULTILINE)


# -- comparison -------------------------------------------------------------------------------

def _diff(a: str, b: str, what: str, limit: int = 40) -> str:
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), f"bash {what}",
                                      f"shoal {what}", lineterm="", n=2))
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines)


def _norm(text: str, d: Path) -> str:
    # NCO names its temporary output after its process id (out.nc.pid123.ncks.tmp)
    return re.sub(r"\.pid\d+\.", ".pid<N>.", text.replace(str(d), "<DIR>"))


def program_stderr(text: str, name: str) -> str:
    """``text`` without the shell's own diagnostics: bash's ``name: line N: ...`` and shoal's
    ``name:N: command failed ...`` / warnings. What is left comes from the programs, and
    whether that is empty must agree."""
    own = re.compile(rf"^(shoal script: |warning: )?{re.escape(name)}(: |:\d+: )|^shoal script: "
                     r"|^<DIR>/\.shoal-scratch[^/]*/chains/c\d+\.sh: ")
    return "\n".join(x for x in text.splitlines() if x.strip() and not own.match(x))


def differences(name: str, dirs: tuple[Path, Path], rb: subprocess.CompletedProcess[str],
                rs: subprocess.CompletedProcess[str], stderr: str = "empty") -> list[str]:
    """Readable differences between the bash run (``dirs[0]``) and the shoal run."""
    a, b = dirs
    out: list[str] = []
    if rb.returncode != rs.returncode:
        out.append(f"exit status: bash {rb.returncode}, shoal {rs.returncode}")
    ob, os_ = _norm(rb.stdout, a), _norm(rs.stdout, b)
    if ob != os_:
        out.append("stdout differs:\n" + _diff(ob, os_, "stdout"))
    eb, es = _norm(rb.stderr, a), _norm(rs.stderr, b)
    if stderr == "exact" and eb != es:
        out.append("stderr differs:\n" + _diff(eb, es, "stderr"))
    elif bool(program_stderr(eb, name)) != bool(program_stderr(es, name)):
        pb, ps = program_stderr(eb, name), program_stderr(es, name)
        out.append(f"programs' stderr: bash {'non-empty' if pb else 'empty'}, shoal "
                   f"{'non-empty' if ps else 'empty'}")
    sa, sb = snapshot(a), snapshot(b)
    only_a, only_b = sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa))
    if only_a:
        out.append(f"only bash made: {only_a}")
    if only_b:
        out.append(f"only shoal made: {only_b}")
    for k in sorted(set(sa) & set(sb)):
        if sa[k] != sb[k]:
            out.append(f"{k} differs:\n" + _diff(sa[k], sb[k], k))
    if list(b.glob(".shoal-scratch*")):
        out.append("disk scratch left behind")
    if out:
        out.insert(0, f"{name}: shoal script differs from bash")
        if es.strip():
            out.append("shoal stderr:\n" + es.strip()[-2000:])
        if eb.strip():
            out.append("bash stderr:\n" + eb.strip()[-1000:])
    return out


def refusal_problems(name: str, d: Path, before: dict[str, str],
                     rs: subprocess.CompletedProcess[str]) -> list[str]:
    """A refusal: exit 2, one stderr line naming ``name:LINE:``, and nothing run."""
    out = []
    lines = [x for x in rs.stderr.splitlines() if x.strip()]
    if rs.returncode != 2:
        out.append(f"exit status {rs.returncode}, not 2")
    if len(lines) != 1 or not re.search(rf"{re.escape(name)}:\d+:", lines[0]):
        out.append(f"not one line naming {name}:LINE: {rs.stderr!r}")
    elif not (lines[0].endswith("not supported; run it with bash")
              or re.search(rf"{re.escape(name)}:\d+: syntax error", lines[0])):
        out.append(f"the refusal does not end with 'not supported; run it with bash': {lines[0]}")
    after = snapshot(d)
    if after != before:
        out.append(f"a refused script changed files: {sorted(set(after) ^ set(before))}")
    if out:
        out.insert(0, f"{name}: expected a clear refusal")
    return out


def run_pair(tmp: Path, name: str, source: str, cache: Path,
             extra: tuple[str, ...] = (), refused: bool = False) -> list[str]:
    """Run ``source`` (saved as ``name``) under bash and shoal in fresh identical directories
    made per its directives; return the differences (empty: identical, or refused as
    expected; ``refused``: the script must be refused, whatever its directives say)."""
    dv = directives(source)
    # same base name for both, so `basename $PWD` agrees; full paths are normalised in output
    a, b = tmp / "bash" / "work", tmp / "shoal" / "work"
    for d in (a, b):
        d.mkdir(parents=True)
        populate(dv.data, d, cache)
        (d / name).write_text(source)
    if dv.expect == "refused" or refused:
        before = snapshot(b)
        rs = run_shoal(b, name, dv.args, extra)
        return refusal_problems(name, b, before, rs)
    rb = run_bash(a, name, dv.args)
    rs = run_shoal(b, name, dv.args, extra)
    return differences(name, (a, b), rb, rs, dv.stderr)
