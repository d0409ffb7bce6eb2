"""The command table: how the dashboard and `pipelines.control` talk to the running processes.

A command is checked against the fault catalogue when it is issued (an impossible one is refused
then, with one sentence), issued once (status `pending`), claimed by exactly one executor (an UPDATE guarded by
its status, inside a write transaction, so two claimers can never both get it), and finished with
a result. Its whole life (issued, started, done, result) stays in the table.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import sqlite_utils

from controlplane import faults
from controlplane.clock import now_ms
from controlplane.store import transaction

PENDING, STARTED, DONE, FAILED = "pending", "started", "done", "failed"


@dataclass(frozen=True)
class Command:
    id: int
    kind: str
    job: str | None
    params: dict
    issued_at: int

    def param(self, name, default=None):
        return self.params.get(name, default)


def issue(db: sqlite_utils.Database, kind: str, job: str | None = None, **params) -> int:
    """Add a command for its executor; `faults.Refused` (one sentence) when it cannot be done."""
    job, params = faults.resolve(kind, job, params)
    cursor = db.conn.execute(
        "INSERT INTO commands (kind, job, params, status, issued_at) VALUES (?, ?, ?, ?, ?)",
        (kind, job, json.dumps(params), PENDING, now_ms()))
    return cursor.lastrowid


def get(db: sqlite_utils.Database, command_id: int) -> dict:
    return db["commands"].get(command_id)


def claim(db: sqlite_utils.Database, kinds: tuple[str, ...] | list[str],
          job: str | None = None) -> list[Command]:
    """Take every pending command of `kinds` (for `job`, or for any job when None), oldest first."""
    if not kinds:
        return []
    marks = ",".join("?" for _ in kinds)
    where = f"status = ? AND kind IN ({marks})" + (" AND (job = ? OR job IS NULL)" if job else "")
    args = [PENDING, *kinds] + ([job] if job else [])
    with transaction(db) as conn:
        rows = conn.execute(f"SELECT id, kind, job, params, issued_at FROM commands WHERE {where} "
                            f"ORDER BY id", args).fetchall()
        started = now_ms()
        for row in rows:
            conn.execute("UPDATE commands SET status = ?, started_at = ? WHERE id = ? AND status = ?",
                         (STARTED, started, row[0], PENDING))
    return [Command(r[0], r[1], r[2], json.loads(r[3] or "{}"), r[4]) for r in rows]


def finish(db: sqlite_utils.Database, command_id: int, result: str, ok: bool = True) -> None:
    db.conn.execute("UPDATE commands SET status = ?, done_at = ?, result = ? WHERE id = ?",
                    (DONE if ok else FAILED, now_ms(), result, command_id))


def recent(db: sqlite_utils.Database, limit: int = 50) -> list[dict]:
    return list(db.query("SELECT * FROM commands ORDER BY id DESC LIMIT ?", [limit]))
