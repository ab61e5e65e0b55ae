"""The run journal: an append-only SQLite log of keyed tasks, so a killed run can resume.

A client that wants a resumable run gives each task a journal key (``opts["key"]``, see
docs/journal.md for the identity rule) and starts its head with ``--journal FILE``. The
head records, per loop turn and in one transaction, the keys it was given (``submitted``)
and the outcome of every keyed task that resolved (``finished``: status, and the result
payload when the status is OK). When a later run submits a key that finished OK in an
earlier run of the same file, the head answers with the stored payload instead of running
the task again.

Cost model (why it looks like this):
- One row per head loop turn, not per task: the turn's submitted keys and finished
  results are packed (msgpack) into two blobs, so the head pays one INSERT per turn and
  about 0.2 us per task for packing (a row per task costs 1-2 us: SQLite's per-row work).
- The lookup index is built once, when a run opens a journal that already has OK results:
  the earlier turns are unpacked one at a time into a temporary table, then indexed by key
  in one sorted pass (~3 us per result, on disk in the temp store, not in Python memory).
  A journal with no OK results skips all of it, and lookups.
- WAL with ``synchronous=NORMAL``: a commit is a write() to the WAL, no fsync, so kill -9 of
  the head loses nothing committed (a power cut may lose the last commits; they rerun).
- ``locking_mode=EXCLUSIVE``: the head holds the file for the whole run, so a second head
  cannot write the same journal at the same time, and WAL needs no shared-memory file (it
  works on a network home directory, from one host).

File format (``PRAGMA application_id`` = 0x53484F4C "SHOL", ``PRAGMA user_version`` =
:data:`VERSION`)::

    runs(run INTEGER PRIMARY KEY, started REAL, ended REAL, pid INTEGER, host TEXT)
                                    -- one row per head that opened the file
    turns(run INTEGER, t REAL, n_submitted INTEGER, n_ok INTEGER, n_failed INTEGER,
          n_reused INTEGER,         -- tasks answered from earlier runs in this turn
          submitted BLOB,           -- msgpack [key, ...]: keyed tasks handed to the scheduler
          finished BLOB)            -- msgpack [[key, status, payload], ...]: resolved tasks,
                                    --   payload only for status 0 (OK), else nil

Times are Unix seconds (one per commit). Statuses are shoal.transport.protocol's.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    import sqlite3

APPLICATION_ID = 0x53484F4C  # "SHOL": marks the file as a shoal journal
VERSION = 1                  # schema version this code writes and reads
LOOKUP_CHUNK = 500           # keys per SELECT ... IN (...) when resuming
OK = 0                       # protocol.OK (not imported: this module has no dependencies)
LOCK_WAIT_S = 10.0           # how long to wait for a head that still holds the file: the
                             # previous run's head may be exiting while its program reruns

_SCHEMA = (
    "CREATE TABLE runs(run INTEGER PRIMARY KEY, started REAL NOT NULL, ended REAL, "
    "pid INTEGER, host TEXT)",
    "CREATE TABLE turns(run INTEGER NOT NULL, t REAL NOT NULL, n_submitted INTEGER NOT NULL, "
    "n_ok INTEGER NOT NULL, n_failed INTEGER NOT NULL, n_reused INTEGER NOT NULL, "
    "submitted BLOB, finished BLOB)",
)
_packb = msgpack.Packer(use_bin_type=True).pack


def _load_sqlite() -> None:
    """Import sqlite3 (~2 ms of CPU) when a journal is opened, not at every head's start:
    every use of the module comes after :class:`Journal` or :func:`summary` called this."""
    global sqlite3
    import sqlite3


class JournalError(Exception):
    """The journal file cannot be used; the message is one line naming the file."""


class Journal:
    """One run's handle on a journal file (see module docstring).

    Writes are buffered by :meth:`submitted` and :meth:`finished` and reach the file in one
    transaction at :meth:`commit`, which the head calls once per loop turn before it sends
    that turn's results. Every method raises :class:`JournalError`, never ``sqlite3.Error``.
    """

    def __init__(self, path: str, lock_wait: float = LOCK_WAIT_S) -> None:
        self.path = path
        self.run = 0            # this run's number in the file: 1 for a new journal
        self.resumable = 0      # OK results from earlier runs (0: lookups are skipped)
        self.reused = 0         # tasks this run answered from the journal
        self._subs: list[str] = []
        self._done: list[tuple[str, int, Any]] = []
        self._reused = 0        # answered since the last commit
        _load_sqlite()
        try:
            self.db = sqlite3.connect(path, timeout=lock_wait, isolation_level=None)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open journal {path!r}: {exc}") from None
        try:
            self._open()
        except sqlite3.Error as exc:
            self.db.close()
            why = str(exc)
            if "locked" in why or "busy" in why:
                raise JournalError(f"journal {path!r} is in use by another shoal head "
                                   f"(still after {lock_wait:g} s)") from None
            if "not a database" in why:
                raise JournalError(f"{path!r} is not a shoal journal (not an SQLite file)") from None
            raise JournalError(f"cannot open journal {path!r}: {why}") from None
        except JournalError:
            self.db.close()
            raise

    def _open(self) -> None:
        db, path = self.db, self.path
        # Before the first access: with an exclusive lock WAL needs no -shm file.
        db.execute("PRAGMA locking_mode=EXCLUSIVE")
        app = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app == 0 and tables == 0:
            fresh = True
        elif app != APPLICATION_ID:
            raise JournalError(f"{path!r} is not a shoal journal (an SQLite file of another kind)")
        elif version > VERSION:
            raise JournalError(f"journal {path!r} has format {version}, newer than this shoal "
                               f"reads ({VERSION}): use the shoal that wrote it or a new file")
        else:
            fresh = False
        if db.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
            raise JournalError(f"journal {path!r}: SQLite refused WAL mode")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("BEGIN IMMEDIATE")  # takes the lock now: a second head fails here
        try:
            if fresh:
                for stmt in _SCHEMA:
                    db.execute(stmt)
                db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                db.execute(f"PRAGMA user_version={VERSION}")
            cur = db.execute("INSERT INTO runs(started, pid, host) VALUES (?, ?, ?)",
                             (time.time(), os.getpid(), socket.gethostname()))
            self.run = int(cur.lastrowid or 0)
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise
        if not fresh:
            self._index_earlier_results()

    def _index_earlier_results(self) -> None:
        """Sorted key -> latest OK payload from earlier runs, in temporary tables."""
        db = self.db
        if db.execute("SELECT 1 FROM turns WHERE n_ok > 0 AND run < ? LIMIT 1",
                      (self.run,)).fetchone() is None:
            return
        # Appended unsorted (cheap), then indexed in one sorted pass: far cheaper than
        # inserting random keys into a B-tree one by one.
        db.execute("CREATE TEMP TABLE earlier(key TEXT NOT NULL, payload BLOB NOT NULL)")
        db.execute("BEGIN")
        turns = db.execute("SELECT finished FROM turns WHERE n_ok > 0 AND run < ? ORDER BY rowid",
                           (self.run,))
        add = db.cursor()
        for (blob,) in turns:
            add.executemany("INSERT INTO temp.earlier VALUES (?, ?)",
                            [(k, p) for k, s, p in _unpack(blob) if s == OK and isinstance(p, bytes)])
        db.execute("CREATE TEMP TABLE prev(key TEXT PRIMARY KEY, rid INTEGER NOT NULL) WITHOUT ROWID")
        db.execute("INSERT INTO temp.prev SELECT key, max(rowid) FROM temp.earlier GROUP BY key")
        db.execute("COMMIT")
        self.resumable = db.execute("SELECT count(*) FROM temp.prev").fetchone()[0]

    # ---- the head's side ---------------------------------------------------------------
    def lookup(self, keys: Sequence[str]) -> dict[str, Any]:
        """key -> stored payload, for those of ``keys`` that finished OK in an earlier run."""
        if not self.resumable or not keys:
            return {}
        found: dict[str, Any] = {}
        try:
            for i in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[i:i + LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                found.update(self.db.execute(
                    "SELECT p.key, e.payload FROM temp.prev AS p JOIN temp.earlier AS e "
                    f"ON e.rowid = p.rid WHERE p.key IN ({marks})", chunk))
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path!r}: cannot read: {exc}") from None
        return found

    def submitted(self, keys: Iterable[str]) -> None:
        """Buffer: these keyed tasks were handed to the scheduler."""
        self._subs.extend(keys)

    def finished(self, items: Iterable[tuple[str, int, Any]]) -> None:
        """Buffer: these keyed tasks resolved, as (key, status, payload)."""
        self._done.extend(items)

    def answered(self, n: int) -> None:
        """Buffer: ``n`` tasks were answered from earlier runs (counted, not listed)."""
        self.reused += n
        self._reused += n

    @property
    def pending(self) -> bool:
        return bool(self._subs or self._done or self._reused)

    def commit(self) -> None:
        """Write everything buffered in one transaction (no fsync: see module docstring)."""
        if not (self._subs or self._done or self._reused):
            return
        subs, self._subs = self._subs, []
        done, self._done = self._done, []
        reused, self._reused = self._reused, 0
        n_ok = 0
        for item in done:
            if item[1] == OK:
                n_ok += 1
        try:
            if n_ok < len(done):  # failures: their payloads are not kept
                done = [(k, s, p if s == OK else None) for k, s, p in done]
            finished = _packb(done) if done else None
            row = (self.run, time.time(), len(subs), n_ok, len(done) - n_ok, reused,
                   _packb(subs) if subs else None, finished)
        except (TypeError, ValueError):  # a payload that is not bytes: keep the keys only
            done = [(k, s, p if s == OK and isinstance(p, bytes) else None) for k, s, p in done]
            row = (self.run, time.time(), len(subs), n_ok, len(done) - n_ok, reused,
                   _packb(subs) if subs else None, _packb(done) if done else None)
        try:
            self.db.execute("INSERT INTO turns VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path!r}: cannot write: {exc}") from None

    def close(self) -> None:
        """Commit what is buffered, note the run's end, release the file."""
        try:
            self.commit()
            self.db.execute("UPDATE runs SET ended = ? WHERE run = ?", (time.time(), self.run))
        except (sqlite3.Error, JournalError):
            pass  # the rows already committed are what counts; the end time is a courtesy
        finally:
            self.db.close()

    # ---- reading a journal ------------------------------------------------------------
    def summary(self) -> list[dict[str, Any]]:
        """Per run: see :func:`summary`."""
        try:
            return _summary(self.db)
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path!r}: cannot read: {exc}") from None


def summary(path: str) -> list[dict[str, Any]]:
    """Per run of the journal at ``path``: run, started, ended (None: killed or running),
    reused, submitted, ok, failed. Reads only; the file must not be held by a head."""
    if not os.path.exists(path):
        raise JournalError(f"no journal at {path!r}")
    _load_sqlite()
    try:
        db = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    except sqlite3.Error as exc:
        raise JournalError(f"cannot open journal {path!r}: {exc}") from None
    try:
        if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            raise JournalError(f"{path!r} is not a shoal journal")
        return _summary(db)
    except sqlite3.Error as exc:
        if "not a database" in str(exc):
            raise JournalError(f"{path!r} is not a shoal journal (not an SQLite file)") from None
        raise JournalError(f"cannot read journal {path!r}: {exc}") from None
    finally:
        db.close()


def _summary(db: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT r.run, r.started, r.ended, coalesce(sum(t.n_reused), 0), "
        "coalesce(sum(t.n_submitted), 0), "
        "coalesce(sum(t.n_ok), 0), coalesce(sum(t.n_failed), 0) "
        "FROM runs AS r LEFT JOIN turns AS t ON t.run = r.run "
        "GROUP BY r.run ORDER BY r.run").fetchall()
    names = ("run", "started", "ended", "reused", "submitted", "ok", "failed")
    return [dict(zip(names, row, strict=True)) for row in rows]


def main(argv: list[str] | None = None) -> int:
    """``python -m shoal.head.journal FILE``: one line per run of a journal."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m shoal.head.journal", description=main.__doc__)
    ap.add_argument("file")
    args = ap.parse_args(argv)
    try:
        runs = summary(args.file)
    except JournalError as exc:
        print(f"shoal journal: {exc}", file=sys.stderr)
        return 2
    print(f"{'run':>4} {'started':<20}{'state':<10}{'submitted':>10}{'ok':>10}{'failed':>8}"
          f"{'reused':>10}")
    for r in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"]))
        state = "ended" if r["ended"] is not None else "killed"  # or still running
        print(f"{r['run']:>4} {started:<20}{state:<10}{r['submitted']:>10}{r['ok']:>10}"
              f"{r['failed']:>8}{r['reused']:>10}")
    return 0


def _unpack(blob: bytes) -> list[Any]:
    return msgpack.unpackb(blob, raw=False, use_list=False, strict_map_key=False)


def _rollback(db: sqlite3.Connection) -> None:
    # SQLite rolls back by itself on some errors (SQLITE_FULL): keep the first error.
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass


if __name__ == "__main__":
    raise SystemExit(main())
