"""Tier 1 of a conda environment, for real: the real conda-pack packs it, conda-unpack's
own code rewrites the prefixes on the receiver, the unpacked interpreter runs there.

There is no conda on the test machines, so ``condaenv.make_conda_env`` makes the
environment the way conda lays one out (package cache, hard links, ``conda-meta``
records with ``paths_data``/``prefix_placeholder``, ``history``) from this machine's
base Python. Both with the package cache (conda-pack packs the cached files and their
placeholders) and after ``conda clean`` (conda-pack finds the prefix by itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import zstandard

from shoal.bundle import BundleError, build, python_executable, rerouted_environ, unpack_bundles
from shoal.bundle.archive import sidecar_path

pytest.importorskip("conda_pack", reason="conda-pack is not installed (pip install conda-pack; "
                    "scripts/setup.sh installs it with the test extra)")

from condaenv import PLACEHOLDER, make_conda_env  # noqa: E402  (tests/bundle/condaenv.py)

REPO = Path(__file__).resolve().parents[2]
VER = "{}.{}".format(*sys.version_info[:2])


def _clean_env(**extra: str) -> dict[str, str]:
    drop = ("LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k not in drop}
    return dict(env, **extra)


def _shoal(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)


def _members(bundle: Path) -> list[tarfile.TarInfo]:
    with open(bundle, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z:
        with tarfile.open(fileobj=z, mode="r|") as t:
            return list(t)


def _read_member(bundle: Path, name: str) -> bytes:
    with open(bundle, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as z:
        with tarfile.open(fileobj=z, mode="r|") as t:
            for m in t:
                if m.name == name:
                    return t.extractfile(m).read()
    raise KeyError(name)


def _where(root: Path) -> str:
    r = subprocess.run([str(root / "bin" / "shoal-conda-where")], env=_clean_env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture(scope="module", params=["pkgs-cache", "cache-cleaned"])
def conda_env(request, tmp_path_factory) -> Path:
    """ENV (a conda environment of one package, ``python``), used once, as real ones are:
    its interpreter has run and written the byte-code caches it writes."""
    where = tmp_path_factory.mktemp(f"conda-{request.param}")
    env = make_conda_env(where, keep_cache=request.param == "pkgs-cache")
    r = subprocess.run([str(env / "bin" / "python3"), "-c", "import sys, sysconfig; sysconfig.get_config_vars();"
                        "print(sys.prefix)"], env=_clean_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == str(env), r.stderr
    yield env
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="module")
def conda_bundle(conda_env, tmp_path_factory) -> dict:
    """``shoal bundle --python ENV/bin/pythonX.Y --tiers python``: its JSON report."""
    out = tmp_path_factory.mktemp("conda-bundles")
    r = _shoal("bundle", "--out", str(out), "--python", str(conda_env / "bin" / f"python{VER}"),
               "--tiers", "python", "--json")
    assert r.returncode == 0, r.stderr
    (rep,) = json.loads(r.stdout)
    rep["path"] = Path(rep["path"])
    rep["stderr"] = r.stderr
    yield rep
    shutil.rmtree(out, ignore_errors=True)


def test_conda_env_is_packed_whole_by_conda_pack(conda_env, conda_bundle):
    path = conda_bundle["path"]
    assert conda_bundle["tier"] == "python" and conda_bundle["built"]
    assert path.name.startswith("t1-python-") and sidecar_path(path).exists()
    cached = (conda_env.parent / "pkgs").exists()
    if cached:
        assert conda_bundle["warnings"] == []
    else:  # conda-pack's own warning, passed on
        assert any("package cache" in w for w in conda_bundle["warnings"]), conda_bundle["warnings"]
        assert "shoal bundle: warning: python: Conda-managed packages" in conda_bundle["stderr"]
    members = _members(path)
    names = [m.name for m in members]
    record = json.loads(next((conda_env / "conda-meta").glob("python-*.json")).read_text())
    # exactly what the conda-meta record lists, its metadata, and conda-pack's additions
    files = {n for n, m in zip(names, members, strict=True) if not m.isdir()}
    added = {"bin/conda-unpack", "bin/conda_unpack_progress.py", "bin/activate", "bin/deactivate",
             "bin/activate.fish", ".shoal/bundles/python.json", ".shoal/conda-unpack-pending"}
    expected = set(record["files"]) | {"conda-meta/history", f"conda-meta/{record['fn'][:-6]}.json"} | added
    unmanaged = files - expected  # what the interpreter wrote in ENV after conda made it
    assert all(n.endswith(".pyc") for n in unmanaged), sorted(unmanaged)
    assert expected <= files, sorted(expected - files)
    # every directory is a member of its own (owner-only at unpack), members sorted, no links
    assert {str(p) for n in names for p in Path(n).parents if str(p) != "."} <= {m.name for m in members if m.isdir()}
    body = [n for n in names if not n.startswith(".shoal")]
    assert body == sorted(body)
    assert not any(m.islnk() for m in members) and all(m.uid == 0 for m in members)
    meta = json.loads(_read_member(path, ".shoal/bundles/python.json"))
    assert meta["conda"] is True and meta["source"] == str(conda_env)
    # a second run reuses it: the key is that of ENV's files
    r = _shoal("bundle", "--out", str(path.parent), "--python", str(conda_env / "bin" / "python3"), "--tiers",
               "python")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(path)] and "python: unchanged" in r.stderr


def test_conda_tier1_delivered_runs_at_its_new_place(conda_env, conda_bundle, local_base, tmp_path):
    env_dir, pkgs = str(conda_env), str(conda_env.parent / "pkgs")
    base = os.path.realpath(sys.base_prefix)
    dest_base = local_base / f"conda-run-{conda_env.parent.name}"
    dest = dest_base / "shoal"
    r = _shoal("bcast", str(conda_bundle["path"]), "--to", str(dest), "--transport", "local")
    assert r.returncode == 0, r.stderr
    gen = Path(os.path.realpath(dest))
    assert not (dest / ".shoal" / "conda-unpack-pending").exists()

    # the interpreter runs from DEST, without PYTHONHOME or LD_LIBRARY_PATH
    code = ("import sys, json, sysconfig, decimal, _ssl, sqlite3, email.mime.text\n"
            "print(json.dumps({'prefix': sys.prefix, 'exe': sys.executable, 'path': sys.path,\n"
            "  'libdir': sysconfig.get_config_var('LIBDIR'), 'files': [json.__file__, decimal.__file__,\n"
            "  _ssl.__file__, sqlite3.__file__, email.mime.text.__file__],\n"
            "  'maps': sorted({l.split()[-1] for l in open('/proc/self/maps') if '/' in l})}))")
    py = dest / "bin" / "python3"
    run = subprocess.run([str(py), "-c", code], env=_clean_env(), capture_output=True, text=True, cwd="/",
                         timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["prefix"] == str(dest) and out["exe"] == str(py)
    assert out["libdir"] == f"{dest}/lib"  # _sysconfigdata was rewritten by conda-unpack
    assert all(p == "" or p.startswith(str(dest) + "/") for p in out["path"]), out["path"]
    assert all(f.startswith(str(dest) + "/") for f in out["files"]), out["files"]
    assert any(m.startswith(f"{gen}/lib/libpython") for m in out["maps"]), out["maps"]
    assert not [m for m in out["maps"] if m.startswith((env_dir, pkgs, base))]

    # the files that embed the prefix now name DEST (conda-unpack), the rest was left alone
    assert _where(dest) == str(dest)  # run by its shebang, which names DEST/bin/pythonX.Y now
    assert (dest / "bin" / "shoal-conda-where").read_text().startswith(f"#!{dest}/bin/python{VER}\n")
    assert f"prefix={dest}\n" in (dest / "lib" / "pkgconfig" / f"python-{VER}.pc").read_text()
    pydoc = dest / "bin" / f"pydoc{VER}"
    if pydoc.exists():  # conda-pack made its shebang-only prefix `/usr/bin/env pythonX.Y`
        assert pydoc.read_text().startswith(f"#!/usr/bin/env python{VER}\n")
        r = subprocess.run([str(pydoc), "math"], env=_clean_env(PATH=f"{dest}/bin:/usr/bin:/bin"),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "math" in r.stdout, r.stderr

    # nothing points back at ENV or its package cache, and no placeholder is left. Exempt:
    # conda's own command log, conda-pack's record of the prefixes it rewrote, and shoal's
    # note of where the bundle was built.
    notes = {"conda-meta/history", "bin/conda-unpack", ".shoal/bundles/python.json"}
    needles = [env_dir.encode(), pkgs.encode(), PLACEHOLDER.encode()]
    found = []
    for p in sorted(gen.rglob("*")):
        rel = str(p.relative_to(gen))
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(p)
            assert not os.path.isabs(target) and os.path.realpath(p).startswith(str(gen) + "/"), (rel, target)
            continue
        assert st.st_mode & 0o077 == 0, (rel, oct(st.st_mode))  # owner-only
        if stat.S_ISREG(st.st_mode) and rel not in notes:
            data = p.read_bytes()
            # (a package's record in conda-meta names its placeholder in paths_data)
            found += [(rel, n.decode()) for n in needles if n in data
                      and not (n == needles[2] and rel.startswith("conda-meta/"))]
    assert found == []
    strace = shutil.which("strace")
    if strace:  # and running it opens nothing there (nor in the base Python it came from)
        log = tmp_path / "trace"
        r = subprocess.run([strace, "-f", "-o", str(log), "-e", "trace=%file", str(py), "-c", code],
                           env=_clean_env(), capture_output=True, text=True, cwd="/", timeout=120)
        assert r.returncode == 0, r.stderr
        text = log.read_text()
        assert not [ln for ln in text.splitlines() if any(f'"{p}' in ln for p in (env_dir, pkgs, base))]
        assert f'"{dest}/' in text or f'"{gen}/' in text

    # `shoal env`'s rerouting runs it too
    r = subprocess.run([str(python_executable(dest)), "-c", "import sys, sysconfig; print(sys.prefix); "
                        "print(sysconfig.get_config_var('LIBDIR'))"], env=rerouted_environ(dest),
                       capture_output=True, text=True, cwd="/", timeout=60)
    assert r.returncode == 0 and r.stdout.split() == [str(dest), f"{dest}/lib"], r.stderr

    # a later bundle overlays it: a new generation, the old one gone, the prefixes still right
    app = tmp_path / "app"
    app.mkdir()
    (app / "hello.py").write_text("print('hello')\n")
    (app_res,) = build(tmp_path / "out", tiers=(), app=app)
    r = _shoal("bcast", str(app_res.path), "--to", str(dest), "--transport", "local")
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(dest) != str(gen) and not gen.exists()
    assert _where(dest) == str(dest)
    r = subprocess.run([str(py), "-c", "import sysconfig, os; print(os.path.isdir(sysconfig.get_config_var('LIBDIR')))"],
                       env=_clean_env(), capture_output=True, text=True, cwd=dest / "app", timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr
    assert (dest / "app" / "hello.py").exists()

    r = _shoal("bcast", "--cleanup", "--to", str(dest), "--transport", "local")
    assert r.returncode == 0, r.stderr
    assert not dest_base.exists()


def test_conda_unpack_ignores_the_receivers_own_python_settings(conda_bundle, local_base, monkeypatch):
    # a receiver that itself runs rerouted (an agent started with --bundle, a job under
    # `shoal env`) has another root's PYTHONHOME and LD_LIBRARY_PATH: not for this interpreter
    dest = local_base / "conda-rerouted-receiver" / "shoal"
    monkeypatch.setenv("PYTHONHOME", "/nonexistent/shoal-other-root")
    monkeypatch.setenv("PYTHONPATH", "/nonexistent/shoal-other-root/lib")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/nonexistent/shoal-other-root/lib")
    try:
        unpack_bundles([conda_bundle["path"]], dest)
        text = (dest / "lib" / f"python{VER}").glob("_sysconfigdata_*.py")
        assert all(f"'{dest}/lib'" in p.read_text() for p in text)
        assert not (dest / ".shoal" / "conda-unpack-pending").exists()
    finally:
        from shoal.bundle import cleanup

        cleanup(dest)
    assert not dest.parent.exists()


@pytest.mark.parametrize("damage", ["flip-byte", "truncate", "flip-byte-matching-sidecar"])
def test_damaged_conda_bundle_is_rejected(conda_bundle, tmp_path, local_base, damage):
    dest_base = local_base / f"conda-damage-{damage}"
    dest = dest_base / "shoal"
    app = tmp_path / "app"
    app.mkdir()
    (app / "keep.txt").write_text("v1\n")
    (good,) = build(tmp_path / "out", tiers=(), app=app)
    unpack_bundles([good.path], dest)
    live = os.readlink(dest)
    src = conda_bundle["path"]
    bad = tmp_path / src.name
    data = bytearray(src.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    digest = hashlib.sha256(data).hexdigest() if damage == "flip-byte-matching-sidecar" else None
    sidecar_path(bad).write_text(f"{digest}  {bad.name}\n" if digest else sidecar_path(src).read_text())
    r = _shoal("bcast", str(bad), "--to", str(dest), "--transport", "local")
    assert r.returncode == 1
    if damage == "flip-byte-matching-sidecar":  # zstd's and tar's own checks catch it
        assert f"{bad.name}: cannot unpack" in r.stderr
    else:
        assert f"{bad.name}: checksum mismatch" in r.stderr and "corrupt or truncated bundle" in r.stderr
    assert os.readlink(dest) == live and (dest / "app" / "keep.txt").read_text() == "v1\n"
    assert not (dest / "bin").exists()
    assert sorted(p.name for p in dest_base.iterdir()) == sorted(["shoal", ".shoal.shoal-made", live])
    with pytest.raises(BundleError, match="checksum mismatch|cannot unpack"):
        unpack_bundles([bad], dest)
    from shoal.bundle import cleanup

    cleanup(dest)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed (scripts/setup-bundle-deps.sh)")
def test_conda_tier1_over_mpi_each_receiver_gets_its_own_prefix(conda_bundle, local_base):
    pytest.importorskip("mpi4py")
    base = local_base / "conda-mpi"
    mpirun = "mpirun --oversubscribe --allow-run-as-root --bind-to none -n 2"
    r = _shoal("bcast", str(conda_bundle["path"]), "--to", f"{base}/r{{rank}}/shoal", "--transport", "mpi",
               "--mpirun", mpirun, "--receivers", "per-rank")
    assert r.returncode == 0, r.stderr
    for rank in range(2):
        root = base / f"r{rank}" / "shoal"
        assert _where(root) == str(root) and not (root / ".shoal" / "conda-unpack-pending").exists()
    r = _shoal("bcast", "--to", f"{base}/r{{rank}}/shoal", "--transport", "mpi", "--mpirun", mpirun,
               "--receivers", "per-rank", "--cleanup")
    assert r.returncode == 0, r.stderr
    assert not base.exists()


def test_conda_tier1_through_the_agents_node_steps(conda_bundle, local_base):
    # what each agent's worker runs for `--transport agents` (the tasks called in-process here)
    from shoal.bundle import cleanup
    from shoal.bundle.agents import node_append, node_begin, node_commit, node_finish, node_unpack
    from shoal.bundle.archive import expected_digest

    path = conda_bundle["path"]
    dest = str(local_base / "conda-agents" / "agent-a" / "shoal")
    node_begin(dest, "tok", False)
    size, step = path.stat().st_size, 4 << 20
    with open(path, "rb") as f:
        for off in range(0, size, step):
            node_append(dest, "tok", path.name, off, f.read(step))
    node_unpack(dest, "tok", path.name, size, expected_digest(path))
    node_commit(dest, node_finish(dest, "tok"))
    assert _where(Path(dest)) == dest
    cleanup(Path(dest))
    assert not Path(dest).parent.exists()


def test_conda_pack_tar_hard_links_and_directories_become_plain_members(tmp_path):
    # conda-pack's tar has no directory members and stores a second name of an inode as a
    # hard link; the bundle has every directory as a member and the link as a file
    from shoal.bundle.tiers import Plan, _write_conda

    src = tmp_path / "env"
    (src / "lib" / "deep").mkdir(parents=True)
    (src / "lib" / "deep" / "a.txt").write_text("same inode\n")
    os.link(src / "lib" / "deep" / "a.txt", src / "lib" / "b.txt")
    tar_path = tmp_path / "env.tar"
    with tarfile.open(tar_path, "w") as t:
        for rel in ("lib/deep/a.txt", "lib/b.txt"):
            t.add(src / rel, rel, recursive=False)
    with tarfile.open(tar_path) as t:
        assert t.getmember("lib/b.txt").islnk()
    out = tmp_path / "t1-python-x.tar.zst"
    _write_conda(tar_path, out, Plan("python", meta={"conda": True}), 3, 0)
    members = {m.name: m for m in _members(out)}
    assert [n for n in members if not n.startswith(".shoal")] == ["lib", "lib/b.txt", "lib/deep", "lib/deep/a.txt"]
    assert members["lib"].isdir() and members["lib/deep"].isdir()
    assert members["lib/b.txt"].isreg() and members["lib/b.txt"].size == len("same inode\n")
    assert _read_member(out, "lib/b.txt") == b"same inode\n"
