"""The supervisor's housekeeping: what the run's processes and files weigh, and a store that stays
bounded on a run of days.

Every MEMORY_SAMPLE_SECONDS, on a thread of the supervisor (a pass walks the checkpoint folders and
deletes in batches, which must not hold up the loop that promotes a standby within 0.2 s):

1. `process_memory`: the resident memory (VmRSS) of every long-lived process of the run, one row
   each: the supervisor, the broker, the simulator, the dashboard, each Spark job's Python driver
   and, apart from it, its Spark JVM (`fraud-jvm`) and that JVM's Python workers summed
   (`fraud-pyworkers`); the warm standbys likewise (`fraud-standby`, `fraud-standby-jvm`, ...).
   A name is a role: after a takeover `fraud` is the process that now runs the job.
2. `storage_bytes`: the store (file, WAL, shared memory), the checkpoint root (Spark's logs and
   RocksDB state) and the local broker's data folder.
3. Retention (`RULES`): rows older than STORE_RETENTION_HOURS leave the tables that grow with
   time (every decision, batch, audit, sample), a few thousand rows per write transaction, so the
   jobs' sink writes wait milliseconds, not seconds. What each pass deleted, and the horizon, goes
   to `store_retention`. Tables that grow only with what people do (commands, recoveries,
   quarantines) are kept whole, and so is the sink ledger `sink_batches`: the exactly-once sinks
   look a batch up in it, `ledger.check_bound` needs a sink's rows to tell its checkpoint, and
   the audit sums a query's applications over its whole input from it. Bounding the ledger
   belongs with the audit that reads it.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from controlplane.clock import now_ms
from controlplane.store import connect, transaction
from infra import broker
from infra.config import Settings
from pipelines.supervisor import memory

log = logging.getLogger("supervisor")

BATCH_ROWS = 2000      # rows per delete transaction
PAUSE_S = 0.02         # between two delete transactions: the jobs' writers get the lock


@dataclass(frozen=True)
class Rule:
    """Rows of `table` whose `column` (ms since the epoch) lies before the horizon are deleted.
    `kinds`: the table is indexed by (kind, column), so each kind is pruned on its own and the
    index serves the delete; `ends`: a second time column that must lie before the horizon too
    (a window is deleted once it has ended, not when it began)."""
    table: str
    column: str
    kinds: tuple[str, ...] = ()
    ends: str | None = None


RULES: tuple[Rule, ...] = (
    Rule("decisions", "decided_at"),
    Rule("batch_progress", "ts"),
    Rule("batch_stages", "ts"),
    Rule("audit", "ts"),
    Rule("fraud_paths", "bucket"),
    Rule("windows", "window_start", kinds=("tumbling", "sliding", "session"), ends="window_end"),
    Rule("late_events", "window_start", kinds=("tumbling", "sliding", "session")),
    Rule("query_failures", "ts"),
    Rule("rejected_writes", "ts"),
    Rule("process_memory", "ts"),
    Rule("storage_bytes", "ts"),
)


def prune_rule(db, rule: Rule, horizon: int, batch: int = BATCH_ROWS, pause_s: float = PAUSE_S) -> int:
    """Delete the rule's rows older than `horizon`, `batch` rows per write transaction."""
    deleted = 0
    for kind in rule.kinds or (None,):
        where = f"{rule.column} < ?" + (" AND kind = ?" if kind else "") + (f" AND {rule.ends} < ?" if rule.ends else "")
        args = [horizon] + ([kind] if kind else []) + ([horizon] if rule.ends else [])
        while True:
            with transaction(db) as conn:
                n = conn.execute(f"DELETE FROM {rule.table} WHERE rowid IN "
                                 f"(SELECT rowid FROM {rule.table} WHERE {where} LIMIT ?)", [*args, batch]).rowcount
            deleted += n
            if n < batch:
                break
            time.sleep(pause_s)
    return deleted


def prune(db, now: int, retention_hours: float, rules: tuple[Rule, ...] = RULES, batch: int = BATCH_ROWS,
          pause_s: float = PAUSE_S) -> dict[str, int]:
    """Apply the retention to every rule's table; {table: rows deleted}. A retention of 0 or less
    keeps everything."""
    if retention_hours <= 0:
        return {}
    horizon = now - int(retention_hours * 3_600_000)
    out = {}
    for rule in rules:
        out[rule.table] = n = prune_rule(db, rule, horizon, batch, pause_s)
        db.conn.execute("INSERT INTO store_retention (name, horizon, deleted, deleted_total, ran_at) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET horizon = excluded.horizon, "
                        "deleted = excluded.deleted, deleted_total = deleted_total + excluded.deleted, "
                        "ran_at = excluded.ran_at", [rule.table, horizon, n, n, now_ms()])
    return out


# --- sampling -------------------------------------------------------------------------------------

def process_rows(named: dict[str, tuple[int, bool]], table: dict[int, memory.Proc] | None = None
                 ) -> list[tuple[str, int, float]]:
    """(process, pid, rss MB) of each named process ({name: (pid, is a PySpark driver)}); a
    PySpark driver brings its JVM and Python workers (`memory.spark_rows`). Gone ones are left out."""
    table = table if table is not None else memory.process_table()
    rows = []
    for name, (pid, spark) in named.items():
        if spark:
            rows.extend(memory.spark_rows(name, pid, table))
        else:
            rss = memory.read_rss_mb(pid)
            if rss is not None:
                rows.append((name, pid, rss))
    return rows


def _kafka_bytes(s: Settings) -> int | None:
    """The local brokers' data, every node's (None: none started yet)."""
    sizes = [b for b in (memory.dir_bytes(d) for d in broker.data_dirs(s)) if b is not None]
    return sum(sizes) if sizes else None


def storage_rows(s: Settings) -> list[tuple[str, str, int]]:
    """(what, path, bytes) of the store, the checkpoint root and the local broker's data."""
    out = []
    for what, path, size in (("store", s.store_path, memory.store_bytes(s.store_path)),
                             ("checkpoints", s.checkpoint_root, memory.dir_bytes(s.checkpoint_root)),
                             ("kafka", s.kafka_dir, None if s.external_bootstrap else _kafka_bytes(s))):
        if size is not None:
            out.append((what, str(path), size))
    return out


def record(db, ts: int, processes: list[tuple[str, int, float]], storage: list[tuple[str, str, int]]) -> None:
    with transaction(db) as conn:
        conn.executemany("INSERT OR REPLACE INTO process_memory (ts, process, pid, rss_mb) VALUES (?, ?, ?, ?)",
                         [(ts, name, pid, round(rss, 1)) for name, pid, rss in processes])
        conn.executemany("INSERT OR REPLACE INTO storage_bytes (ts, what, path, bytes) VALUES (?, ?, ?, ?)",
                         [(ts, what, path, size) for what, path, size in storage])


def run_pass(db, s: Settings, named: dict[str, tuple[int, bool]], now: int | None = None) -> dict:
    """One housekeeping pass: sample, record, prune. {"processes", "storage", "pruned"}."""
    ts = now or now_ms()
    table = memory.process_table()
    named = dict(named)
    for i, pid in enumerate(memory.find_dashboards(s.store_path, table)):
        named["dashboard" if i == 0 else f"dashboard-{i + 1}"] = (pid, False)
    processes, storage = process_rows(named, table), storage_rows(s)
    record(db, ts, processes, storage)
    return {"processes": processes, "storage": storage, "pruned": prune(db, ts, s.store_retention_hours)}


class Housekeeper:
    """The pass every MEMORY_SAMPLE_SECONDS on its own thread; `named()` gives the processes to
    sample now ({name: (pid, is a PySpark driver)}), read from the supervisor's children."""

    def __init__(self, s: Settings, named: Callable[[], dict[str, tuple[int, bool]]], stopping: Callable[[], bool]):
        self.s, self.named, self.stopping = s, named, stopping
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="housekeeping", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        db = connect(s=self.s)
        every = max(1.0, self.s.memory_sample_seconds)
        due = time.monotonic()
        while not self.stopping():
            if time.monotonic() < due:
                time.sleep(min(0.5, due - time.monotonic()))
                continue
            due += every
            try:
                done = run_pass(db, self.s, {"supervisor": (os.getpid(), False), **self.named()})
                pruned = {t: n for t, n in done["pruned"].items() if n}
                if pruned:
                    log.info("retention (%g h): deleted %s", self.s.store_retention_hours,
                             ", ".join(f"{n:,} {t}" for t, n in pruned.items()))
            except Exception as exc:  # store busy, a process gone mid-read: next round
                log.warning("housekeeping skipped: %s", exc)
            due = max(due, time.monotonic())
