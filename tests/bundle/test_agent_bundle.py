"""`shoal head/agent --bundle ROOT`: the runtime's own processes run from the local copy."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal import Executor
from shoal.bundle import python_executable, rerouted_environ, unpack_bundles

# Evaluated in a worker (``eval`` is a builtin, so it travels by reference and the probe
# does not depend on where this test module can be imported from).
PROBE = """{
    "prefix": __import__("sys").prefix,
    "executable": __import__("sys").executable,
    "shoal": __import__("shoal").__file__,
    "numpy": __import__("numpy").__file__,
    "myapp": __import__("myapp").WHERE,
    "root_env": __import__("os").environ["SHOAL_BUNDLE_ROOT"],
    "pythonhome": __import__("os").environ.get("PYTHONHOME"),
    "pid": __import__("os").getpid(),
    "agent": __import__("os").getppid(),
    "agent_exe": __import__("os").path.realpath("/proc/%d/exe" % __import__("os").getppid()),
}"""


def inside(path: str, root: Path) -> bool:
    """``path`` lies in ``root`` (the symlink as given, or the generation it points to)."""
    p = os.path.abspath(path)
    return any(p == str(r) or p.startswith(str(r) + os.sep) for r in (root, root.resolve()))


def test_head_and_agents_run_from_the_bundle(root, runtime):
    pytest.importorskip("numpy")
    with runtime(head_args=["--bundle", str(root)]) as rt:
        agents = [rt.agent("--slots", "1", "--bundle", str(root)) for _ in range(2)]
        rt.wait_agents(2)
        head_exe = os.path.realpath(f"/proc/{rt.head.pid}/exe")
        assert inside(head_exe, root), head_exe
        with Executor(connect=str(rt.connfile)) as ex:
            seen = [f.result(timeout=60) for f in [ex.submit(eval, PROBE) for _ in range(8)]]
        workers = {s["pid"] for s in seen}
        assert {s["agent"] for s in seen} <= {a.pid for a in agents}  # exec kept the agent's PID
        for s in seen:
            for key in ("prefix", "executable", "shoal", "numpy", "myapp", "root_env", "agent_exe"):
                assert inside(s[key], root), (key, s[key], root)
            assert s["pythonhome"] == str(root)
            assert "/app/" in s["myapp"]  # tier 3 is on the workers' path, not the cwd
    assert not rt.leftovers(workers), "processes outlived the runtime"


def test_an_already_rerouted_agent_is_not_executed_again(root, runtime):
    """After `eval "$(shoal env --root ROOT)"`, `shoal agent --bundle ROOT` just runs."""
    with runtime() as rt:
        a = rt.agent("--slots", "1", "--bundle", str(root), python=str(python_executable(root)),
                     env=rerouted_environ(root))
        rt.wait_agents(1)
        argv = Path(f"/proc/{a.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[1:4] == [b"-m", b"shoal", b"agent"], argv  # not the re-exec's `-c ...`
        with Executor(connect=str(rt.connfile)) as ex:
            s = ex.submit(eval, PROBE).result(timeout=60)
        assert inside(s["shoal"], root) and inside(s["numpy"], root) and s["agent"] == a.pid


def test_agent_bundle_errors_are_one_line(bundles, tmp_path):
    """Not a root, an empty directory, a bundle file, a root without shoal in it."""
    connfile = tmp_path / "run.json"
    connfile.write_text("{}")
    no_shoal = tmp_path / "tier1-only" / "shoal"
    unpack_bundles(bundles[:1], no_shoal)  # the interpreter, but no packages
    (tmp_path / "empty").mkdir()
    cases = {
        tmp_path / "missing": "no such directory (run `shoal bcast BUNDLE... --to",
        tmp_path / "empty": "not an unpacked bundle root (no bin/python3 in it",
        bundles[0]: "a file, not an unpacked bundle root",
        no_shoal: "the bundle has no shoal package",
    }
    for where, msg in cases.items():
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "shoal", "agent", "--connect", str(connfile),
                            "--bundle", str(where)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (where, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("shoal agent: --bundle ") and msg in lines[0], r.stderr
        assert time.monotonic() - t0 < 30
    r = subprocess.run([sys.executable, "-m", "shoal", "head", "--connection-file", str(tmp_path / "h.json"),
                        "--bundle", str(tmp_path / "empty")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("shoal head: --bundle ") and not (tmp_path / "h.json").exists()
