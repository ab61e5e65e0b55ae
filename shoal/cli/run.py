"""`shoal run TASKFILE`: one shell command per line, run in parallel on shoal.

Lines run with ``/bin/sh -c`` (as GNU parallel and HyperQueue do); a line that is one
simple command (plain words, no shell builtin) is run by the agent without the shell, with
the same result (shoal.agent.spawnline). Blank lines and ``#`` comments are skipped; a line ending in a backslash continues on the next. A line that
cannot be a shell command (unbalanced quotes, NUL bytes, undecodable bytes) is reported
with its line number and does not stop the others.

A comment ``#shoal: cores=4 gpus=1 memory=2G`` (or ``ranks=8 nodes=2``, ``exclusive``) on
the line(s) before a command gives that command its resources (the file stays a valid sh
script); see docs/resources.md. ``estimate=5m`` states its expected run time (longest
first; docs/sim.md). A directive with an unknown key or a bad value is
reported with its line number, and the command it names is not run.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from shoal.client import options as O


@dataclass
class Line:
    number: int     # first line of the command in the file (1-based)
    text: str
    # from ``#shoal:`` directives: keywords of Executor.options (cores, gpus, memory in
    # bytes, ranks, nodes, exclusive); empty: the defaults and --cores/--gpus-per-task
    resources: dict[str, Any] = field(default_factory=dict)


@dataclass
class BadLine:
    number: int
    error: str


# ``#shoal: key=value ...``: resources of the next command. "# shoal:" is taken too (a
# directive that silently did nothing would run the command with the wrong resources).
_DIRECTIVE = re.compile(r"\s*#\s*shoal:(.*)", re.DOTALL)
# resources, and ``estimate`` (the command's expected run time: longest first)
DIRECTIVE_KEYS = (*O.RESOURCE_KEYS, "estimate")
_FLAG_VALUES = {"": True, "true": True, "yes": True, "1": True,
                "false": False, "no": False, "0": False}


def parse_directive(text: str, into: dict[str, Any]) -> str | None:
    """Add the ``key=value`` words of one directive's text to ``into``; the reason it is
    invalid (then ``into`` may hold part of it), or None."""
    for word in text.split():
        key, eq, value = word.partition("=")
        if key not in DIRECTIVE_KEYS:
            return f"unknown resource {key!r} (known: {', '.join(DIRECTIVE_KEYS)})"
        if key in into:
            return f"{key} given twice for the same command"
        try:
            if key == "exclusive":
                if value.lower() not in _FLAG_VALUES:
                    raise ValueError(f"exclusive takes no value (or true/false), not {value!r}")
                into[key] = _FLAG_VALUES[value.lower()]
            elif not eq or not value:
                raise ValueError(f"{key} needs a value ({key}=N)")
            elif key == "memory":
                into[key] = O.memory_value(value)
            elif key == "estimate":
                into[key] = O.estimate_value(value)
            else:
                try:
                    n = int(value)
                except ValueError:
                    n = value  # count_value names it
                into[key] = O.count_value(n, key)
        except ValueError as exc:
            return str(exc)
    return None


def parse_taskfile(data: bytes, source: str = "-") -> Iterator[Line | BadLine]:
    """Commands of a task file, in order, with their line numbers (and ``#shoal:``
    directives' resources)."""
    pending: list[str] = []
    start = 0
    resources: dict[str, Any] = {}
    directive_at = 0                   # line of the first directive of the next command
    directive_error: BadLine | None = None
    for number, raw in enumerate(data.split(b"\n"), 1):
        raw = raw.rstrip(b"\r")
        try:
            text = raw.decode()
        except UnicodeDecodeError as exc:
            yield BadLine(number, f"{source}:{number}: not valid UTF-8 ({exc.reason} at byte {exc.start})")
            pending = []
            # a directive before it was meant for it: not for the next command
            resources, directive_at, directive_error = {}, 0, None
            continue
        if not pending:
            start = number
            stripped = text.strip()
            if stripped.startswith("#"):
                d = _DIRECTIVE.fullmatch(text)
                if d is not None:
                    directive_at = directive_at or number
                    if directive_error is None:
                        problem = parse_directive(d.group(1), resources)
                        if problem is not None:
                            directive_error = BadLine(number, f"{source}:{number}: #shoal: {problem}")
                continue
            if not stripped:
                continue
        if text.endswith("\\") and not text.endswith("\\\\"):
            pending.append(text[:-1])
            continue
        pending.append(text)
        command = "".join(pending)  # backslash-newline joins, as in sh
        pending = []
        res, resources, bad_directive, directive_error = resources, {}, directive_error, None
        if directive_at and bad_directive is None:
            try:  # what only the whole set can say (nodes without ranks, ...)
                O.resource_opts(res.get("gpus"), res.get("memory"), res.get("ranks"),
                                res.get("nodes"), res.get("exclusive", False))
            except ValueError as exc:
                bad_directive = BadLine(directive_at, f"{source}:{directive_at}: #shoal: {exc}")
        directive_at = 0
        if bad_directive is not None:
            yield BadLine(bad_directive.number,
                          f"{bad_directive.error}; the command on line {start} is not run")
            continue
        if "\x00" in command:
            yield BadLine(start, f"{source}:{start}: contains a NUL byte")
            continue
        problem = shell_syntax_error(command)
        if problem is not None:
            yield BadLine(start, f"{source}:{start}: cannot parse: {problem}")
            continue
        yield Line(start, command.strip(), res)
    if pending:
        yield BadLine(start, f"{source}:{start}: file ends inside a line continuation")
    elif directive_at:
        yield BadLine(directive_at, f"{source}:{directive_at}: #shoal: directive before no command "
                                    "(it applies to the next command line)")


# What ``shlex.split(text, comments=True)`` accepts, as one regular expression. shlex
# builds each word a character at a time (``self.token += c`` on an attribute, which
# CPython cannot extend in place), so one long word costs time quadratic in its length: a
# 2 MB line took 2 minutes and a 10 MB one about 20. Here every alternative starts with a
# different character and every quantifier is possessive, so the match never backtracks
# and runs in time linear in the line. Outside quotes a backslash escapes any character
# and ``#`` starts a comment to the end of the line (shlex also takes ``#`` inside a word
# as a comment: kept, so the same lines are accepted as before); inside double quotes a
# backslash escapes the next character; single quotes escape nothing.
_SHELL_WORDS = re.compile(
    r"""(?:[^#\\'"]++|\\.|'[^']*+'|"(?:[^"\\]++|\\.)*+"|\#[^\n]*+\n?)*+""", re.DOTALL)
_OPEN_DOUBLE = re.compile(r'"(?:[^"\\]++|\\.)*+', re.DOTALL)


def shell_syntax_error(text: str) -> str | None:
    """Why ``text`` cannot be split into shell words (shlex's message), or None.

    The verdict and the message are those of ``shlex.split(text, comments=True)``, in
    time linear in ``len(text)``.
    """
    end = _SHELL_WORDS.match(text).end()
    if end == len(text):
        return None
    # What stops the match is an opening quote never closed or a backslash at the end.
    if text[end] == '"':
        inner = _OPEN_DOUBLE.match(text, end).end()
        if inner < len(text):  # a backslash as the last character, inside the quotes
            return "No escaped character"
    elif text[end] == "\\":
        return "No escaped character"
    return "No closing quotation"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run one shell command per line of a task file",
                       description=__doc__)
    p.add_argument("taskfile", help="file of commands, one per line ('-' for stdin)")
    p.add_argument("-j", "--slots", type=int, default=None,
                   help="cores to use on the local agent (default: all cores; in an allocation: at most N per node)")
    p.add_argument("--cores-per-task", type=int, default=1, metavar="N",
                   help="cores each command occupies (default 1; a '#shoal: cores=N' line "
                        "before a command sets its own)")
    p.add_argument("--gpus-per-task", type=int, default=None, metavar="N",
                   help="GPUs each command occupies (default none; '#shoal: gpus=N' sets one "
                        "command's)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--output-dir", metavar="DIR",
                     help="write each command's stdout/stderr to DIR/LINE.out and DIR/LINE.err")
    out.add_argument("--stream", action="store_true",
                     help="let commands write straight to this terminal (interleaved)")
    out.add_argument("--discard-output", action="store_true", help="discard command output")
    p.add_argument("--connect", metavar="FILE", help="run on a running head (shoal head)")
    from shoal.launch.flags import add_cluster_options

    add_cluster_options(p)
    p.add_argument("--retries", type=int, default=0, metavar="N",
                   help="run a failed command (non-zero exit, lost, timed out) again up to N "
                        "times, with backoff (default 0)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="kill a command that runs longer (SIGTERM to its process group, then "
                        "SIGKILL); it fails, or is retried")
    p.add_argument("--journal", metavar="FILE",
                   help="record finished lines in FILE (SQLite); the same command again after a "
                        "crash skips them (a line is its number and text)")
    p.add_argument("--trace", metavar="FILE",
                   help="record every command's attempts (where, when, which cores) in FILE; "
                        "the summary adds utilization and setup time from it; `shoal trace "
                        "FILE` reports on it (docs/trace.md)")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show the live progress bar even when stderr is not a terminal")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--no-summary", action="store_true", help="no summary table at the end")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    try:
        data = sys.stdin.buffer.read() if args.taskfile == "-" else open(args.taskfile, "rb").read()
    except OSError as exc:
        _say(f"cannot read task file {args.taskfile!r}: {exc.strerror}")
        return 2
    if args.cores_per_task < 1:
        _say("--cores-per-task must be at least 1")
        return 2
    if args.gpus_per_task is not None and args.gpus_per_task < 1:
        _say(f"--gpus-per-task must be at least 1, not {args.gpus_per_task}")
        return 2
    if args.slots is not None and args.slots < 1:
        _say("-j/--slots must be at least 1")
        return 2
    if args.slots is not None and args.cores_per_task > args.slots:
        _say(f"--cores-per-task {args.cores_per_task} exceeds -j {args.slots}")
        return 2
    if args.retries < 0:
        _say(f"--retries must be at least 0, not {args.retries}")
        return 2
    if args.timeout is not None and not (args.timeout > 0 and args.timeout != float("inf")):
        _say(f"--timeout must be a number of seconds > 0, not {args.timeout}")
        return 2
    if args.connect and args.journal:
        _say("--journal belongs to the head when joining one: give it to `shoal head --journal`")
        return 2
    if args.connect and args.trace:
        _say("--trace belongs to the head when joining one: give it to `shoal head --trace`")
        return 2
    lines: list[Line] = []
    bad: list[BadLine] = []
    for item in parse_taskfile(data, args.taskfile):
        if isinstance(item, Line):
            lines.append(item)
        else:
            bad.append(item)
            _say(item.error)
    del data
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    return _execute(args, lines, bad)


# The live progress bar is redrawn at most this often, from counts kept as results come
# in: nothing per task but two additions (rich's Progress.update cost 45 us a task).
PROGRESS_S = 0.125


def _execute(args: argparse.Namespace, lines: list[Line], bad: list[BadLine]) -> int:
    from shoal import Command, Executor, ExecutorError
    from shoal.task import errors  # errors.HeadLost: made on first use (a failure)

    show_progress = sys.stderr.isatty() if args.progress is None else args.progress
    policy: dict[str, Any] = {"retries": args.retries, "task_timeout": args.timeout}
    try:
        if args.connect:
            ex = Executor(connect=args.connect, **policy)
        else:
            from shoal.launch.flags import cluster_kwargs

            # slots=None: all cores here, or each node's CPUs in an allocation (-j caps them)
            ex = Executor(workers=0, slots=args.slots, journal=args.journal, trace=args.trace,
                          **policy, **cluster_kwargs(args))
    except ValueError as exc:
        _say(str(exc))
        return 2
    except ExecutorError as exc:
        _say(str(exc))
        return 3
    slots = max(1, ex.slots)
    t0 = time.monotonic()
    failed: list[tuple[Line, str]] = []
    ok = 0  # set from counts at the end
    if args.stream:
        stdout = stderr = "inherit"
    elif args.discard_output:
        stdout = stderr = "devnull"
    else:
        stdout = stderr = "capture"
    # Finished futures come back through a done callback, run on the executor's I/O thread
    # a batch at a time. A command that wrote nothing is only counted there: this thread
    # wakes for output to write, a task that raised, the bar's tick and the end, not
    # once per RESULTS message (each wake-up is a futex and a switch, ~50 us on a small VM:
    # W3 at 400 slots brings ~2 a second per slot). No waiter is registered per future,
    # as concurrent.futures.as_completed would.
    finished: deque[tuple[Line, Any, BaseException | None]] = deque()
    ready = threading.Event()
    tally = threading.Lock()
    total = len(lines)
    counts = [0, 0]  # done, succeeded (under tally)
    line_of: dict[Any, Line] = {}

    def count(line: Line, why: str | None) -> bool:
        """One line done (``why``: how it failed, None if it succeeded); True for the last."""
        with tally:
            counts[0] += 1
            if why is None:
                counts[1] += 1
            else:
                failed.append((line, why))
            return counts[0] == total

    def on_done(fut: Any) -> None:
        line = line_of.pop(fut)
        exc = cf.CancelledError() if fut.cancelled() else fut.exception()
        res = fut.result() if exc is None else None
        if exc is None and not res.stdout and not res.stderr:
            if count(line, None if res.returncode == 0 else f"exit status {res.returncode}"):
                ready.set()
            return
        finished.append((line, res, exc))
        ready.set()

    progress = None
    try:
        keyed = ex.journal_keys
        per_task = {} if args.gpus_per_task is None else {"gpus": args.gpus_per_task}
        cores_opt = args.cores_per_task
        plain = cores_opt == 1 and not per_task and not keyed
        submit = ex.submit
        for line in lines:
            if args.output_dir:
                base = os.path.join(args.output_dir, str(line.number))
                stdout, stderr = base + ".out", base + ".err"
            if plain and not line.resources:
                fut = submit(Command(line.text, stdout=stdout, stderr=stderr))
            else:
                res = {"cores": cores_opt, **per_task, **line.resources}
                cmd = Command(line.text, stdout=stdout, stderr=stderr, cores=res["cores"])
                if keyed:  # the line's identity in the journal: its number and text
                    from shoal.transport.keys import line_key

                    res["key"] = line_key(line.number, line.text)
                fut = ex.options(**res).submit(cmd) if len(res) > 1 else submit(cmd)
            line_of[fut] = line
            fut.add_done_callback(on_done)
        if show_progress:
            progress = _Progress(total)
        out = sys.stdout.buffer
        err_out = sys.stderr.buffer
        done = 0
        while done < total:
            # a timeout, so that Ctrl-C is seen and the bar's clock moves
            ready.wait(PROGRESS_S if progress is not None else 1.0)
            ready.clear()
            wrote = False
            while finished:
                line, res, exc = finished.popleft()
                if exc is not None:
                    if isinstance(exc, errors.HeadLost):
                        raise exc
                    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                else:
                    why = None if res.returncode == 0 else f"exit status {res.returncode}"
                    if res.stdout:
                        out.write(res.stdout)
                        wrote = True
                    if res.stderr:
                        if wrote:  # this command's stdout before its stderr
                            out.flush()
                            wrote = False
                        err_out.write(res.stderr)
                        err_out.flush()
                count(line, why)
            if wrote:
                out.flush()
            done, ok = counts
            if progress is not None:
                progress.show(done, min(slots, total - done), len(failed))
        if progress is not None:
            progress.close(done, 0, len(failed))
            progress = None
    except KeyboardInterrupt:
        if progress is not None:
            progress.close(None)
        _say("interrupted; stopping all tasks")
        ex.shutdown(wait=False, cancel_futures=True)
        ex._terminate()
        return 130
    except errors.HeadLost as exc:
        if progress is not None:
            progress.close(None)
        _say(str(exc).splitlines()[0])
        return 3
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
        ex._terminate()
    wall = time.monotonic() - t0
    if not args.no_summary:
        from rich.console import Console

        err = Console(stderr=True, highlight=False)
        _summary(err, len(lines), ok, failed, bad, wall)
        if args.trace:  # the head wrote it and exited with the executor
            from shoal.trace.report import brief

            for text in brief(args.trace):
                err.print(text, markup=False, soft_wrap=True)
    return 1 if failed or bad else 0


class _Progress:
    """The live line (shoal.client.progress: done, running, failed, queued, rate, ETA),
    redrawn from counts at most every PROGRESS_S."""

    def __init__(self, total: int) -> None:
        from shoal.client.progress import ProgressView

        self.view = ProgressView("shoal run", total)
        self.view.start()
        self.shown = -1.0

    def show(self, done: int, running: int, failed: int) -> None:
        now = time.monotonic()
        if now - self.shown >= PROGRESS_S:
            self.shown = now
            self.view.update(done, running=running, failed=failed)

    def close(self, done: int | None, running: int = 0, failed: int = 0) -> None:
        if done is not None:
            self.view.update(done, running=running, failed=failed)
        self.view.stop()


def _say(message: str) -> None:
    # one plain line, never wrapped: errors must stay greppable
    print(f"shoal run: {message}", file=sys.stderr, flush=True)


def _write(stream: Any, data: bytes) -> None:
    stream.write(data)
    stream.flush()


def _summary(err: Any, total: int, ok: int, failed: list[tuple[Line, str]],
             bad: list[BadLine], wall: float) -> None:
    from rich.table import Table

    table = Table(title="shoal run summary", show_header=True, header_style="bold")
    table.add_column("tasks", justify="right")
    table.add_column("succeeded", justify="right")
    table.add_column("failed", justify="right")
    table.add_column("invalid lines", justify="right")
    table.add_column("wall time", justify="right")
    table.add_column("tasks/s", justify="right")
    rate = total / wall if wall > 0 else 0.0
    table.add_row(str(total), str(ok), str(len(failed)), str(len(bad)), f"{wall:.2f} s", f"{rate:,.0f}")
    err.print(table)
    if failed:
        shown = sorted(failed, key=lambda f: f[0].number)[:20]
        ft = Table(title="failed tasks", show_header=True, header_style="bold")
        ft.add_column("line", justify="right")
        ft.add_column("command")
        ft.add_column("error")
        for line, why in shown:
            text = line.text if len(line.text) <= 60 else line.text[:57] + "..."
            ft.add_row(str(line.number), text, why)
        err.print(ft)
        if len(failed) > len(shown):
            err.print(f"... and {len(failed) - len(shown)} more failed tasks")
