"""``shoal serve --connect F``: a job's commands run on the agents of an existing runtime.

The job's runner still compiles and drives the script inside the job's sandbox on the
service's host (``sandbox.py``: no network, the job user, limits), with the same code as a
local job (``shoal.script.runner.run_plan``); only its executor differs: each command goes
over a pipe to the :class:`Bridge` here (``proxy.py``), which submits it to the runtime at
``F`` as a Python task, :func:`shoal.service.sandbox_cmd.task_run`, that a warm worker of an
agent runs: the same bubblewrap sandbox, per command, with the job's ``work`` read-write and
the data read-only. So the job directory must be where the agents see it at the same path (``--jobs``
on a shared file system; on one machine it simply is).

Limits of the job as a whole hold across nodes:

* wall time, output size, cancel: watched by the service as for a local job (the walk of
  ``work`` sees what every node wrote; ``RLIMIT_FSIZE`` caps each file on every node);
* CPU time: each command's CPU time (its control group's) is added up as commands end, and
  each command may use at most what is left when it starts;
* memory and processes: per command, on its node (each command has the job's limits);
* commands at once: at most ``Limits.workers`` of the job run on the runtime at a time.

Stopping a job (a limit, cancel, delete, the service's stop) kills its runner, writes
``JOB_DIR/stop`` (commands that reach a node later do not start), cancels every command
(the agents kill the workers running them) and runs ``task_sweep`` on each agent, which kills
whatever is left in the job's control groups there.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import queue
import secrets
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from .sandbox import SCRIPT, JobResult, Limits, _note, _python, _run, _secs
from .sandbox_cmd import task_check, task_run, task_sweep

MAX_LINE = 64 << 10       # longest request the runner may send (a chain's is ~200 bytes)
MAX_BYTES = 64 << 20      # requests per job, in all: bounds the service's memory per job
START_TIMEOUT = 15.0      # connecting to the head


class Bridge:
    """Runs one job's commands on the runtime; see the module docstring."""

    def __init__(self, ex: Any, job_dir: Path, data_dir: Path, limits: Limits, log: Path,
                 tag: str) -> None:
        """``ex``: the service's client of the runtime (an ``Executor``, shared by jobs)."""
        self.job_dir, self.data_dir, self.limits, self.log, self.tag = (
            job_dir, data_dir, limits, log, tag)
        self.ex = ex
        self.t0 = time.monotonic()
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        self.child_fds = [req_w, resp_r]   # the runner's ends (closed by the sandbox)
        self._req_r, self._resp_w = req_r, resp_w
        self._events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._reason: str | None = None
        self._pending: dict[int, dict[str, Any]] = {}   # id -> request, waiting to be sent
        self._missing: dict[int, int] = {}              # id -> dependencies not finished
        self._dependents: dict[int, list[int]] = {}     # id -> pending ids waiting for it
        self._ready: collections.deque[int] = collections.deque()  # pending, deps finished
        self._futs: dict[int, Any] = {}                 # id -> shoal future, sent
        self._ok: dict[int, bool] = {}                  # id -> it finished (not failed)
        self._bytes = 0           # bytes of requests read
        self.cpu = 0.0            # CPU seconds of the job's finished commands
        self.commands = 0         # commands that ran to their end
        self.agents_used: set[str] = set()
        self._finished = False
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=f, daemon=True, name=f"bridge-{n}-{tag}")
                         for n, f in (("read", self._read), ("loop", self._loop),
                                      ("write", self._write))]
        for t in self._threads:
            t.start()

    # -- the sandbox's side (Companion) --------------------------------------------------------
    def reason(self) -> str | None:
        return self._reason

    def _stop_job(self, why: str) -> None:
        if self._reason is None:
            self._reason = why

    # -- requests from the runner ------------------------------------------------------------
    def _read(self) -> None:
        buf = b""
        try:
            while True:
                chunk = os.read(self._req_r, 1 << 16)
                if not chunk:
                    break
                buf += chunk
                self._bytes += len(chunk)
                if self._bytes > MAX_BYTES:
                    self._events.put(("bad", f"more than {MAX_BYTES >> 20} MiB of requests"))
                    break
                *lines, buf = buf.split(b"\n")
                if len(buf) > MAX_LINE:
                    self._events.put(("bad", f"a request of more than {MAX_LINE} bytes"))
                    break
                for line in lines:
                    if line.strip():
                        self._events.put(("req", line))
        except OSError:
            pass
        finally:
            os.close(self._req_r)
            self._events.put(("eof",))

    def _write(self) -> None:
        while (data := self._answers.get()) is not None:
            try:
                while data:
                    data = data[os.write(self._resp_w, data):]
            except OSError:  # the runner is gone
                break
        try:
            os.close(self._resp_w)
        except OSError:
            pass

    def _answer(self, obj: dict[str, Any]) -> None:
        self._answers.put((json.dumps(obj) + "\n").encode())

    def _loop(self) -> None:
        while True:
            ev = self._events.get()
            kind = ev[0]
            if kind == "stop":
                return
            if self._finished:
                continue
            if kind == "req":
                try:
                    self._request(json.loads(ev[1]))
                except (ValueError, TypeError, KeyError) as exc:
                    self._stop_job(f"sandbox: bad request from the job's runner ({exc})")
            elif kind == "bad":
                self._stop_job(f"sandbox: bad request from the job's runner ({ev[1]})")
            elif kind == "done":
                self._done(ev[1], ev[2])
            elif kind == "eof":
                continue
            self._dispatch()

    def _request(self, msg: Any) -> None:
        if not isinstance(msg, dict):
            raise ValueError("not an object")
        op = msg.get("op")
        if op == "agents":
            agents = [{"name": a.name, "host": a.host, "slots": a.slots}
                      for a in self.ex.agents()]
            if not agents:
                _note(self.log, "connect: no agent is connected to the runtime yet; the "
                                "commands wait for one")
            self._answer({"op": "agents", "agents": agents})
        elif op == "submit":
            ident, argv, cwd = msg["id"], msg["argv"], msg["cwd"]
            after, prefer = msg.get("after") or [], msg.get("prefer")
            if (not isinstance(ident, int) or ident in self._ok or ident in self._pending
                    or ident in self._futs):
                raise ValueError(f"command id {ident!r}")
            if (not isinstance(argv, list) or not argv
                    or not all(isinstance(x, str) for x in argv)):
                raise ValueError("argv must be a list of strings")
            if not isinstance(cwd, str) or not (cwd == "/work" or cwd.startswith("/work/")):
                raise ValueError(f"cwd {cwd!r} is not below /work")
            if not isinstance(after, list) or not all(
                    isinstance(d, int) and (d in self._ok or d in self._pending
                                            or d in self._futs) for d in after):
                raise ValueError("after: unknown command ids")
            if prefer is not None and not isinstance(prefer, str):
                raise ValueError("prefer must be an agent name")
            self._pending[ident] = {"argv": argv, "cwd": cwd, "after": after,
                                    "prefer": prefer}
            waits = [d for d in set(after) if d not in self._ok]
            for d in waits:
                self._dependents.setdefault(d, []).append(ident)
            if waits:
                self._missing[ident] = len(waits)
            else:
                self._ready.append(ident)
        elif op == "cancel":
            ident = msg["id"]
            if ident in self._pending:
                del self._pending[ident]
                self._finished_one(ident, False)
                self._answer({"op": "done", "id": ident, "error": "cancelled"})
            elif ident in self._futs:
                self._futs[ident].cancel(running=True)  # its callback answers
        else:
            raise ValueError(f"unknown op {op!r}")

    # -- commands on the runtime ----------------------------------------------------------
    def _finished_one(self, ident: int, ok: bool) -> None:
        """``ident`` ended (``ok``: it ran); the pending commands waiting only for it are
        ready."""
        self._ok[ident] = ok
        for e in self._dependents.pop(ident, ()):
            self._missing[e] -= 1
            if self._missing[e] == 0:
                del self._missing[e]
                self._ready.append(e)

    def _dispatch(self) -> None:
        """Send the ready commands (dependencies finished), in the order they came, while
        fewer than ``workers`` of this job are on the runtime."""
        while self._ready and self._reason is None and len(self._futs) < self.limits.workers:
            ident = self._ready.popleft()
            req = self._pending.pop(ident, None)
            if req is None:  # cancelled meanwhile
                continue
            if not all(self._ok[d] for d in req["after"]):
                self._finished_one(ident, False)
                self._answer({"op": "done", "id": ident,
                              "error": "a command it depends on failed"})
                continue
            self._send(ident, req)

    def _send(self, ident: int, req: dict[str, Any]) -> None:
        lim = self.limits
        # what is left of the job's wall and CPU time (the service stops the job at its
        # wall limit; a command's own watch is the backstop if the service is gone)
        left = replace(lim, wall_s=max(1.0, lim.wall_s - (time.monotonic() - self.t0)) + 5,
                       cpu_s=max(1.0, lim.cpu_s - self.cpu), workers=1)
        try:
            fut = self.ex.options(prefer=req["prefer"]).submit(
                task_run, req["argv"], str(self.job_dir), str(self.data_dir), asdict(left),
                self.tag, req["cwd"])
        except Exception as exc:  # the head is gone, a bad agent name: the job fails
            self._finished_one(ident, False)
            self._stop_job(f"sandbox: the runtime refused a command: {exc}")
            return
        self._futs[ident] = fut
        fut.add_done_callback(lambda f, i=ident: self._events.put(("done", i, f)))

    def _done(self, ident: int, fut: Any) -> None:
        if self._futs.pop(ident, None) is None:
            return
        agent = getattr(fut, "agent", None)
        if agent:
            self.agents_used.add(agent)
        if fut.cancelled():
            self._finished_one(ident, False)
            self._answer({"op": "done", "id": ident, "error": "cancelled", "agent": agent})
            return
        exc = fut.exception()
        if exc is not None:
            self._finished_one(ident, False)
            self._answer({"op": "done", "id": ident, "agent": agent,
                          "error": f"{type(exc).__name__}: {_line(exc)}"})
            self._stop_job(f"sandbox: a command could not run on the runtime: "
                           f"{type(exc).__name__}: {_line(exc)}")
            return
        st = fut.result()
        self.commands += 1
        self.cpu += float(st.get("cpu") or 0.0)
        self._finished_one(ident, True)
        self._answer({"op": "done", "id": ident, "agent": agent, "rc": int(st["exit"]),
                      "wall": st.get("wall"),
                      "stderr": base64.b64encode(st.get("output") or b"").decode()})
        why = st.get("reason")
        if why:
            if why.startswith("sandbox"):
                self._stop_job(str(why))
            else:
                self._stop_job(f"{why} (a command on {agent})")
        elif self.cpu > self.limits.cpu_s:
            self._stop_job(f"CPU time limit {_secs(self.limits.cpu_s)} exceeded")

    # -- the end ---------------------------------------------------------------------------------
    def finish(self) -> None:
        """Stop every command of the job still on the runtime, and the threads. Idempotent."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        self._events.put(("stop",))
        self._threads[1].join(timeout=10)
        self._answers.put(None)
        left = [f for f in list(self._futs.values()) if not f.done()]
        self._pending.clear()
        if left:
            # commands that reach a node after this never start; then stop the others (a
            # running one's worker is killed, and its sandbox with it)
            try:
                (self.job_dir / "stop").touch()
            except OSError:
                pass
            for f in left:
                try:
                    f.cancel(running=True)
                except Exception:  # the head is gone: its agents stop them (client lost)
                    pass
            killed = self._sweep()
            _note(self.log, f"stopped {len(left)} command(s) on the runtime; {killed}")
        used = ", ".join(sorted(self.agents_used))
        _note(self.log, f"connect: {self.commands} command(s) ran on {len(self.agents_used)} "
              f"agent(s){f' ({used})' if used else ''}; CPU {self.cpu:.1f} s")

    def _sweep(self, timeout: float = 15.0) -> str:
        """``sandbox_cmd sweep`` on every agent: what a cancel may have left in the job's
        control groups (a command killed as its sandbox started)."""
        import concurrent.futures as cf

        try:
            agents = self.ex.agents()
            futs = [self.ex.options(agent=a.name).submit(task_sweep, self.tag) for a in agents]
            done, not_done = cf.wait(futs, timeout=timeout)
        except Exception as exc:
            return f"sweep failed: {_line(exc)}"
        killed = sum(int(f.result()) for f in done
                     if not f.cancelled() and f.exception() is None)
        out = f"swept {len(done)} agent(s)"
        if killed:
            out += f", {killed} process(es) left there killed"
        if not_done:
            out += f"; {len(not_done)} agent(s) did not answer within {timeout:g} s"
        return out


def _line(x: object) -> str:
    """One line of at most 300 characters."""
    return " ".join(str(x).split())[:300]


_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _client(connect: str) -> Any:
    """The service's one client of the runtime at ``connect``, made again once it failed
    (the head was lost). One client for every job: the agents' warm workers stay bound to
    it (a worker moving to another client is replaced by a fresh one first)."""
    from shoal import Executor

    with _clients_lock:
        ex = _clients.get(connect)
        if ex is None or getattr(ex, "_error", None) is not None:
            if ex is not None:
                try:
                    ex.shutdown(wait=False, cancel_futures=True)
                except Exception:
                    pass
            ex = _clients[connect] = Executor(connect=connect, start_timeout=START_TIMEOUT)
        return ex


def run_job_connected(script: Path, args: list[str], *, job_dir: Path, data_dir: Path,
                      limits: Limits, log: Path, cancel: threading.Event | None = None,
                      connect: str) -> JobResult:
    """:func:`shoal.service.sandbox.run_job`, with the commands on the runtime at
    ``connect`` (one per-command sandbox on an agent each)."""
    if not Path(script).is_file():
        return JobResult(125, f"sandbox: script {str(script)!r} not found")
    job_dir, data_dir = Path(job_dir).resolve(), Path(data_dir).resolve()
    tag = job_dir.name if job_dir.name.isalnum() else secrets.token_hex(8)
    try:
        bridge = Bridge(_client(connect), job_dir, data_dir, limits, log, tag)
    except Exception as exc:
        return JobResult(125, f"sandbox: cannot reach the runtime at {connect}: {_line(exc)}")

    def argv(status_fd: int) -> list[str]:
        req, resp = bridge.child_fds
        return [_python(), "-s", "-m", "shoal.service.sandbox_job", "--status-fd",
                str(status_fd), "--workers", str(limits.workers), "--name", script.name,
                "--bridge", f"{req},{resp}", SCRIPT, "--", *args]

    try:
        return _run(argv, job_dir=job_dir, data_dir=data_dir, limits=limits, log=log,
                    cancel=cancel, script=script, companion=bridge)
    finally:
        bridge.finish()


def check_agents(connect: str, jobs_dir: Path, data_dir: Path, timeout: float = 60.0
                 ) -> tuple[list[str], list[str]]:
    """(problems, agent names): whether every agent of the runtime at ``connect`` can run the
    service's commands (:func:`shoal.service.sandbox_cmd.check`: root, bubblewrap, the jobs
    directory at the same path, the data directory). No agent is no problem (they may join
    later)."""
    import concurrent.futures as cf

    probe = f".probe-{secrets.token_hex(6)}"
    (jobs_dir / probe).write_text("shoal serve\n")
    try:
        try:
            ex = _client(connect)
            agents = ex.agents()
        except Exception as exc:
            return [f"cannot reach the runtime at {connect}: {_line(exc)}"], []
        futs = {a.name: ex.options(agent=a.name).submit(
            task_check, str(jobs_dir), probe, str(data_dir)) for a in agents}
        cf.wait(list(futs.values()), timeout=timeout)
        problems = []
        for name, f in futs.items():
            if not f.done():
                f.cancel(running=True)
                problems.append(f"agent {name} did not answer within {timeout:g} s")
            elif f.cancelled() or f.exception() is not None:
                problems.append(f"agent {name}: {_line(f.exception())}")
            else:
                problems += [f"agent {name} on {p}" for p in f.result()]
        return problems, [a.name for a in agents]
    finally:
        (jobs_dir / probe).unlink(missing_ok=True)
