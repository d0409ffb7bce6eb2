"""Split-brain protection after Hazelcast Jet: a lease with a fencing epoch per job.

An instance takes the lease when it starts, which raises the job's epoch; every sink write carries
the writer's epoch and is checked inside the same SQLite transaction as the write. A stale instance
(a zombie still running after a newer one started) holds an older epoch, so its writes are
rejected and counted instead of applied.
"""
from __future__ import annotations

import os
import socket
from contextlib import contextmanager

import sqlite_utils

from controlplane.clock import now_ms
from controlplane.store import transaction


class FencedError(RuntimeError):
    """This instance's epoch is older than the job's current one: it must not write."""


def take_lease(db: sqlite_utils.Database, job: str) -> int:
    """Raise the job's epoch and return it: from now on, only this instance may write."""
    holder = f"{socket.gethostname()}:{os.getpid()}"
    with transaction(db) as conn:
        row = conn.execute("SELECT epoch FROM leases WHERE job = ?", (job,)).fetchone()
        epoch = (row[0] if row else 0) + 1
        now = now_ms()
        conn.execute("INSERT INTO leases (job, epoch, holder, taken_at, renewed_at) VALUES (?, ?, ?, ?, ?) "
                     "ON CONFLICT(job) DO UPDATE SET epoch = excluded.epoch, holder = excluded.holder, "
                     "taken_at = excluded.taken_at, renewed_at = excluded.renewed_at",
                     (job, epoch, holder, now, now))
    return epoch


def renew(db: sqlite_utils.Database, job: str, epoch: int) -> bool:
    """The holder's heartbeat; False when a newer epoch holds the lease (this one is superseded)."""
    cur = db.conn.execute("UPDATE leases SET renewed_at = ? WHERE job = ? AND epoch = ?", (now_ms(), job, epoch))
    return cur.rowcount == 1


def release(db: sqlite_utils.Database, job: str, epoch: int) -> None:
    """A clean stop: the lease is free at once (a standby need not wait for it to expire)."""
    db.conn.execute("UPDATE leases SET renewed_at = 0 WHERE job = ? AND epoch = ?", (job, epoch))


def lease_age_ms(db: sqlite_utils.Database, job: str) -> int | None:
    """Milliseconds since the holder last renewed the job's lease; None when nobody ever held it."""
    row = db.conn.execute("SELECT renewed_at FROM leases WHERE job = ?", (job,)).fetchone()
    return None if row is None else now_ms() - (row[0] or 0)


def holder(db: sqlite_utils.Database, job: str) -> str | None:
    """Who holds the job's lease ("host:pid"), None when nobody ever did."""
    row = db.conn.execute("SELECT holder FROM leases WHERE job = ?", (job,)).fetchone()
    return row[0] if row else None


def check(conn, job: str, epoch: int, what: str = "") -> None:
    """Call inside the sink's write transaction (`store.transaction`): raise FencedError when stale.

    The caller's transaction then rolls back, and it records the rejection with
    `record_rejection`, outside the rolled-back transaction.
    """
    current = _epoch(conn, job)
    if epoch < current:
        raise FencedError(f"{job}: write with epoch {epoch} rejected, current epoch is {current}"
                          + (f" ({what})" if what else ""))


def _epoch(conn, job: str) -> int:
    row = conn.execute("SELECT epoch FROM leases WHERE job = ?", (job,)).fetchone()
    return row[0] if row else 0


def current_epoch(db: sqlite_utils.Database, job: str) -> int:
    """The job's newest epoch: an instance holding an older one has been superseded."""
    return _epoch(db.conn, job)


def is_current(db: sqlite_utils.Database, job: str, epoch: int) -> bool:
    """Whether an instance at `epoch` still holds the job's newest lease (none newer was taken)."""
    return current_epoch(db, job) <= epoch


def record_rejection(db: sqlite_utils.Database, job: str, epoch: int, what: str) -> None:
    db.conn.execute("INSERT INTO rejected_writes (job, epoch, current_epoch, ts, what) VALUES (?, ?, ?, ?, ?)",
                    (job, epoch, _epoch(db.conn, job), now_ms(), what))


@contextmanager
def fenced_write(db: sqlite_utils.Database, job: str, epoch: int, what: str):
    """One write transaction that first checks the writer's epoch: every store sink writes so.

    Raises FencedError (and rolls back) when a newer instance holds the lease.
    """
    with transaction(db) as conn:
        check(conn, job, epoch, what)
        yield conn
