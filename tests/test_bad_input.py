"""Bad input and resource caps: long task-file lines, huge outputs and results, bad flags.

Each gets a clear one-line error (or a marked truncation) and the rest of the run goes on.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import subprocess

import pytest

from shoal import Executor
from shoal.agent import limits
from shoal.cli.run import BadLine, Line, parse_taskfile, shell_syntax_error

from .conftest import PY, ROOT

MiB = 1 << 20
LONG = 10 * MiB


def shoal(args: list[str], env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "shoal", *args], capture_output=True, cwd=ROOT,
                          timeout=kw.pop("timeout", 120), env={**os.environ, **(env or {})}, **kw)


# ---- task files ---------------------------------------------------------------------------

def test_ten_megabyte_lines_are_parsed_with_their_line_numbers():
    # shlex took ~20 minutes on such a line (quadratic in the length of a word)
    data = (b"echo first\n"
            + b"echo " + b"a" * LONG + b"\n"                       # 2: one huge word
            + b"echo '" + b"b" * LONG + b"\n"                      # 3: unbalanced quote
            + b'echo "' + b"\\c" * (LONG // 2) + b'"\n'            # 4: escapes in quotes
            + b"echo " + b"x\\\n" * 1000 + b"y\n"                  # 5..1005: continued
            + b"echo last\n")
    items = list(parse_taskfile(data, "big.txt"))
    assert [(type(i), i.number) for i in items] == [
        (Line, 1), (Line, 2), (BadLine, 3), (Line, 4), (Line, 5), (Line, 1006)]
    assert len(items[1].text) == 5 + LONG
    assert items[2].error == "big.txt:3: cannot parse: No closing quotation"
    assert items[4].text == "echo " + "x" * 1000 + "y"


@pytest.mark.parametrize("text", [
    "", "echo hi", "echo 'a b' \"c d\"", "echo it\\'s", "echo 'oops", 'echo "oops',
    'echo "a\\', "echo a\\", "echo a # 'not a quote", "echo a#'b", "echo '#' \"'\"",
    'echo "\\"" x', "echo '\\'", "echo \"a'b\" 'c\"d'", "\t# only a comment 'x",
])
def test_shell_syntax_check_agrees_with_shlex(text):
    try:
        shlex.split(text, comments=True)
        expected = None
    except ValueError as exc:
        expected = str(exc)
    assert shell_syntax_error(text) == expected


def test_shell_syntax_check_agrees_with_shlex_on_random_lines():
    rng = random.Random(10)
    for _ in range(20000):
        text = "".join(rng.choice("a '\"\\#\t\n") for _ in range(rng.randint(0, 14)))
        try:
            shlex.split(text, comments=True)
            expected = None
        except ValueError as exc:
            expected = str(exc)
        assert shell_syntax_error(text) == expected, repr(text)


def test_shoal_run_long_lines_end_to_end(tmp_path):
    tasks = tmp_path / "t.txt"
    word = "w" * 100_000  # long, but under Linux's 128 KiB for one argument: it runs
    tasks.write_bytes(b"echo first\n"
                      + b"echo " + b"a" * LONG + b"\n"      # valid, too long to exec
                      + b"echo '" + b"b" * LONG + b"\n"     # invalid: named by its number
                      + f"echo {word}\n".encode()
                      + b"echo last\n")
    r = shoal(["run", "-j", "2", "--no-progress", str(tasks)], timeout=60,
              env={"COLUMNS": "300"})  # the summary's table unwrapped
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 1
    assert sorted(out.split()) == sorted(["first", word, "last"])
    assert f"{tasks}:3: cannot parse: No closing quotation" in err
    assert "the command is too long to run (10.0 MiB in one argument" in err


# ---- captured output -------------------------------------------------------------------------

def test_output_over_the_cap_is_truncated_with_a_marker(tmp_path):
    tasks = tmp_path / "t.txt"
    tasks.write_text("head -c 50000000 /dev/zero | tr '\\0' x\n"
                     "echo fine\n"
                     "head -c 3000000 /dev/zero >&2; echo err-ok\n")
    r = shoal(["run", "-j", "2", "--no-progress", "--no-summary", str(tasks)],
              env={limits.OUTPUT_ENV: "1MiB"})
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    marker = b"[shoal: output truncated at 1 MiB of 47.7 MiB (50000000 bytes); the agent's --max-output]\n"
    assert b"x" * MiB + b"\n" + marker in out and out.count(b"x" * 1000) == MiB // 1000
    assert b"fine\n" in out
    assert b"err-ok" in out
    assert r.stderr.count(b"\0") == MiB  # stderr capped on its own
    assert b"of 2.9 MiB (3000000 bytes)" in r.stderr


def test_running_command_output_is_trimmed_to_the_cap(tmp_path):
    # The command itself watches its captured stdout (a memfd): past the cap, the agent
    # frees what is beyond it while the command still runs.
    line = ("head -c 20000000 /dev/zero; "
            "for i in $(seq 200); do set -- $(stat -L -c '%b %B' /proc/$$/fd/1); "
            "[ $(($1 * $2)) -le 2097152 ] && break; sleep 0.05; done; "
            "echo held $(($1 * $2)) >&2; echo more")
    tasks = tmp_path / "t.txt"
    tasks.write_text(line + "\n")
    r = shoal(["run", "-j", "1", "--no-progress", "--no-summary", str(tasks)],
              env={limits.OUTPUT_ENV: "1MiB"})
    assert r.returncode == 0, r.stderr[-2000:]
    held = int(r.stderr.split(b"held ")[1].split()[0])
    assert held <= 2 * MiB
    assert b"(20000005 bytes)" in r.stdout  # everything it wrote is counted
    assert r.stdout.count(b"\0") == MiB


def test_agent_max_output_flag(head, tmp_path):
    connfile, _proc, add_agent = head
    add_agent("--slots", "1", "--max-output", "100KiB")
    tasks = tmp_path / "t.txt"
    tasks.write_text("seq 1 100000\necho small\n")
    r = shoal(["run", "--connect", str(connfile), "--no-progress", "--no-summary", str(tasks)])
    assert r.returncode == 0, r.stderr[-2000:]
    total = len("".join(f"{i}\n" for i in range(1, 100001)))
    assert f"[shoal: output truncated at 100 KiB of {limits.format_size(total)} ({total} bytes)".encode() in r.stdout
    assert r.stdout.startswith(b"1\n2\n3\n")
    assert b"\nsmall\n" in r.stdout


# ---- Python results --------------------------------------------------------------------------

def blob(n: int) -> bytes:
    return b"r" * n


def test_result_over_the_cap_fails_the_task_and_the_run_goes_on(monkeypatch):
    monkeypatch.setenv(limits.RESULT_ENV, "1MiB")  # the local agent inherits it
    with Executor(workers=1) as ex:
        big = ex.submit(blob, 3 * MiB)
        with pytest.raises(limits.ResultTooLarge) as info:
            big.result(60)
        assert str(info.value).startswith(
            "the result of blob is 3.0 MiB, over the 1 MiB limit of this agent (--max-result)")
        assert ex.submit(blob, 10).result(60) == b"r" * 10
        with pytest.raises(limits.ResultTooLarge, match=r"blob \(a chunk of 4 calls\) is 1.5 MiB"):
            list(ex.map(blob, [400_000] * 4, chunksize=4))
        assert list(ex.map(blob, [1, 2, 3])) == [b"r", b"rr", b"rrr"]


# ---- agent flags -----------------------------------------------------------------------------

@pytest.mark.parametrize("flags, message", [
    (["--slots", "-1"], "--slots must be at least 1 (got -1"),
    (["--slots", "0"], "--slots must be at least 1 (got 0"),
    (["--workers", "-1"], "--workers must be 0 or more (got -1)"),
    (["--max-output", "lots"], "--max-output: 'lots' is not a size"),
    (["--max-result=-5M"], "--max-result: '-5M' is not a size"),
])
@pytest.mark.parametrize("how", ["shoal agent", "python -m shoal.agent"])
def test_bad_agent_flags_are_one_line_errors(tmp_path, how, flags, message):
    conn = str(tmp_path / "no-such-connection.json")
    if how == "shoal agent":
        argv = [PY, "-m", "shoal", "agent", "--connect", conn, *flags]
    else:
        argv = [PY, "-m", "shoal.agent", "--connection", conn, *flags]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{how}: {message}")


def test_bad_size_in_the_environment_is_named(tmp_path):
    r = subprocess.run([PY, "-m", "shoal.agent", "--connection", str(tmp_path / "c.json")],
                       capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env={**os.environ, limits.OUTPUT_ENV: "big"})
    assert r.returncode == 2
    assert r.stderr == f"python -m shoal.agent: {limits.OUTPUT_ENV}: 'big' is not a size " \
        "(give bytes, e.g. 1048576, 64MiB, 1.5GiB, or 'unlimited')\n"


def test_sizes():
    assert limits.parse_size("1048576") == MiB
    assert limits.parse_size("64MiB") == limits.parse_size("64M") == limits.parse_size("64m") == 64 * MiB
    assert limits.parse_size("1.5GiB") == 3 << 29
    assert limits.parse_size("2MB") == 2_000_000
    assert limits.parse_size("unlimited") is None
    assert limits.format_size(512) == "512 bytes"
    assert limits.format_size(64 * MiB) == "64 MiB"
    assert limits.format_size(1.2 * (1 << 30)) == "1.2 GiB"
    for bad in ("", "-1", "12 parsecs", "1e9"):
        with pytest.raises(ValueError, match="is not a size"):
            limits.parse_size(bad)


def test_shoal_run_counts_silent_and_talking_lines_alike(tmp_path):
    # Silent lines are counted on the executor's I/O thread, lines with output by the main
    # thread (shoal.cli.run): the summary and the exit status add both up, and every
    # output is written whole, a command's stdout before its stderr
    lines = []
    for i in range(300):
        lines.append(["true", "exit 3", f"echo out{i}", f"echo err{i} >&2",
                      f"echo both{i}; echo late{i} >&2; exit 2", "kill -9 $$"][i % 6])
    tasks = tmp_path / "t.txt"
    tasks.write_text("\n".join(lines) + "\n")
    r = shoal(["run", "-j", "2", "--no-progress", str(tasks)], timeout=120,
              env={"COLUMNS": "300"})
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 1
    assert sorted(out.split()) == sorted([f"out{i}" for i in range(2, 300, 6)]
                                         + [f"both{i}" for i in range(4, 300, 6)])
    for i in range(3, 300, 6):
        assert f"err{i}\n" in err
    for i in range(4, 300, 6):
        assert f"late{i}\n" in err
    # 300 tasks: 150 succeeded (true, echo, echo >&2), 150 failed (exit 3, exit 2, kill)
    assert re.search(r"│\s+300\s+│\s+150\s+│\s+150\s+│\s+0\s+│", err), err[-3000:]
    assert "exit status -9" in err and "exit status 3" in err and "exit status 2" in err
