"""Integrity, atomicity, overlay, privacy and cleanup of node-local installs."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.bundle import BundleError, build, cleanup, unpack_bundles
from shoal.bundle.archive import sidecar_path

REPO = Path(__file__).resolve().parents[2]


def _app_bundle(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    app = tmp_path / f"src-{name}"
    for rel, text in files.items():
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_text(text)
    (res,) = build(tmp_path / f"out-{name}", tiers=(), app=app)
    return res.path


def _copy_bundle(src: Path, dst: Path) -> Path:
    shutil.copy(src, dst)
    shutil.copy(sidecar_path(src), sidecar_path(dst))
    return dst


def _leftovers(base: Path) -> list[str]:
    return sorted(p.name for p in base.iterdir()) if base.exists() else []


@pytest.mark.parametrize("damage", ["flip-byte", "truncate", "flip-byte-matching-sidecar"])
def test_damaged_bundle_is_rejected_and_nothing_half_unpacked_is_used(bundles, tmp_path, local_base, damage):
    dest_base = local_base / f"damage-{damage}"
    dest = dest_base / "shoal"
    good = _app_bundle(tmp_path, "v1", {"keep.txt": "v1\n"})
    unpack_bundles([good], dest)
    before = (dest / "app" / "keep.txt").read_text()
    big = bundles[0]  # tier 1: ~40 MB, so damage lands mid-stream
    bad = _copy_bundle(big, tmp_path / big.name)
    data = bytearray(bad.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    if damage == "flip-byte-matching-sidecar":  # the archive's own checks must still catch it
        import hashlib

        sidecar_path(bad).write_text(f"{hashlib.sha256(data).hexdigest()}  {bad.name}\n")
    with pytest.raises(BundleError) as ei:
        unpack_bundles([bad], dest)
    msg = str(ei.value)
    assert bad.name in msg
    if damage == "flip-byte-matching-sidecar":
        assert "cannot unpack" in msg
    else:
        assert "checksum mismatch" in msg and ("corrupt or truncated" in msg)
    # the live root is untouched and no staging directory is left behind
    assert (dest / "app" / "keep.txt").read_text() == before
    assert not (dest / "bin").exists()
    assert _leftovers(dest_base) == sorted(["shoal", ".shoal.shoal-made", os.readlink(dest)])


def test_missing_checksum_file_is_an_error(tmp_path, local_base):
    b = _app_bundle(tmp_path, "nosum", {"a": "a"})
    sidecar_path(b).unlink()
    with pytest.raises(BundleError, match=r"no checksum file .*\.sha256"):
        unpack_bundles([b], local_base / "nosum" / "shoal")
    assert not (local_base / "nosum").exists() or not (local_base / "nosum" / "shoal").exists()


def test_later_bundles_overlay_earlier_ones_and_files_are_private(tmp_path, local_base):
    b1 = _app_bundle(tmp_path, "one", {"same.txt": "one\n", "only1.txt": "1\n", "sub/x.txt": "x1\n"})
    b2 = _app_bundle(tmp_path, "two", {"same.txt": "two\n", "only2.txt": "2\n"})
    dest = local_base / "overlay" / "shoal"
    unpack_bundles([b1, b2], dest)
    app = dest / "app"
    assert (app / "same.txt").read_text() == "two\n"
    assert (app / "only1.txt").read_text() == "1\n" and (app / "only2.txt").read_text() == "2\n"
    # a second delivery overlays the installed root; --fresh replaces it
    b3 = _app_bundle(tmp_path, "three", {"only3.txt": "3\n"})
    unpack_bundles([b3], dest)
    assert {p.name for p in app.iterdir()} >= {"same.txt", "only1.txt", "only2.txt", "only3.txt"}
    unpack_bundles([b3], dest, overlay=False)
    assert sorted(p.name for p in (dest / "app").iterdir()) == ["only3.txt"]
    # private: nothing readable, let alone writable, by group or others
    for dirpath, dirnames, filenames in os.walk(os.path.realpath(dest)):
        for n in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, n))
            if not stat.S_ISLNK(st.st_mode):
                assert st.st_mode & 0o077 == 0, (dirpath, n, oct(st.st_mode))
    assert os.stat(dest.parent).st_mode & 0o077 == 0
    # only one generation is kept
    assert len([p for p in dest.parent.iterdir() if p.is_dir() and not p.is_symlink()]) == 1


def test_cleanup_leaves_nothing(bundles, tmp_path, local_base):
    base = local_base / "cleanup-base"
    base.mkdir()
    (base / "someone-elses-file").write_text("keep me\n")
    before = _leftovers(base)
    dest = base / "user" / "deep" / "shoal"
    unpack_bundles(bundles[-1:], dest)
    unpack_bundles(bundles[-1:], dest)  # a second generation
    assert (dest / "app" / "main.py").exists()
    removed = cleanup(dest)
    assert removed
    assert _leftovers(base) == before
    # and via the CLI, also for a root installed with the CLI
    r = subprocess.run([sys.executable, "-m", "shoal.cli.main", "bcast", str(bundles[-1]), "--to", str(dest),
                        "--transport", "local"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert (dest / "app").is_dir()
    r = subprocess.run([sys.executable, "-m", "shoal.cli.main", "bcast", "--cleanup", "--to", str(dest),
                        "--transport", "local"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert _leftovers(base) == before


def test_dest_that_is_a_foreign_directory_is_refused(tmp_path, local_base):
    b = _app_bundle(tmp_path, "foreign", {"a": "a"})
    dest = local_base / "foreign" / "shoal"
    dest.mkdir(parents=True)
    (dest / "precious.txt").write_text("mine\n")
    with pytest.raises(BundleError, match="exists and is not a shoal bundle root"):
        unpack_bundles([b], dest)
    assert (dest / "precious.txt").read_text() == "mine\n"


def test_cli_errors_name_what_and_where(tmp_path):
    r = subprocess.run([sys.executable, "-m", "shoal.cli.main", "bcast", str(tmp_path / "nope.tar.zst"),
                        "--to", str(tmp_path / "d")], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 1
    assert r.stderr.strip() == f"shoal: bcast: {tmp_path / 'nope.tar.zst'}: no such bundle file"
    r = subprocess.run([sys.executable, "-m", "shoal.cli.main", "bundle", "--out", str(tmp_path / "o"),
                        "--tiers", "app", "--app", str(tmp_path / "missing")], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 1
    assert r.stderr.strip() == f"shoal: bundle: --app {tmp_path / 'missing'}: not a directory"
