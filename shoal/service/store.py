"""The job store of ``shoal serve``: one SQLite table under the jobs directory.

Each job also has a directory ``JOBS/<id>/`` (``script.sh``, ``log``, ``work/`` with its
inputs and outputs). The table is the truth about a job's state; it is written on every
change (WAL, synchronous=NORMAL: a committed change survives a killed service), so a restarted
service knows every finished job and its outputs. Jobs that were running when the service died
are queued again to resume (``resumes`` counts how often; past :data:`MAX_RESUMES`, or when
the service runs without resuming, they are marked failed with a reason); jobs that were
queued are queued again (:meth:`recover`).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", \
    "cancelled"
ACTIVE = (QUEUED, RUNNING)
FINISHED = (SUCCEEDED, FAILED, CANCELLED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    script TEXT NOT NULL,
    args TEXT NOT NULL,
    state TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    returncode INTEGER,
    reason TEXT,
    inputs TEXT NOT NULL DEFAULT '[]',
    output_bytes INTEGER NOT NULL DEFAULT 0,
    resumes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_owner ON jobs(owner, created);
"""

RESTART_REASON = "the service stopped while the job ran (it was not resumed)"
MAX_RESUMES = 3  # a job found running at a restart after this many resumes is failed instead


@dataclass
class Job:
    """One row of the job table."""

    id: str
    owner: str
    script: str
    args: list[str]
    state: str
    created: float
    started: float | None = None
    finished: float | None = None
    returncode: int | None = None
    reason: str | None = None
    inputs: list[str] | None = None
    output_bytes: int = 0
    resumes: int = 0

    def public(self) -> dict[str, object]:
        """The fields a client sees (not the owner)."""
        return {"id": self.id, "script": self.script, "args": self.args, "state": self.state,
                "created": self.created, "started": self.started, "finished": self.finished,
                "returncode": self.returncode, "reason": self.reason,
                "inputs": self.inputs or [], "output_bytes": self.output_bytes,
                "resumes": self.resumes}


_COLS = ("id", "owner", "script", "args", "state", "created", "started", "finished",
         "returncode", "reason", "inputs", "output_bytes", "resumes")


def _row(r: sqlite3.Row | tuple) -> Job:  # type: ignore[type-arg]
    d = dict(zip(_COLS, r, strict=True))
    d["args"] = json.loads(d["args"])
    d["inputs"] = json.loads(d["inputs"])
    return Job(**d)


class Store:
    """Thread-safe access to ``JOBS/jobs.sqlite``."""

    def __init__(self, jobs_dir: Path) -> None:
        self.path = jobs_dir / "jobs.sqlite"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        cols = {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}
        if "resumes" not in cols:  # a store written before resuming existed
            self._db.execute("ALTER TABLE jobs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, job: Job) -> None:
        with self._lock:
            self._db.execute(
                f"INSERT INTO jobs ({', '.join(_COLS)}) VALUES ({', '.join('?' * len(_COLS))})",
                (job.id, job.owner, job.script, json.dumps(job.args), job.state, job.created,
                 job.started, job.finished, job.returncode, job.reason,
                 json.dumps(job.inputs or []), job.output_bytes, job.resumes))

    def get(self, job_id: str, owner: str | None = None) -> Job | None:
        """The job, or None (also when ``owner`` is given and is not the job's)."""
        q = f"SELECT {', '.join(_COLS)} FROM jobs WHERE id = ?"
        params: tuple[str, ...] = (job_id,)
        if owner is not None:
            q += " AND owner = ?"
            params += (owner,)
        with self._lock:
            r = self._db.execute(q, params).fetchone()
        return _row(r) if r else None

    def list(self, owner: str | None = None, states: tuple[str, ...] | None = None) -> list[Job]:
        q = f"SELECT {', '.join(_COLS)} FROM jobs"
        where, params = [], []
        if owner is not None:
            where.append("owner = ?")
            params.append(owner)
        if states:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            params.extend(states)
        if where:
            q += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY created", params).fetchall()
        return [_row(r) for r in rows]

    def update(self, job_id: str, **fields: object) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def delete(self, job_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def count_active(self, owner: str) -> int:
        with self._lock:
            return int(self._db.execute(
                "SELECT COUNT(*) FROM jobs WHERE owner = ? AND state IN (?, ?)",
                (owner, *ACTIVE)).fetchone()[0])

    def output_total(self, owner: str) -> int:
        """Bytes kept by the owner's finished jobs."""
        with self._lock:
            return int(self._db.execute(
                "SELECT COALESCE(SUM(output_bytes), 0) FROM jobs WHERE owner = ?",
                (owner,)).fetchone()[0])

    def recover(self, resume: bool = False) -> tuple[list[str], list[str], list[str]]:
        """After a restart: running jobs are queued again with ``resumes`` + 1 when ``resume``
        and they have resumed fewer than :data:`MAX_RESUMES` times, else marked failed (with
        :data:`RESTART_REASON`, or a reason naming the restarts). Returns (failed ids,
        resumed ids, queued ids to start, resumed first, then by submission)."""
        now = time.time()
        with self._lock:
            running = self._db.execute("SELECT id, resumes FROM jobs WHERE state = ? "
                                       "ORDER BY created", (RUNNING,)).fetchall()
            failed, resumed = [], []
            with self._db:  # one transaction (rolled back on an error)
                self._db.execute("BEGIN")
                for job_id, n in running:
                    if resume and n < MAX_RESUMES:
                        resumed.append(job_id)
                        self._db.execute("UPDATE jobs SET state = ?, resumes = ? WHERE id = ?",
                                         (QUEUED, n + 1, job_id))
                    else:
                        failed.append(job_id)
                        why = RESTART_REASON if not resume else (
                            f"the service stopped while the job ran, {n + 1} times (resumed "
                            f"at most {MAX_RESUMES} times)")
                        self._db.execute("UPDATE jobs SET state = ?, finished = ?, reason = ? "
                                         "WHERE id = ?", (FAILED, now, why, job_id))
            queued = [r[0] for r in self._db.execute(
                "SELECT id FROM jobs WHERE state = ? ORDER BY created", (QUEUED,)).fetchall()]
        first = set(resumed)
        return failed, resumed, resumed + [j for j in queued if j not in first]
