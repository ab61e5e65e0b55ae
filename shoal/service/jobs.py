"""Jobs of ``shoal serve``: queue, run (each in its sandbox), cancel, delete, recover.

A job runs in a thread that calls :func:`shoal.service.sandbox.run_job`, which blocks until
the job ends or its cancel event is set. At most ``max_running`` jobs run at once (the
others wait in submission order); each token may have ``max_jobs`` queued or running.

With ``resume`` (the default of ``shoal serve``) jobs run resumable (``run_job(...,
resumable=True)``): a job that was running when the service died, or stopped, is queued
again at the next start and goes on from where it was, without running its finished
commands again (docs/serve.md, "Restarts").
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from .store import (
    CANCELLED,
    FAILED,
    FINISHED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Job,
    Store,
)
from .tokens import Token, format_size

RunJob = Callable[..., Any]  # the signature of shoal.service.sandbox.run_job

_ID = re.compile(r"[0-9a-f]{16}")


def valid_id(job_id: str) -> bool:
    """Job ids are 16 random hex digits (so they cannot name a path outside JOBS)."""
    return bool(_ID.fullmatch(job_id))


class QuotaError(Exception):
    """A submission over a token's quota; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def tree_size(root: Path) -> int:
    """Apparent size of the regular files under ``root`` (links not followed)."""
    total = 0
    stack = [str(root)]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.is_file(follow_symlinks=False):
                            total += e.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total


_PROGRESS = re.compile(rb"(?im)^.*?\bprogress\b\D*?(\d+)\s*(?:/|of)\s*(\d+)")


def read_progress(log: Path) -> dict[str, int] | None:
    """The last ``progress N/M`` line of a job's log (its tail only), or None."""
    try:
        with open(log, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - 65536))
            tail = f.read()
    except OSError:
        return None
    last = None
    for m in _PROGRESS.finditer(tail):
        last = m
    if last is None:
        return None
    return {"done": int(last.group(1)), "total": int(last.group(2))}


def _rmtree(path: Path) -> None:
    """Remove a job directory, whatever modes the job left on it."""
    def fix(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=fix)


class JobManager:
    """Owns the job store, the job directories and the threads that run jobs."""

    def __init__(self, jobs_dir: Path, data_dir: Path, limits: Any, run_job: RunJob,
                 max_running: int = 2, resume: bool = False) -> None:
        self.jobs_dir = jobs_dir
        self.data_dir = data_dir
        self.limits = limits
        self.run_job = run_job
        self.resume = resume
        jobs_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(jobs_dir, 0o700)  # jobs see only their own work/ (bound into the sandbox)
        self.store = Store(jobs_dir)
        self._pool = ThreadPoolExecutor(max_workers=max_running, thread_name_prefix="shoal-job")
        self._cancel: dict[str, threading.Event] = {}
        self._done: dict[str, threading.Event] = {}
        self._lock = threading.Lock()  # submissions check quotas and insert atomically
        self._stopping = False
        # token name -> max_output (bytes): a job may write at most what its token has left
        self.output_quota: dict[str, int] = {}
        self.recovered_failed, self.resumed, queued = self.store.recover(resume)
        for job_id in self.recovered_failed:  # nothing will resume them
            self._drop_resume_state(job_id)
        for job_id in queued:
            self._start(job_id)

    # -- paths ------------------------------------------------------------------------------
    def job_dir(self, job_id: str) -> Path:
        return self.jobs_dir / job_id

    def work_dir(self, job_id: str) -> Path:
        return self.jobs_dir / job_id / "work"

    def log_path(self, job_id: str) -> Path:
        return self.jobs_dir / job_id / "log"

    def _drop_resume_state(self, job_id: str) -> None:
        """Remove what a resumable job kept to resume (plan, journal, run directory)."""
        state = self.job_dir(job_id) / "state"
        if state.exists():
            _rmtree(state)
        try:
            with os.scandir(self.work_dir(job_id)) as it:
                for e in it:
                    if e.name.startswith(".shoal-scratch-") and e.is_dir(follow_symlinks=False):
                        _rmtree(Path(e.path))
        except OSError:
            pass

    def _log(self, job_id: str, line: str) -> None:
        try:
            with open(self.log_path(job_id), "ab") as f:
                f.write(f"[shoal serve] {line}\n".encode())
        except OSError:
            pass

    # -- submission -------------------------------------------------------------------------
    def reserve(self, token: Token) -> str:
        """A new job id and its (empty) directory, after the quota checks. The job is not in
        the store until :meth:`submit`; :meth:`discard` removes an abandoned reservation."""
        with self._lock:
            active = self.store.count_active(token.name)
            if active >= token.max_jobs:
                raise QuotaError(f"quota: token '{token.name}' already has {active} queued or "
                                 f"running jobs (max_jobs = {token.max_jobs})", 429)
            used = self.store.output_total(token.name)
            if used >= token.max_output:
                raise QuotaError(f"quota: token '{token.name}' keeps {format_size(used)} of "
                                 f"outputs (max_output = {format_size(token.max_output)}); "
                                 "delete jobs first", 507)
            job_id = secrets.token_hex(8)
            self.job_dir(job_id).mkdir(mode=0o700)
            self.work_dir(job_id).mkdir()
            return job_id

    def discard(self, job_id: str) -> None:
        _rmtree(self.job_dir(job_id))

    def submit(self, job_id: str, token: Token, script_name: str, script: bytes,
               args: list[str], inputs: list[str]) -> Job:
        """Store the script and queue the job (its inputs are already in ``work/``)."""
        (self.job_dir(job_id) / "script.sh").write_bytes(script)
        self.log_path(job_id).touch()
        job = Job(job_id, token.name, script_name, args, QUEUED, time.time(), inputs=inputs)
        self.store.add(job)
        self._start(job_id)
        return job

    def _start(self, job_id: str) -> None:
        self._cancel[job_id] = threading.Event()
        self._done[job_id] = threading.Event()
        self._pool.submit(self._run, job_id)

    # -- running ----------------------------------------------------------------------------
    def _limits_for(self, job: Job, token_max_output: int | None) -> Any:
        if token_max_output is None:
            return self.limits
        used = self.store.output_total(job.owner)
        room = max(0, token_max_output - used)
        return replace(self.limits, output_bytes=min(self.limits.output_bytes, room))

    def _run(self, job_id: str) -> None:
        cancel = self._cancel[job_id]
        try:
            with self._lock:  # against a cancel that marks it cancelled meanwhile
                job = self.store.get(job_id)
                if job is None or job.state != QUEUED or cancel.is_set():
                    return
                self.store.update(job_id, state=RUNNING, started=time.time())
            limits = self._limits_for(job, self.output_quota.get(job.owner))
            if job.resumes:
                self._log(job_id, f"the service restarted: resuming the job (restart "
                                  f"{job.resumes}); finished commands are not run again")
            extra = {"resumable": True} if self.resume else {}
            try:
                res = self.run_job(self.job_dir(job_id) / "script.sh", job.args,
                                   job_dir=self.job_dir(job_id), data_dir=self.data_dir,
                                   limits=limits, log=self.log_path(job_id), cancel=cancel,
                                   **extra)
                rc, reason = int(res.returncode), res.reason
            except Exception as exc:  # the job fails; the service goes on
                rc, reason = -1, f"internal error: {type(exc).__name__}: {exc}"
            if self._stopping and self.resume:  # stays running: the next start resumes it
                self._log(job_id, "the service is stopping: the job resumes at its next start")
                return
            if self._stopping:
                state, reason = FAILED, "the service stopped while the job ran"
            elif cancel.is_set():
                state, reason = CANCELLED, "cancelled"
            elif rc == 0 and reason is None:
                state = SUCCEEDED
            else:
                state = FAILED
                if reason is None:
                    reason = f"the script exited with status {rc}"
            if self.resume:
                self._drop_resume_state(job_id)
            size = tree_size(self.work_dir(job_id))
            self.store.update(job_id, state=state, finished=time.time(), returncode=rc,
                              reason=reason, output_bytes=size)
            self._log(job_id, f"job {state}{': ' + reason if reason else ''}")
        finally:
            self._done[job_id].set()

    # -- control ----------------------------------------------------------------------------
    def cancel(self, job: Job) -> Job:
        """Cancel a queued or running job (a finished one is left as it is)."""
        ev = self._cancel.get(job.id)
        if ev is not None:
            ev.set()
        if job.state == QUEUED:
            # conditional: the job's thread may have just started it
            with self._lock:
                cur = self.store.get(job.id)
                if cur is not None and cur.state == QUEUED:
                    self.store.update(job.id, state=CANCELLED, finished=time.time(),
                                      reason="cancelled before it started")
                    if self.resume and cur.resumes:  # kept by the run a restart cut off
                        self._drop_resume_state(job.id)
                    done = self._done.get(job.id)
                    if done is not None:
                        done.set()
        return self.store.get(job.id) or job

    def wait(self, job_id: str, timeout: float | None = None) -> bool:
        ev = self._done.get(job_id)
        return True if ev is None else ev.wait(timeout)

    def delete(self, job: Job, timeout: float = 60.0) -> bool:
        """Cancel (if needed), wait for the job's end, remove its directory and row. False if
        it did not stop within ``timeout`` (then nothing is removed)."""
        if job.state not in FINISHED:
            self.cancel(job)
            if not self.wait(job.id, timeout):
                return False
        _rmtree(self.job_dir(job.id))
        self.store.delete(job.id)
        self._cancel.pop(job.id, None)
        self._done.pop(job.id, None)
        return True

    def shutdown(self) -> None:
        """Stop: stop running jobs and wait for their threads (with ``resume`` they stay
        running in the store and the next start resumes them; else they are marked failed).
        Queued jobs stay queued: the next start runs them."""
        self._stopping = True
        for ev in list(self._cancel.values()):
            ev.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.store.close()


__all__ = ["JobManager", "QuotaError", "valid_id", "tree_size", "read_progress",
           "FAILED", "SUCCEEDED", "CANCELLED", "RUNNING", "QUEUED"]
