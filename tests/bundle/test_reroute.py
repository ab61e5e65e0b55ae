"""A rerouted interpreter imports everything from the node-local copy."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from shoal.bundle import BundleError, python_executable, rerouted_environ

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(root, code, base=None, **kw):
    env = rerouted_environ(root, base=base)
    return subprocess.run([str(python_executable(root)), "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, cwd=kw.get("cwd", "/"))


def test_imports_come_from_local_copy(root, tmp_path):
    shared = [tmp_path / f"shared{i}" for i in range(3)]
    for d in shared:
        d.mkdir()
    # a decoy numpy on the purged PYTHONPATH: it must not win
    (shared[0] / "numpy.py").write_text("raise SystemExit('imported the shared decoy')\n")
    base = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, shared)))
    code = ("import json, sys, numpy, email.mime.text, shoal, _ssl\n"
            "print(json.dumps({'files': [numpy.__file__, json.__file__, email.mime.text.__file__, "
            "shoal.__file__, _ssl.__file__], 'path': sys.path, 'exe': sys.executable}))")
    r = _run(root, code, base=base)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for f in out["files"]:
        assert f.startswith(str(root) + "/"), f
    assert all(p == "" or p.startswith(str(root)) for p in out["path"]), out["path"]
    assert out["exe"].startswith(str(root))


def test_no_file_syscall_touches_original_prefix(root, original_prefixes, tmp_path):
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace not installed (scripts/setup-bundle-deps.sh installs it)")
    extra = [tmp_path / f"p{i}" for i in range(10)]
    for d in extra:
        d.mkdir()
    base = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, extra)))
    env = rerouted_environ(root, base=base)
    trace = tmp_path / "trace"
    subprocess.run([strace, "-f", "-qq", "-e", "trace=%file", "-o", str(trace),
                    str(python_executable(root)), "-c", "import numpy"], env=env, check=True,
                   cwd=str(tmp_path), timeout=120)
    lines = trace.read_text().splitlines()
    assert len(lines) > 100  # the trace really recorded the start-up
    touched = [ln for ln in lines if any(f'"{p}' in ln for p in original_prefixes + [str(extra[0].parent) + "/p"])]
    assert touched == [], touched[:5]
    local = [ln for ln in lines if f'"{root}' in ln]
    assert len(local) > 50


def test_without_reroute_the_trace_does_touch_the_prefix(original_prefixes, tmp_path):
    # guards the test above: the same counting finds the shared prefix when not rerouted
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace not installed")
    trace = tmp_path / "trace"
    subprocess.run([strace, "-f", "-qq", "-e", "trace=%file", "-o", str(trace), sys.executable, "-c",
                    "import json"], check=True, cwd=str(tmp_path), timeout=120)
    text = trace.read_text()
    assert any(f'"{p}' in text for p in original_prefixes)


def test_shell_exports_and_trap(root, bundles, local_base, tmp_path):
    from shoal.bundle import unpack_bundles

    dest = local_base / "trap-test" / "shoal"
    unpack_bundles(bundles[-1:], dest)  # the app tier alone: cheap
    # an env root needs an interpreter: borrow the shared one's bin through overlay
    unpack_bundles(bundles[:1], dest)
    script = (f'eval "$({sys.executable} -m shoal.cli.main env --root {dest} --trap)"\n'
              'python -c "import json, os; print(json.__file__); print(os.environ[\'SHOAL_APP\'])"\n'
              'echo "PYTHONPATH=${PYTHONPATH-unset}"\n')
    env = dict(os.environ, PYTHONPATH=REPO)  # the shared-FS shoal, as a job script would have it
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    json_file, app, pp = r.stdout.split()
    assert json_file.startswith(str(dest) + "/lib/")
    assert app == f"{dest}/app"
    assert pp == "PYTHONPATH=unset"
    # the EXIT trap removed the copy and the directory made for it
    assert not os.path.lexists(dest)
    assert not (local_base / "trap-test").exists()


def test_env_refuses_a_root_without_interpreter(tmp_path):
    with pytest.raises(BundleError, match="not an unpacked bundle root"):
        rerouted_environ(tmp_path)
    r = subprocess.run([sys.executable, "-m", "shoal.cli.main", "env", "--root", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert re.search(r"shoal: env: .* not an unpacked bundle root", r.stderr)
