"""The embedded local default: a head and one agent on this machine, owned by this process.

Both start at once (the agent connects to an ipc endpoint the head will bind, ZeroMQ
retries until it is there), each in its own session so a Ctrl-C reaches only the
caller, which then stops them in order. They watch this process: if it dies, so do they
(parent-death signal plus an owner-pid check), so a crash leaves no orphan processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from shoal.transport.connfile import Connection


class LocalCluster:
    """Head + agent subprocesses of one Executor."""

    def __init__(self, workers: int | None = None, slots: int | None = None, prefetch: int = 1) -> None:
        ncpu = os.cpu_count() or 1
        if slots is None:
            slots = workers if workers else ncpu
        if workers is None:
            workers = slots
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.slots = slots
        self.workers = min(workers, slots)
        self.rundir = tempfile.mkdtemp(prefix="shoal-run-")  # mode 0700
        self.connection = Connection.new(f"ipc://{self.rundir}/head")
        self.connfile = os.path.join(self.rundir, "connection.json")
        self.connection.write(self.connfile)
        me = str(os.getpid())
        py = sys.executable
        # Workers must import what the caller imports: hand them its sys.path.
        path = json.dumps([p for p in sys.path if p and os.path.isdir(p)] or [os.getcwd()])
        common = dict(start_new_session=True, close_fds=True, stdin=subprocess.DEVNULL)
        self.head = subprocess.Popen(
            [py, "-m", "shoal.head", "--connection", self.connfile, "--owner-pid", me,
             "--prefetch", str(prefetch), "--exit-when-idle", "--quiet", "--remove-dir"],
            **common,
        )
        self.agent = subprocess.Popen(
            [py, "-m", "shoal.agent", "--connection", self.connfile, "--owner-pid", me,
             "--slots", str(slots), "--workers", str(self.workers), "--sys-path", path,
             "--quiet"],
            **common,
        )
        self._stopped = False

    def alive(self) -> bool:
        return self.head.poll() is None and self.agent.poll() is None

    def why(self) -> str:
        parts = []
        for name, p in (("head", self.head), ("agent", self.agent)):
            rc = p.poll()
            if rc is not None:
                parts.append(f"{name} exited with status {rc}")
        return ", ".join(parts) or "unknown"

    def stop(self, timeout: float = 5.0) -> None:
        """Wait for an orderly exit (the client already asked the head to shut down)."""
        if self._stopped:
            return
        self._stopped = True
        deadline = time.monotonic() + timeout
        for p in (self.head, self.agent):
            try:
                p.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
        for p in (self.head, self.agent):
            try:
                p.wait(2.0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.rundir, ignore_errors=True)
