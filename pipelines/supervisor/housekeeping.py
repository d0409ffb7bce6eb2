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
   quarantines) are kept whole.
4. The sink ledger `sink_batches` keeps what recovery can still consult (`ledger.prune`: per sink
   and checkpoint the newest MIN_BATCHES_TO_RETAIN batches, Spark's own retention of its offset
   and commit logs, every dropped row, and whatever the audit has not folded or still holds in
   its horizon); `card_profiles` keeps the cards the stateful path still holds (written within
   the event-time history's TTL, 61 days or more), the ones a real-time start seeds.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable

from controlplane.clock import now_ms
from controlplane.store import connect, transaction
from infra import broker
from infra.storage import is_remote, total_bytes
from infra.config import Settings
from pipelines.supervisor import memory
from pipelines.supervisor.rounds import RoundThread

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


def ledger_folded(db) -> dict[str, int]:
    """{sink: the newest ledger id every audit cut of that sink has folded}."""
    from pipelines.audit.folds import UsageCut
    from pipelines.guarantees import POLICIES

    cuts = dict(db.execute("SELECT name, state FROM audit_cuts WHERE name LIKE 'usage:%'").fetchall())
    return {POLICIES[g].query: UsageCut.from_json(cuts[f"usage:{g}"]).ledger_pos
            for g in POLICIES if f"usage:{g}" in cuts}


def prune_ledger(db, s: Settings, now: int, batch: int = BATCH_ROWS, pause_s: float = PAUSE_S) -> int:
    """The sink ledger's rows no restart can consult (ledger.prune), `batch` rows per sink and
    checkpoint per write transaction."""
    from controlplane import ledger

    before = now - int(max(s.audit_horizon_minutes * 60_000, 60_000))
    folded, deleted = ledger_folded(db), 0
    while True:
        with transaction(db) as conn:
            n = ledger.prune(conn, s.min_batches_to_retain, before, folded, limit=batch)
        deleted += n
        if n < batch:
            return deleted
        time.sleep(pause_s)


def prune_profiles(db, s: Settings, now: int, batch: int = BATCH_ROWS, pause_s: float = PAUSE_S) -> int:
    """Card profiles not written for the event-time history's TTL (features.history_ttl_ms: at
    least the 60 days of a card's windows): the stateful path has dropped those cards' windows,
    so a real-time seed must not bring them back. Their analyzers' profiles go after
    STATE_TTL_MINUTES already: the seed reads only the history of a row older than that."""
    from pipelines.fraud.features import history_ttl_ms

    horizon = now - history_ttl_ms(s.state_ttl_minutes * 60_000, s.label_delay_days)
    return prune_rule(db, Rule("card_profiles", "updated_at"), horizon, batch, pause_s)


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
        note(db, rule.table, horizon, n)
    return out


def note(db, name: str, horizon: int, deleted: int) -> None:
    """What a pass deleted from `name`, in `store_retention`."""
    db.conn.execute("INSERT INTO store_retention (name, horizon, deleted, deleted_total, ran_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET horizon = excluded.horizon, "
                    "deleted = excluded.deleted, deleted_total = deleted_total + excluded.deleted, "
                    "ran_at = excluded.ran_at", [name, horizon, deleted, deleted, now_ms()])


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


GROWING_TABLES = ("sink_batches", "card_profiles")


def table_rows(store_path) -> list[tuple[str, str, int, int]]:
    """(`table:<name>`, store path, bytes, rows) of each GROWING_TABLES table: its pages and its
    indexes' pages (SQLite's dbstat)."""
    import sqlite3

    if not os.path.exists(store_path):
        return []
    conn = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True, timeout=2)
    try:
        out = []
        for table in GROWING_TABLES:
            names = [table] + [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", [table])]
            size = sum(conn.execute("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ? AND aggregate = TRUE",
                                    [n]).fetchone()[0] for n in names)
            rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            out.append((f"table:{table}", str(store_path), int(size), int(rows)))
        return out
    finally:
        conn.close()


def seed_row(s: Settings) -> list[tuple[str, str, int, int]]:
    """The newest real-time seed (every profile it loads into the executor's memory): (`realtime-seed`,
    path, bytes, cards), none before a real-time start."""
    seeds = sorted((s.fraud_files / "realtime-seeds").glob("*.tsv"), key=lambda p: p.stat().st_mtime)
    if not seeds:
        return []
    with open(seeds[-1], "rb") as f:
        cards = sum(1 for line in f if line.startswith(b"card\t"))
    return [("realtime-seed", str(seeds[-1]), seeds[-1].stat().st_size, cards)]


def checkpoint_bytes(root) -> int | None:
    """The checkpoint root's bytes: on disk for a local folder, the files' length on HDFS."""
    if is_remote(root):
        return total_bytes(root)
    return memory.dir_bytes(root)


def storage_rows(s: Settings) -> list[tuple]:
    """(what, path, bytes[, rows]) of the store, the checkpoint root, the local broker's data, the
    store's two tables that grow with the input, and the newest real-time seed."""
    out: list[tuple] = []
    for what, path, size in (("store", s.store_path, memory.store_bytes(s.store_path)),
                             ("checkpoints", s.checkpoint_root, checkpoint_bytes(s.checkpoint_root)),
                             ("kafka", s.kafka_dir, None if s.external_bootstrap else _kafka_bytes(s))):
        if size is not None:
            out.append((what, str(path), size))
    for extra in (table_rows, seed_row):
        try:
            out.extend(extra(s.store_path) if extra is table_rows else extra(s))
        except Exception as exc:  # noqa: BLE001 - a figure missing this round, not a failed pass
            log.warning("housekeeping: %s not measured: %s", extra.__name__, exc)
    return out


def record(db, ts: int, processes: list[tuple[str, int, float]], storage: list[tuple[str, str, int]]) -> None:
    with transaction(db) as conn:
        conn.executemany("INSERT OR REPLACE INTO process_memory (ts, process, pid, rss_mb) VALUES (?, ?, ?, ?)",
                         [(ts, name, pid, round(rss, 1)) for name, pid, rss in processes])
        conn.executemany("INSERT OR REPLACE INTO storage_bytes (ts, what, path, bytes, rows) VALUES (?, ?, ?, ?, ?)",
                         [(ts, *row[:3], row[3] if len(row) > 3 else None) for row in storage])


def run_pass(db, s: Settings, named: dict[str, tuple[int, bool]], now: int | None = None) -> dict:
    """One housekeeping pass: sample, record, prune. {"processes", "storage", "pruned"}."""
    ts = now or now_ms()
    table = memory.process_table()
    named = dict(named)
    for i, pid in enumerate(memory.find_dashboards(s.store_path, table)):
        named["dashboard" if i == 0 else f"dashboard-{i + 1}"] = (pid, False)
    processes, storage = process_rows(named, table), storage_rows(s)
    record(db, ts, processes, storage)
    pruned = prune(db, ts, s.store_retention_hours)
    pruned["sink_batches"] = prune_ledger(db, s, ts)
    note(db, "sink_batches", ts - int(max(s.audit_horizon_minutes * 60_000, 60_000)), pruned["sink_batches"])
    pruned["card_profiles"] = prune_profiles(db, s, ts)
    note(db, "card_profiles", ts - s.state_ttl_minutes * 60_000, pruned["card_profiles"])
    return {"processes": processes, "storage": storage, "pruned": pruned}


class Housekeeper(RoundThread):
    """The pass every MEMORY_SAMPLE_SECONDS on its own thread; `named()` gives the processes to
    sample now ({name: (pid, is a PySpark driver)}), read from the supervisor's children."""

    name = "housekeeping"

    def __init__(self, s: Settings, named: Callable[[], dict[str, tuple[int, bool]]], stopping: Callable[[], bool]):
        super().__init__(s, stopping)
        self.named = named

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
