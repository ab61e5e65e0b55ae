"""Executor.map's live progress line (shoal.client.progress), drawn on a real
pseudo-terminal by a real program, and absent when stderr is not a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections.abc import Callable

import pytest

from shoal import Executor
from shoal.client.progress import MapProgress, ProgressView, progress_delay
from shoal.task.future import ShoalFuture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\r")


def run_on_pty(argv: list[str], env: dict[str, str] | None = None, timeout: float = 60.0,
               interrupt_when: Callable[[bytes], bool] | None = None, stdout_pty: bool = False,
               ) -> tuple[int, bytes, bytes]:
    """Run ``argv`` with its stderr (and its stdout too with ``stdout_pty``; else a
    pipe) on a new pseudo-terminal 160 columns wide; returns (exit status, stdout, what
    the terminal got). ``interrupt_when``: send SIGINT once it says True of what the
    terminal got so far."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    env.pop("NO_COLOR", None)
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                         stdout=slave if stdout_pty else subprocess.PIPE, stderr=slave,
                         env=env, cwd=ROOT)
    os.close(slave)
    got = bytearray()
    start = time.monotonic()
    interrupted = False
    try:
        while time.monotonic() - start < timeout:
            if interrupt_when is not None and not interrupted and interrupt_when(bytes(got)):
                p.send_signal(2)
                interrupted = True
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed its end
                    break
                if not chunk:
                    break
                got += chunk
            elif p.poll() is not None:
                break
        out = p.stdout.read() if p.stdout else b""
        rc = p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return rc, out, bytes(got)


def plain(term: bytes) -> str:
    """The terminal's bytes without escape sequences and carriage returns."""
    return ANSI.sub(b"\n", term).decode(errors="replace")


PROGRAM = textwrap.dedent("""
    import sys, time
    from shoal import Executor

    def slow(x):
        time.sleep(0.1)
        if x < 0:
            raise ValueError("negative")
        return x

    mode = sys.argv[1]
    with Executor(workers=2) as ex:
        if mode == "auto":          # 3 s: long enough for the automatic line (1.5 s)
            print(sum(ex.map(slow, range(60), chunksize=1)))
        elif mode == "failed":      # asked for: drawn at once; the last item fails
            try:
                list(ex.map(slow, [*range(9), -1], chunksize=1, progress=True))
            except ValueError as exc:
                print("raised", exc)
        elif mode == "print":       # stdout is a pipe: what is printed meanwhile stays there
            for r in ex.map(slow, range(40), chunksize=1, progress=True):
                print("item", r, flush=True)
        elif mode == "quiet":       # a short map, and a long one with progress=False
            print(sum(ex.map(slow, range(4), chunksize=1)))
            print(sum(ex.map(slow, range(40), chunksize=1, progress=False)))
""")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("progress") / "prog.py"
    path.write_text(PROGRAM)
    return str(path)


def last_count(text: str, total: int) -> int:
    counts = [int(m) for m in re.findall(rf"(\d+)/{total}\b", text)]
    assert counts, f"no progress count in {text!r}"
    return counts[-1]


def test_map_progress_drawn_on_a_terminal_reaches_the_total(program):
    rc, out, term = run_on_pty([PY, program, "auto"])
    assert rc == 0, term[-2000:]
    assert out.split() == [b"1770"]
    text = plain(term)
    assert "map slow" in text
    assert last_count(text, 60) == 60
    counts = [int(m) for m in re.findall(r"(\d+)/60\b", text)]
    assert counts[0] < 60, "redrawn while it ran, not only at the end"
    assert counts == sorted(counts)
    assert "queued 0" in text and "items/s" in text and "ETA" in text
    assert re.search(r"running [12]\b", text), "the head's running count while it ran"
    assert "failed 0" in text


def test_failed_items_are_counted(program):
    rc, out, term = run_on_pty([PY, program, "failed"])
    assert rc == 0, term[-2000:]
    assert b"raised negative" in out
    text = plain(term)
    assert last_count(text, 10) == 10
    assert "failed 1" in text


def test_output_printed_meanwhile_stays_on_a_redirected_stdout(program):
    rc, out, term = run_on_pty([PY, program, "print"])
    assert rc == 0, term[-2000:]
    assert out.decode().splitlines() == [f"item {i}" for i in range(40)]
    text = plain(term)
    assert not re.search(r"item \d", text) and last_count(text, 40) == 40


def test_short_maps_and_progress_false_draw_nothing(program):
    rc, out, term = run_on_pty([PY, program, "quiet"])
    assert rc == 0, term[-2000:]
    assert out.split() == [b"6", b"780"]
    assert "map slow" not in plain(term)


def test_nothing_when_stderr_is_not_a_terminal(program):
    p = subprocess.run([PY, program, "auto"], capture_output=True, timeout=60, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [b"1770"]
    assert p.stderr == b""


def test_shoal_progress_0_turns_it_off_and_python_m_shoal_shows_it(tmp_path):
    prog = tmp_path / "scoop.py"
    prog.write_text(textwrap.dedent("""
        import time
        from shoal import futures

        def slow(x):
            time.sleep(0.1)
            return x * 2

        if __name__ == "__main__":
            print(sum(futures.map(slow, range(60))))  # 3 s: drawn from 1.5 s on
    """))
    rc, out, term = run_on_pty([PY, "-m", "shoal", "-n", "2", str(prog)])
    assert rc == 0, term[-2000:]
    assert out.split() == [b"3540"]
    assert last_count(plain(term), 60) == 60  # futures.map: chunked, counted in items
    rc, out, term = run_on_pty([PY, "-m", "shoal", "-n", "2", str(prog)],
                               env={"SHOAL_PROGRESS": "0"})
    assert rc == 0 and out.split() == [b"3540"]
    assert "/60" not in plain(term)


def test_progress_settings_are_checked():
    with pytest.raises(ValueError, match="progress must be True, False or None"):
        Executor(progress="yes")  # type: ignore[arg-type]
    assert progress_delay(False) is None
    assert progress_delay(True) == 0.0


class _Tty:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_automatic_means_a_terminal_unless_the_environment_says(monkeypatch):
    monkeypatch.delenv("SHOAL_PROGRESS", raising=False)
    assert progress_delay(None, _Tty(False)) is None
    assert progress_delay(None, _Tty(True)) == pytest.approx(1.5)
    monkeypatch.setenv("SHOAL_PROGRESS", "0")
    assert progress_delay(None, _Tty(True)) is None
    monkeypatch.setenv("SHOAL_PROGRESS", "1")
    assert progress_delay(None, _Tty(False)) == 0.0


def test_counts_take_chunks_out_of_order_and_failures():
    """Chunks of 3 items (the last of 1): done futures past the first unfinished one
    count, and a future is dropped once counted in order."""
    futs = [ShoalFuture(i, None) for i in range(4)]  # 3 + 3 + 3 + 1 = 10 items
    mp = MapProgress.__new__(MapProgress)  # the counting part only: no thread, no owner
    mp._futs, mp._chunk, mp._nitems = list(futs), 3, 10
    mp._lo = mp._done_lo = mp._failed_lo = 0
    assert mp.counts() == (0, 0, 4)
    futs[3].set_result(None)
    futs[1].set_exception(ValueError("x"))
    assert mp.counts() == (4, 3, 4)
    futs[0].set_result(None)
    assert mp.counts() == (7, 3, 2)
    assert mp._futs[:2] == [None, None]
    futs[2].set_result(None)
    assert mp.counts() == (10, 3, 0)


def test_view_counts_and_rate():
    """The renderer alone: queued is what is neither done nor running; rate and ETA
    from how done grew."""
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    console = Console(file=buf, force_terminal=False, width=160)
    view = ProgressView("work", 100, console=console, started=time.monotonic() - 2.0)
    view.update(50, running=4, failed=2)
    view.start()
    view.stop()
    text = buf.getvalue()
    assert "50/100" in text and "running 4" in text and "failed 2" in text and "queued 46" in text
    assert re.search(r"\b2[45] tasks/s", text) and "ETA 0:00:02" in text


def test_shoal_run_draws_the_same_line_on_a_terminal(tmp_path) -> None:
    # `shoal run` uses the Executor's live line: done/total, running, failed, queued, rate
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join("sleep 0.05\n" for _ in range(20)) + "exit 3\n")
    rc, out, term = run_on_pty([sys.executable, "-m", "shoal.cli.main", "run", "-j", "2",
                                str(tasks)])
    text = plain(term)
    assert rc == 1, text
    assert "shoal run" in text and "21/21" in text, text
    assert "failed 1" in text and "queued 0" in text and "tasks/s" in text, text
