"""`python -m shoal --prolog/--pythonpath/-p` (SCOOP's worker environment options), as real
processes: on the local default and through allocation start-up (`--hosts localhost:N`,
agents started by the local launcher through `python -m shoal.launch.cluster`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import ROOT

PY = sys.executable

# a task reads the prolog's variables, finds a program only its PATH entry has, and
# reports where it runs; the program itself prints what it sees
PROGRAM = """\
import os, subprocess
from shoal import futures

def probe(_):
    return (os.environ.get("SHOAL_T_FOO"), os.environ.get("SHOAL_T_GONE"),
            os.environ["PATH"].split(os.pathsep)[0], os.getcwd(),
            subprocess.run(["shoal-t-hello"], capture_output=True, text=True).stdout.strip())

if __name__ == "__main__":
    for row in sorted(set(futures.map(probe, range(4)))):
        print("task", *row)
    print("main", os.environ.get("SHOAL_T_FOO"), os.environ.get("SHOAL_T_GONE"))
"""


def shoal(args: list[str], cwd: str, env: dict[str, str] | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    return subprocess.run([PY, "-m", "shoal", *args], capture_output=True, text=True, cwd=cwd,
                          env=base, timeout=timeout)


@pytest.fixture
def prolog(tmp_path):
    """A prolog that exports one variable, unsets another, prepends a bin directory to
    PATH and prints a line; returns (script, bin dir)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    hello = bindir / "shoal-t-hello"
    hello.write_text("#!/bin/sh\necho hello from the prolog PATH\n")
    hello.chmod(0o755)
    script = tmp_path / "prolog.sh"
    script.write_text(f'export SHOAL_T_FOO="bar baz"\nunset SHOAL_T_GONE\n'
                      f'export PATH="{bindir}:$PATH"\necho prolog ran >&2\n'
                      "not_exported=1\n")
    (tmp_path / "prog.py").write_text(PROGRAM)
    return script, bindir


@pytest.mark.parametrize("where", ["local", "hosts"])
def test_prolog_environment_reaches_tasks_and_commands(tmp_path, prolog, where):
    script, bindir = prolog
    work = tmp_path / "work"
    work.mkdir()
    cluster = ["--hosts", "localhost:2"] if where == "hosts" else []
    r = shoal(["-n", "2", *cluster, "--prolog", "prolog.sh", "-p", str(work), "prog.py"],
              cwd=str(tmp_path), env={"SHOAL_T_GONE": "set before"})
    assert r.returncode == 0, r.stderr
    # every task: the exported value, the unset one gone, the PATH entry first, the
    # working directory of -p, and a command found through the new PATH
    assert r.stdout.splitlines() == [
        f"task bar baz None {bindir} {work} hello from the prolog PATH",
        "main None set before",  # the program keeps the environment it was started in
    ], r.stdout
    assert "prolog ran" in r.stderr  # its output goes to stderr


def test_pythonpath_reaches_tasks_only(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "shoal_t_mod.py").write_text("VALUE = 42\n")
    other = tmp_path / "lib2"
    other.mkdir()
    (other / "shoal_t_mod2.py").write_text("VALUE = 7\n")
    (tmp_path / "prog.py").write_text(
        "import subprocess, sys\n"
        "from shoal import futures\n"
        "def use(_):\n"
        "    import shoal_t_mod, shoal_t_mod2\n"
        "    out = subprocess.run([sys.executable, '-c', 'import shoal_t_mod; "
        "print(shoal_t_mod.VALUE)'], capture_output=True, text=True).stdout.strip()\n"
        "    return shoal_t_mod.VALUE + shoal_t_mod2.VALUE, out\n"
        "if __name__ == '__main__':\n"
        "    print(sorted(set(futures.map(use, range(4)))))\n"
        "    try:\n"
        "        import shoal_t_mod\n"
        "        print('main imports it')\n"
        "    except ImportError:\n"
        "        print('main cannot import it')\n")
    r = shoal(["-n", "2", "--pythonpath", "lib", "--pythonpath", f"{other}", "prog.py"],
              cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    # in tasks, and in a Python command a task runs (PYTHONPATH); not in the program
    assert r.stdout.splitlines() == ["[(49, '42')]", "main cannot import it"]
    r = shoal(["-n", "1", "prog.py"], cwd=str(tmp_path))
    assert r.returncode == 1 and "No module named 'shoal_t_mod'" in r.stderr


@pytest.mark.parametrize("body, said", [
    ("echo loading the compiler >&2\necho 'module: gcc/99 not found' >&2\n(exit 3)\n",
     "(exit status 3): module: gcc/99 not found"),
    ("exit 0\n", "(`exit`) before its environment could be read"),
])
def test_failing_prolog_is_one_line(tmp_path, body, said):
    (tmp_path / "bad.sh").write_text(body)
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    r = shoal(["-n", "1", "--prolog", "bad.sh", "prog.py"], cwd=str(tmp_path), timeout=60)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"shoal: prolog {tmp_path / 'bad.sh'} ")
    assert said in lines[0] and "on this machine" in lines[0]
    assert not (tmp_path / "ran").exists()  # nothing ran
    r = shoal(["-n", "1", "--prolog", "missing.sh", "prog.py"], cwd=str(tmp_path), timeout=60)
    assert r.returncode == 2
    assert r.stderr == f"shoal: prolog {tmp_path / 'missing.sh'}: no such file\n"


def test_failing_prolog_on_a_node_is_named(tmp_path):
    (tmp_path / "bad.sh").write_text("echo 'cannot load the toolchain' >&2\nfalse\n")
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    r = shoal(["--hosts", "localhost:1", "--prolog", "bad.sh", "prog.py"], cwd=str(tmp_path),
              timeout=60)
    assert r.returncode == 3
    lines = r.stderr.splitlines()
    assert lines[0] == (f"shoal: node localhost: prolog {tmp_path / 'bad.sh'} failed on "
                        "localhost (exit status 1): cannot load the toolchain"), r.stderr
    assert lines[1].startswith("shoal: no agent joined the head") and len(lines) == 2
    assert not (tmp_path / "ran").exists()


def test_scoop_flags_are_accepted_with_a_warning(tmp_path):
    (tmp_path / "prog.py").write_text(
        "from shoal import futures\nprint(sum(futures.map(abs, [-1, -2, 3])))\n")
    r = shoal(["-n", "2", "-b", "2", "--tunnel", "--nice", "5", "--backend", "TCP", "-v", "-v",
               "--python-interpreter", PY, "prog.py"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "6\n"
    warned = r.stderr.splitlines()
    assert [w.split(":")[1] for w in warned] == [
        " ignoring SCOOP's -b", " ignoring SCOOP's --tunnel", " ignoring SCOOP's --nice",
        " ignoring SCOOP's --backend", " ignoring SCOOP's -v",
        " ignoring SCOOP's --python-interpreter"], r.stderr


def test_worker_env_with_connect_is_refused(tmp_path):
    (tmp_path / "prog.py").write_text("print('ran')\n")
    r = shoal(["--connect", str(tmp_path / "none.json"), "--prolog", "x.sh", "prog.py"],
              cwd=str(tmp_path), timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("shoal: prolog=, pythonpath= and workdir= set up the agents")


def test_scoop_module_attributes(tmp_path):
    """`import shoal as scoop`: SCOOP's module attributes, in the program and in tasks."""
    (tmp_path / "prog.py").write_text(
        "import os, socket\n"
        "import shoal as scoop\n"
        "from shoal import futures\n"
        "def where(_):\n"
        "    return (scoop.worker, scoop.IS_ORIGIN, scoop.IS_RUNNING, scoop.SIZE, scoop.DEBUG,\n"
        "            scoop.worker == f'{socket.gethostname()}:{os.getpid()}'.encode())\n"
        "if __name__ == '__main__':\n"
        "    print(scoop.worker == f'{socket.gethostname()}:{os.getpid()}'.encode(),\n"
        "          scoop.IS_ORIGIN, scoop.IS_RUNNING, scoop.SIZE, scoop.DEBUG)\n"
        "    rows = set(futures.map(where, range(30)))\n"
        "    print(sorted({r[1:] for r in rows}), 1 <= len({r[0] for r in rows}) <= 3)\n")
    r = shoal(["-n", "3", "prog.py"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["True True True 3 False",
                                     "[(False, True, 3, False, True)] True"]
    # a plain program: no runtime yet, as SCOOP outside `python -m scoop`
    r = subprocess.run([PY, "-c", "import shoal as scoop\nprint(scoop.IS_RUNNING, scoop.IS_ORIGIN)\n"
                        "try:\n    scoop.SIZE\nexcept AttributeError as e:\n    print(e)"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    assert r.stdout.splitlines() == [
        "False True", "shoal.SIZE: no runtime yet (run the program with `python -m shoal`, "
        "or call a shoal.futures function first)"], r.stderr


SIZE_PROGRAM = """\
import os
from shoal import futures

def where(_):
    import time
    time.sleep(0.2)
    return os.getpid()

if __name__ == "__main__":
    print(len(set(futures.map(where, range(6), chunksize=1))))
"""


def test_scoop_hosts_form_counts_repeated_names(tmp_path):
    """SCOOP's `--hosts a a prog.py`: several names up to the program, a repeated name one
    slot per mention (two workers on localhost here), then the program and its own
    arguments untouched (its `--hosts x` is its own)."""
    (tmp_path / "prog.py").write_text(SIZE_PROGRAM + "    import sys; print(sys.argv[1:])\n")
    (tmp_path / "setup.sh").write_text("true\n")
    r = shoal(["--prolog", "setup.sh", "--hosts", "localhost", "localhost", "prog.py",
               "--hosts", "x"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["2", "['--hosts', 'x']"]
    bad = shoal(["--hosts", "n[1-", "prog.py"], cwd=str(tmp_path))
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        "shoal: --hosts 'n[1-': 'n[1-': bad host range (unbalanced brackets)")
