"""Live progress on stderr: done, running, failed, queued, rate and ETA, drawn with rich.

- :class:`ProgressView` draws one progress line for a known number of tasks; whoever
  counts calls :meth:`ProgressView.update` (``Executor.map`` here; ``shoal run`` can).
- :class:`MapProgress` follows one ``Executor.map``. It costs nothing per task on the
  path results take: one thread of its own wakes a few times a second, looks at the
  map's futures (each finished one once, in order, plus a bounded window past the
  first unfinished one) and asks the head once a second how many tasks run. The I/O
  thread and the futures are not touched.

When (``progress``, the ``Executor``'s or ``map``'s): ``True`` always, at once;
``False`` never; ``None`` (default) only when stderr is a terminal, and only for a map
still running after :data:`AUTO_DELAY_S` (so short maps, library code whose output is
not a terminal, and tests print nothing). ``SHOAL_PROGRESS=0`` or ``1`` in the
environment sets what ``None`` means (never, always), e.g. for ``python -m shoal
prog.py``. Never inside a task.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from shoal.task import context
from shoal.task.errors import ExecutorError

if TYPE_CHECKING:
    from collections.abc import Callable

    from shoal.task.future import ShoalFuture

__all__ = ["AUTO_DELAY_S", "MapProgress", "ProgressView", "progress_delay", "progress_setting"]

AUTO_DELAY_S = 1.5     # a map that finishes sooner shows nothing (progress=None)
TICK_S = 0.25          # redraws per second: 4
POLL_S = 1.0           # asks the head how many tasks run this often
WINDOW = 2048          # futures looked at past the first unfinished one, per tick
RATE_WINDOW_S = 10.0   # the rate is measured over about this long

_OFF = ("0", "no", "false", "off", "never")
_ON = ("1", "yes", "true", "on", "always")


def progress_setting(value: Any, what: str = "progress") -> bool | None:
    """``value`` as a progress setting (True, False or None), or a clear ValueError."""
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"{what} must be True, False or None (automatic), not {value!r}")


def progress_delay(setting: bool | None, stream: Any = None) -> float | None:
    """Seconds to wait before drawing (a map that finished by then shows nothing), or
    None: no progress line. See the module docstring for what ``setting`` means."""
    if setting is False or context.in_worker():
        return None
    if setting is None:
        env = os.environ.get("SHOAL_PROGRESS", "").strip().lower()
        if env in _OFF:
            return None
        if env in _ON:
            return 0.0
        return AUTO_DELAY_S if _isatty(sys.stderr if stream is None else stream) else None
    return 0.0


def _isatty(stream: Any) -> bool:
    try:
        return stream is not None and bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # closed or replaced stream
        return False


class ProgressView:
    """One live progress line: ``title  [bar]  done/total  running R  failed F  queued Q
    rate/s  elapsed  ETA``.

    ``update`` takes counts; ``queued`` is what is neither done nor running. The rate is
    how fast ``done`` grew over the last :data:`RATE_WINDOW_S`, the ETA what is left at
    that rate. ``started``: when the work began (``time.monotonic()``; default: now), for
    the elapsed time and the first rate. With ``auto_refresh`` False, nothing redraws
    until ``update(..., refresh=True)``. ``redirect_stdout``: while drawing, what the
    program prints to stdout goes above the line, through the progress console (default:
    only when stdout is a terminal too; a redirected stdout must keep its output).
    """

    def __init__(self, title: str, total: int, *, console: Any = None, unit: str = "tasks",
                 transient: bool = False, auto_refresh: bool = True, disable: bool = False,
                 started: float | None = None, redirect_stdout: bool | None = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.total = total
        self.unit = unit
        started = time.monotonic() if started is None else started
        self._samples: deque[tuple[float, int]] = deque([(started, 0)])
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"), TextColumn("[progress.data.speed]{task.fields[rate]}"),
            TimeElapsedColumn(), TextColumn("ETA [progress.remaining]{task.fields[eta]}"),
            console=console if console is not None else Console(stderr=True, highlight=False),
            transient=transient, auto_refresh=auto_refresh, refresh_per_second=int(1 / TICK_S),
            disable=disable, get_time=time.monotonic,
            redirect_stdout=_isatty(sys.stdout) if redirect_stdout is None else redirect_stdout,
        )
        self._task = self._progress.add_task(title, total=total, counts=_counts(0, 0, total),
                                              rate=f"- {unit}/s", eta="-:--:--")
        self._progress.tasks[0].start_time = started  # elapsed counts from the work's start
        self.started = False

    def start(self) -> None:
        """Start drawing (rich's Live: stdout prints go above the line meanwhile)."""
        if not self.started:
            self.started = True
            self._progress.start()

    def stop(self) -> None:
        """Draw the last state and leave it on the terminal (unless ``transient``)."""
        if self.started:
            self.started = False
            self._progress.stop()

    def update(self, done: int, running: int | None = None, failed: int = 0,
               total: int | None = None, refresh: bool = False) -> None:
        """Set the counts: ``done`` (finished, failed included), ``running`` (None: not
        known, shown as "?"), ``failed``; ``total`` when it changed."""
        if total is not None:
            self.total = total
        now = time.monotonic()
        samples = self._samples
        samples.append((now, done))
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW_S:
            samples.popleft()
        t0, d0 = samples[0]
        rate = (done - d0) / (now - t0) if now - t0 >= 0.5 else None
        left = max(0, self.total - done)
        if not left:
            eta = "0:00:00"
        elif rate:
            eta = _clock(left / rate)
        else:
            eta = "-:--:--"
        queued = self.total - done - (running or 0)
        self._progress.update(self._task, completed=done, total=self.total,
                              counts=_counts(running, failed, max(0, queued)),
                              rate=_rate(rate, self.unit), eta=eta)
        if refresh:
            self._progress.refresh()

    def __enter__(self) -> ProgressView:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _counts(running: int | None, failed: int, queued: int) -> str:
    run = "?" if running is None else f"{running:,}"
    bad = f"[red]failed {failed:,}[/red]" if failed else "failed 0"
    return f"running {run}  {bad}  queued {queued:,}"


def _rate(rate: float | None, unit: str) -> str:
    if rate is None:
        return f"- {unit}/s"
    return f"{rate:,.1f} {unit}/s" if rate < 10 else f"{rate:,.0f} {unit}/s"


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    if s >= 100 * 3600:
        return ">99h"
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class MapProgress:
    """The progress line of one ``Executor.map``, drawn by the watcher thread.

    ``futs``: the map's futures in order, each for ``chunksize`` items (the last for what
    is left of ``nitems``); ``delay``: seconds before the first draw (a map done by then
    draws nothing). :meth:`close` when the caller is done with the results. Making one
    costs a list copy and a lock: no thread of its own (one watcher thread serves every
    map, drawing one at a time).
    """

    def __init__(self, owner: Any, futs: list[ShoalFuture], chunksize: int, nitems: int,
                 fn: Callable[..., Any], delay: float, console: Any = None) -> None:
        self._owner = owner
        # our own list: the map's iterator drops futures as it hands out their values;
        # here each is dropped as soon as it is counted
        self._futs: list[ShoalFuture | None] = list(futs)
        self._chunk = chunksize
        self._nitems = nitems
        self._t0 = time.monotonic()
        self.due = self._t0 + delay
        self._delay = delay
        self._console = console
        self._title = f"map {getattr(fn, '__qualname__', None) or type(fn).__name__}"
        self._lo = 0            # futures before it are done and counted
        self._done_lo = 0       # items of those
        self._failed_lo = 0
        self._running: int | None = None
        self._next_poll = 0.0
        self.closed = False     # the caller is done with the results
        self.drawing = False    # the watcher took it (set under the watcher's lock)
        self._ended = threading.Event()
        self.view: ProgressView | None = None
        _WATCHER.add(self)

    def close(self) -> None:
        """The map's caller is done: the last counts are drawn, then the line is left. If
        it is drawn now, waits for that, so the line is out before what the caller prints
        next."""
        with _WATCHER.cond:
            self.closed = True
            # drawn now, or asked for (progress=True: at least the last line is drawn);
            # else the watcher forgets it at its next look, without being woken
            wait = self.drawing or self._delay == 0
            if wait:
                _WATCHER.cond.notify_all()
        me = threading.current_thread()
        # not from the executor's I/O thread: the watcher's poll may wait for its reply
        if wait and me is not _WATCHER.thread and me is not getattr(self._owner, "_thread", None):
            self._ended.wait(2.0)

    # ---- counting (the watcher thread) -----------------------------------------------------------
    def _size(self, i: int) -> int:
        return self._chunk if i < len(self._futs) - 1 else self._nitems - self._chunk * i

    def counts(self) -> tuple[int, int, int]:
        """(done, failed, futures left) in items; drops the futures it counted."""
        futs = self._futs
        n = len(futs)
        lo = self._lo
        while lo < n:
            f = futs[lo]
            if f is None or not f.done():
                break
            size = self._size(lo)
            self._done_lo += size
            if f.cancelled() or f._exception is not None:
                self._failed_lo += size
            futs[lo] = None
            lo += 1
        self._lo = lo
        done, failed = self._done_lo, self._failed_lo
        for i in range(lo + 1, min(n, lo + WINDOW)):  # finished out of order
            f = futs[i]
            if f is not None and f.done():
                size = self._size(i)
                done += size
                if f.cancelled() or f._exception is not None:
                    failed += size
        return done, failed, n - lo

    def _poll_running(self, done: int) -> None:
        """Tasks running, from the head (all of its clients'), as items of this map."""
        try:
            st = self._owner.status(failures=0, agents=False, timeout=POLL_S * 2)
        except (ExecutorError, RuntimeError, ValueError):
            self._running = None
            return
        running = st.get("running")
        if isinstance(running, int):
            self._running = min(self._nitems - done, running * self._chunk)

    def step(self) -> bool:
        """Count and draw once; False when the line is finished (or never to be drawn)."""
        done, failed, left = self.counts()
        view = self.view
        if view is None:
            if not left and self._delay > 0:
                return False  # every result came in during the delay: draw nothing
            view = self.view = ProgressView(self._title, self._nitems, console=self._console,
                                            unit="items", auto_refresh=False, started=self._t0)
        now = time.monotonic()
        if left and not self.closed and now >= self._next_poll:
            self._next_poll = now + POLL_S
            self._poll_running(done)
        running = 0 if not left else self._running
        if running is not None:
            running = max(0, min(running, self._nitems - done))
        view.update(done, running, failed, refresh=view.started)
        view.start()
        return bool(left) and not self.closed

    def end(self) -> None:
        """Leave the last line on the terminal and let go of the futures."""
        try:
            if self.view is not None:
                self.view.stop()
        finally:
            self._futs = []
            self._ended.set()


class _Watcher:
    """One daemon thread for every map's progress line. While maps are registered it
    looks every :data:`TICK_S` for one that is due (:data:`AUTO_DELAY_S` after it began,
    or at once for ``progress=True``), then redraws that map every tick until it is done
    or closed; maps due meanwhile wait their turn (one live display at a time). With no
    map it sleeps until one comes. A short automatic map never wakes it: it is added to
    the list, and dropped from it at the next look once closed."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.maps: list[MapProgress] = []
        self.thread: threading.Thread | None = None
        self.idle = True  # waiting for a map, not ticking

    def add(self, mp: MapProgress) -> None:
        with self.cond:
            self.maps.append(mp)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="shoal-progress",
                                               daemon=True)
                self.thread.start()
            if self.idle or mp.due <= mp._t0:
                self.cond.notify_all()

    def _run(self) -> None:
        current: MapProgress | None = None
        while True:
            with self.cond:
                if current is None:
                    # automatic maps closed before they were drawn are forgotten here
                    self.maps = [m for m in self.maps if not m.closed or m._delay == 0]
                    if not self.maps:
                        self.idle = True
                        self.cond.wait()
                        self.idle = False
                        continue
                    now = time.monotonic()
                    due = [m for m in self.maps if m.due <= now]
                    if not due:
                        self.cond.wait(TICK_S)
                        continue
                    current = due[0]
                    current.drawing = True
            try:
                going = current.step()
            except Exception:  # noqa: BLE001 - a progress line must never break the map
                going = False
            if going:
                with self.cond:
                    if not current.closed:
                        self.cond.wait(TICK_S)
                continue
            try:
                if current.view is not None:  # the last counts, then the line stays
                    current.closed = True
                    current.step()
            except Exception:  # noqa: BLE001
                pass
            finally:
                current.end()
            with self.cond:
                if current in self.maps:
                    self.maps.remove(current)
                current.drawing = False
                current._ended.set()
            current = None

    def stop_all(self) -> None:
        """At interpreter exit: end the line being drawn (the terminal's cursor comes
        back)."""
        for m in list(self.maps):
            m.close()


_WATCHER = _Watcher()


@atexit.register
def _stop_views() -> None:
    _WATCHER.stop_all()
