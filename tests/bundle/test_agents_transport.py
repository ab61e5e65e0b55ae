"""`shoal bcast --transport agents`: delivery through a running runtime, one receiver per
agent, verified, all nodes or none. Three agents on this host stand in for three nodes
(``--to`` contains ``{agent}``, so each has its own copy)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shoal import Executor
from shoal.bundle import build, cleanup, python_executable, rerouted_environ
from shoal.bundle.agents import deliver_via_agents
from shoal.bundle.archive import sidecar_path

NAMES = ("ag1", "ag2", "ag3")


@pytest.fixture(scope="module")
def three_agents(tmp_path_factory, root, runtime_cls):
    """A head and three agents (one slot each), the agents running from the bundle root."""
    with runtime_cls(tmp_path_factory.mktemp("rt3")) as rt:
        for n in NAMES:
            rt.agent("--slots", "1", "--name", n, "--bundle", str(root))
        rt.wait_agents(len(NAMES))
        yield rt


def bcast(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shoal", "bcast", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def state(base: Path) -> dict[str, list[str]]:
    """What each node's directory holds (names, and where DEST points)."""
    out = {}
    for n in NAMES:
        d = base / n
        out[n] = sorted(p.name for p in d.iterdir()) if d.exists() else []
        if (d / "shoal").is_symlink():
            out[n].append("-> " + os.readlink(d / "shoal"))
    return out


def app_bundle(tmp: Path, name: str, text: str) -> Path:
    src = tmp / f"src-{name}"
    src.mkdir()
    (src / "version.txt").write_text(text)
    (res,) = build(tmp / f"out-{name}", tiers=(), app=src)
    return res.path


def test_bcast_through_three_agents_then_cleanup(three_agents, bundles, local_base):
    base = local_base / "via-agents"
    dest = f"{base}/{{agent}}/shoal"
    r = bcast(*map(str, bundles), "--to", dest, "--transport", "agents", "--connect",
              str(three_agents.connfile), "--json", "--chunk-mb", "4")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["status"] == 0 and rep["errors"] == []
    assert sorted(n["agent"] for n in rep["nodes"]) == list(NAMES) and all(n["ok"] for n in rep["nodes"])
    assert rep["bytes"] == sum(p.stat().st_size for p in bundles)
    for n in NAMES:
        d = base / n / "shoal"
        assert (d / "app" / "main.py").is_file() and d.is_symlink()
        for p in [d.resolve(), *d.resolve().rglob("*")][:500]:
            if not p.is_symlink():
                assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, p  # owner-only
        assert not [x for x in (base / n).iterdir() if "-in-" in x.name]  # incoming files deleted
    # a copy that arrived through the agents runs: numpy and the app come from it
    d = base / "ag2" / "shoal"
    code = ("import os, sys; sys.path.insert(0, os.environ['SHOAL_APP']); import numpy, myapp; "
            "print(numpy.__file__); print(myapp.WHERE)")
    out = subprocess.run([str(python_executable(d)), "-c", code], env=rerouted_environ(d),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert all(line.startswith(str(d)) for line in out.stdout.split()), out.stdout
    # auto picks the agents when SHOAL_CONNECT names a runtime; cleanup goes to every node
    env = {**os.environ, "SHOAL_CONNECT": str(three_agents.connfile)}
    r = bcast("--cleanup", "--to", dest, env=env)
    assert r.returncode == 0 and "via agents on 3 nodes" in r.stderr, r.stderr
    assert not base.exists(), list(base.rglob("*"))  # shared parent made by shoal: gone too


def test_corrupt_bundle_or_one_bad_node_switches_no_node(three_agents, tmp_path, local_base):
    base = local_base / "agents-corrupt"
    dest = f"{base}/{{agent}}/shoal"
    v1 = app_bundle(tmp_path, "v1", "v1\n")
    r = bcast(str(v1), "--to", dest, "--connect", str(three_agents.connfile))
    assert r.returncode == 0 and "via agents on 3 nodes" in r.stderr, r.stderr
    before = state(base)
    # 1. a flipped byte in a bundle: every node rejects it, nothing switches
    v2 = app_bundle(tmp_path, "v2", "v2\n" * 100000)
    bad = tmp_path / "bad" / v2.name
    bad.parent.mkdir()
    shutil.copy(v2, bad)
    shutil.copy(sidecar_path(v2), sidecar_path(bad))
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    r = bcast(str(bad), "--to", dest, "--connect", str(three_agents.connfile), "--chunk-mb", "0.0625")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    for n in NAMES:
        assert any(f"(agent {n}): {bad.name}: checksum mismatch" in ln and "corrupt or truncated" in ln
                   for ln in lines), r.stderr
    assert lines[-1] == "shoal bcast: nothing was switched on any node (all or none)"
    assert state(base) == before
    # 2. one node cannot install (its DEST is someone else's directory): the others do not switch
    foreign = base / "ag2" / "shoal"
    os.rename(foreign, base / "ag2" / "saved-link")
    foreign.mkdir()
    (foreign / "not-ours.txt").write_text("x")
    with Executor(connect=str(three_agents.connfile)) as ex:
        rep = deliver_via_agents(ex, [v2], dest)
    assert rep.status == 1
    assert len(rep.errors) == 2 and "(agent ag2):" in rep.errors[0] and "is not a shoal bundle root" in rep.errors[0]
    assert {n["agent"]: n["ok"] for n in rep.nodes} == {"ag1": True, "ag2": False, "ag3": True}
    shutil.rmtree(foreign)
    os.rename(base / "ag2" / "saved-link", foreign)
    assert state(base) == before
    for n in NAMES:
        assert (base / n / "shoal" / "app" / "version.txt").read_text() == "v1\n"
    # 3. and then the good bundle goes everywhere
    r = bcast(str(v2), "--to", dest, "--connect", str(three_agents.connfile))
    assert r.returncode == 0, r.stderr
    for n in NAMES:
        assert (base / n / "shoal" / "app" / "version.txt").read_text() == "v2\n" * 100000
    assert bcast("--cleanup", "--to", dest, "--connect", str(three_agents.connfile)).returncode == 0
    assert not base.exists()


def test_agents_on_one_host_share_one_receiver(three_agents, tmp_path, local_base):
    dest = local_base / "agents-shared" / "shoal"
    v1 = app_bundle(tmp_path, "v1", "shared\n")
    with Executor(connect=str(three_agents.connfile)) as ex:
        rep = deliver_via_agents(ex, [v1], dest)
        assert rep.status == 0, rep.errors
        receivers = [n for n in rep.nodes if not n.get("shared")]
        assert len(receivers) == 1 and len(rep.nodes) == 3
        assert (dest / "app" / "version.txt").read_text() == "shared\n"
        from shoal.bundle.agents import cleanup_via_agents

        assert cleanup_via_agents(ex, dest).status == 0
    assert not dest.parent.exists()


def test_an_agent_lost_mid_delivery_is_named_and_no_node_switches(runtime, bundles, local_base):
    base = local_base / "agents-lost"
    dest = f"{base}/{{agent}}/shoal"
    with runtime() as rt:
        victim = None
        for n in ("keep", "lose"):
            a = rt.agent("--slots", "1", "--name", n)
            victim = a if n == "lose" else victim
        rt.wait_agents(2)
        with Executor(connect=str(rt.connfile)) as ex:
            box: dict = {}
            t = threading.Thread(target=lambda: box.update(rep=deliver_via_agents(
                ex, bundles[:1], dest, chunk_size=1 << 18, window=2)))
            t.start()
            deadline = time.monotonic() + 60
            while not list((base / "lose").glob(".shoal.shoal-in-*/*")) and time.monotonic() < deadline:
                time.sleep(0.01)
            # the node leaves while chunks still arrive (SIGTERM: the head hears at once; after a
            # SIGKILL it would take the head's silence timeout, 30 s, to call the agent lost)
            assert time.monotonic() < deadline, "no chunk ever arrived"
            victim.send_signal(signal.SIGTERM)
            t.join(120)
            assert not t.is_alive()
        rep = box["rep"]
        assert rep.status == 1
        assert "(agent lose): " in rep.errors[0], rep.errors
        assert "agent lost during delivery" in rep.errors[0], rep.errors
        assert {n["agent"]: n["ok"] for n in rep.nodes} == {"keep": True, "lose": False}
        keep = base / "keep"
        assert not (keep / "shoal").exists()  # never switched
        assert [p.name for p in keep.iterdir()] in ([], [".shoal.shoal-made"])  # nothing staged left
    assert list((base / "lose").glob(".shoal.shoal-in-*"))  # what the lost node had received...
    for n in ("keep", "lose"):
        cleanup(base / n / "shoal")  # ...goes with the usual end-of-job cleanup
    assert not base.exists() or not list(base.rglob("*"))  # (base: whoever made it may go first)
    shutil.rmtree(base, ignore_errors=True)


def test_bundle_files_are_checked_before_anything_is_sent(three_agents, tmp_path, local_base):
    nosum = tmp_path / "x.tar.zst"
    nosum.write_bytes(b"junk")
    r = bcast(str(nosum), "--to", str(local_base / "never"), "--connect", str(three_agents.connfile))
    assert r.returncode == 1 and "no checksum file" in r.stderr
    digest = hashlib.sha256(b"junk").hexdigest()
    sidecar_path(nosum).write_text(f"{digest}  {nosum.name}\n")
    env = {k: v for k, v in os.environ.items() if k != "SHOAL_CONNECT"}
    r = bcast(str(nosum), "--to", str(local_base / "never"), "--transport", "agents", env=env)
    assert r.returncode == 1 and "no shoal runtime to deliver through" in r.stderr, r.stderr
    assert not (local_base / "never").exists()
    r = bcast(str(nosum), "--to", str(local_base / "never"), "--connect", str(tmp_path / "no-such.json"))
    assert r.returncode == 1 and "cannot connect to the runtime" in r.stderr, r.stderr
