"""The store connection every page opens, and the frame helpers the page modules share."""
from __future__ import annotations

from contextlib import contextmanager

import pandas as pd

from controlplane.clock import now_ms
from controlplane.store import connect

__all__ = ["open_store", "frame", "scalar", "to_time", "since", "now_ms", "LEDGER_ROWS"]

LEDGER_ROWS = 100_000  # the newest sink-ledger records a page reads at most


@contextmanager
def open_store(settings):
    """A short-lived store connection that waits at most `dashboard_store_timeout_ms` for a lock."""
    db = connect(settings.store_path, busy_timeout_ms=settings.dashboard_store_timeout_ms)
    try:
        yield db
    finally:
        db.conn.close()


def frame(db, sql: str, args=()) -> pd.DataFrame:
    """The rows of one query as a DataFrame (its columns even when it returns no row)."""
    cursor = db.conn.execute(sql, list(args))
    columns = [c[0] for c in cursor.description]
    return pd.DataFrame(cursor.fetchall(), columns=columns)


def scalar(db, sql: str, args=()):
    row = db.conn.execute(sql, list(args)).fetchone()
    return row[0] if row else None


def to_time(ms: pd.Series) -> pd.Series:
    """Milliseconds since the epoch as (UTC) datetimes."""
    return pd.to_datetime(pd.to_numeric(ms, errors="coerce"), unit="ms")


def since(now: int | None, minutes: float) -> int:
    return (now or now_ms()) - int(minutes * 60_000)
