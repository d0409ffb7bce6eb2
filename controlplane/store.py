"""The SQLite store (WAL mode, through sqlite-utils): the one owner of every table definition.

Spark jobs write here from their driver; the dashboard, the supervisor and the audit read here.
Writers keep their transactions short, and every connection waits (busy timeout) rather than
failing when another process holds the write lock.
"""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils
from sqlite_utils.migrations import Migrations

from infra.config import Settings, load

BUSY_TIMEOUT_MS = 10_000

# table -> (columns, primary key). Column types are SQLite affinities.
TABLES: dict[str, tuple[dict[str, type], str | tuple[str, ...] | None]] = {
    # one row per transaction, upserted by txn_id (the fraud job's idempotent sink)
    "decisions": ({
        "txn_id": str, "card_id": str, "merchant_id": str, "amount_cents": int, "event_time": int,
        "produced_at": int, "decided_at": int, "score_avg_ticket": float, "score_proximity": float,
        "score_velocity": float, "score": float, "is_fraud": int, "is_late": int, "batch_id": int,
        "model_version": int, "explanation": str,
    }, "txn_id"),
    # the score aggregator's versions (pipelines/fraud/models.py): 0, the rules, is not a row; each
    # learned one is, with its MLlib files' folder, its features in order, its training window, the
    # labels it was allowed to see (known by `as_of`) and its validation figures
    "models": ({"version": int, "kind": str, "params": str, "features": str, "train_from": str,
                "train_to": str, "as_of": str, "threshold": float, "validation": str, "candidates": str,
                "path": str, "train_rows": int, "train_frauds": int, "fit_s": float, "created_at": int,
                "explain": str},
               "version"),
    # the version each job decides with since its start (0: the rules; `why`: the one sentence when
    # it fell back to the rules because a model could not be loaded); `chosen`: the version its last
    # successful use-model switched to (null: none), which its next start serves again
    "model_use": ({"job": str, "version": int, "why": str, "since": int, "epoch": int, "chosen": int}, "job"),
    # bench handbook's figures per run and aggregator (rules, learned): the protocol's test period,
    # data the aggregator was not tuned on, for the dashboard's headline quality
    "handbook_runs": ({"run_id": str, "ts": int, "model": str, "model_version": int, "auc_roc": float,
                       "average_precision": float, "card_precision_at_100": float, "test_transactions": int,
                       "test_frauds": int, "protocol": str, "per_scenario": str, "card_precision_per_day": str},
                      ("run_id", "model")),
    # usage counts per guarantee: one row each, increments applied by the sinks
    "usage_counts": ({"guarantee": str, "processed": int, "fraud": int, "updated_at": int}, "guarantee"),
    # the sink ledger: every batch a store sink was handed, and what it did with it, in the same
    # SQLite transaction as its effect. `checkpoint_id` is the Spark checkpoint's query id (its
    # `metadata` file): a batch id means something only within one checkpoint. outcome: applied,
    # skipped (exactly-once: this batch id was applied before, a replay), dropped (at-most-once:
    # the write failed and is never retried). Offsets are the batch's Kafka range from Spark's
    # offset log, so the auditor can tell which input records each application covered.
    "sink_batches": ({"id": int, "sink": str, "checkpoint_id": str, "batch_id": int, "outcome": str,
                      "processed": int, "fraud": int, "start_offsets": str, "end_offsets": str,
                      "reason": str, "epoch": int, "ts": int}, "id"),
    # every micro-batch of every query, from StreamingQueryListener (state_rows_removed: Spark's
    # numRowsRemoved, rows its state operators evicted: by the watermark, a TTL or the operator's
    # own delete; event_time_max: the newest event time the batch saw, eventTime["max"]; sources:
    # JSON {topics read: {"rows", "per_s"}} per source, where num_input_rows and input_rows_per_s
    # are Spark's sums over all of them)
    "batch_progress": ({
        "query": str, "batch_id": int, "ts": int, "num_input_rows": int, "input_rows_per_s": float,
        "processed_rows_per_s": float, "duration_ms": int, "trigger_ms": int, "commit_ms": int,
        "state_rows": int, "state_memory_bytes": int, "state_disk_bytes": int, "state_rows_dropped_late": int,
        "state_rows_removed": int, "watermark": str, "event_time_max": str, "start_offsets": str,
        "end_offsets": str, "checkpoint": str, "offsets_ms": int, "planning_ms": int,
        "state_update_ms": int, "state_commit_ms": int, "sources": str,
    }, ("query", "batch_id", "ts")),
    # inside a fraud decisions batch (its foreachBatch, on the driver): computing the batch in Spark
    # (Kafka read, parse, the stateful scoring, the aggregator: one Spark job), the per-record
    # decisions in Python, the store's transaction and the Kafka transaction (pipelines.fraud.sinks)
    "batch_stages": ({"query": str, "batch_id": int, "ts": int, "rows": int, "compute_ms": int,
                      "decide_ms": int, "store_ms": int, "kafka_ms": int}, ("query", "batch_id", "ts")),
    # commands to the supervisor / simulator, and their life
    "commands": ({
        "id": int, "kind": str, "job": str, "params": str, "status": str, "issued_at": int,
        "started_at": int, "done_at": int, "result": str,
    }, "id"),
    # what the supervisor knows of each job (ui_url, ui_pid: the Spark UI of the job's process
    # with that pid, written by the job itself once its SparkSession is up)
    "job_status": ({"job": str, "status": str, "pid": int, "restarts": int, "last_batch": int,
                    "started_at": int, "updated_at": int, "detail": str, "ui_url": str, "ui_pid": int}, "job"),
    # split-brain protection: the current fencing epoch per job
    # (renewed_at: the holder's heartbeat; a warm standby takes over when it stops)
    "leases": ({"job": str, "epoch": int, "holder": str, "taken_at": int, "renewed_at": int}, "job"),
    # warm standbys that are up and waiting for their job's lease (written by the standby itself)
    "standbys": ({"job": str, "pid": int, "ready_at": int}, "job"),
    "rejected_writes": ({"id": int, "job": str, "epoch": int, "current_epoch": int, "ts": int,
                         "what": str}, "id"),
    # truth vs observed over time, from the live auditor
    # (a consistent cut: truth and observed both up to the offsets the query has committed; lag
    # is what the input holds beyond them; duplicates split into the query's own replays and
    # ids that came twice in its input)
    "audit": ({"ts": int, "job": str, "guarantee": str, "metric": str, "truth": int, "observed": int,
               "lost": int, "duplicated": int, "replayed": int, "upstream": int, "lag_records": int,
               "lag_seconds": float, "committed_offsets": str, "sink_total": int,
               "checkpoint_id": str, "committed_batch": int}, ("ts", "job", "guarantee", "metric")),
    # the live auditor's folded cuts (pipelines.audit.folds), one JSON state each: it resumes from them
    "audit_cuts": ({"name": str, "state": str, "updated_at": int}, "name"),
    # dead letters seen by the fraud job, counted by reason
    "dead_letters": ({"reason": str, "count": int, "updated_at": int}, "reason"),
    # records a job read and did not keep, per batch and kind (nothing dropped without a trace):
    # "rejected", decisions a usage query left out as breaking the contract (from its progress's
    # observed metric; detail: the reasons, JSON); "repeated", decisions the fraud job's store
    # sink did not keep because their txn_id was decided before (the store keeps the first, the
    # decisions topic has both; detail: up to ten of the txn_ids, JSON). `checkpoint`: the
    # query's checkpoint, within which a batch id means something
    "not_kept": ({"job": str, "query": str, "checkpoint": str, "batch_id": int, "kind": str, "count": int,
                  "detail": str, "ts": int}, ("query", "checkpoint", "batch_id", "kind")),
    # every failure of a streaming query, as its job's QueryRunner saw it: the batch it failed on
    # (id and Kafka range, from Spark's offset log), the error signature (exception class and
    # first message line), how many identical failures in a row it makes, and what the runner did
    # (restart, quarantine, not reproduced, give up)
    "query_failures": ({"id": int, "job": str, "query": str, "checkpoint_id": str, "batch_id": int,
                        "start_offsets": str, "end_offsets": str, "error": str, "in_a_row": int,
                        "action": str, "epoch": int, "ts": int}, "id"),
    # poison batches (pipelines/engine/poison.py): a batch that failed POISON_BATCH_FAILURES times
    # the same way, the records of it that fail on their own (JSON list of partition, offset,
    # txn_id, reason) and what became of them. status: pending (found, not yet in the dead-letter
    # topic), dead-lettered (sent, and excluded from the query's source from then on), not
    # reproduced (no record fails alone: nothing dead-lettered). attempts / last_error: the
    # dead-letter sends tried and the last one's error.
    "quarantines": ({"id": int, "job": str, "query": str, "checkpoint_id": str, "batch_id": int,
                     "start_offsets": str, "end_offsets": str, "error": str, "failures": int,
                     "batch_records": int, "records": str, "dead_lettered": int, "status": str,
                     "attempts": int, "last_error": str, "created_at": int, "done_at": int,
                     "epoch": int}, "id"),
    # recovery time per injected fault (via: "standby" when a warm standby took over, else "restart")
    # and where its seconds went (pipelines.supervisor.faults.phases): kill -> lease taken ->
    # first batch with rows started -> that batch committed
    "recoveries": ({"id": int, "job": str, "fault": str, "killed_at": int, "recovered_at": int,
                    "seconds": float, "via": str, "command_id": int, "to_lease_s": float,
                    "to_batch_s": float, "batch_s": float}, "id"),
    # event-time windows of the usage job
    "windows": ({"kind": str, "key": str, "window_start": int, "window_end": int, "processed": int,
                 "fraud": int, "updated_at": int}, ("kind", "key", "window_start")),
    "late_events": ({"kind": str, "window_start": int, "count": int}, ("kind", "window_start")),
    # the fraud job's latest profile per card (its stateful path writes it in real-time mode), and
    # the card's event-time history ("times;amounts;over" of its last 60 days: the model's card windows)
    "card_profiles": ({"card_id": str, "count": int, "mean": float, "lat": float, "lon": float,
                       "place_time": int, "times": str, "updated_at": int, "history": str}, "card_id"),
    # what those profiles cover: the batch that last wrote them (its end offsets), in the same
    # transaction; a real-time start folds from there (pipelines/fraud/seed.py)
    "card_profile_cuts": ({"sink": str, "checkpoint_id": str, "batch_id": int, "end_offsets": str, "ts": int},
                          "sink"),
    # where each usage query first started reading (at-most-once's truth starts there)
    "usage_starts": ({"guarantee": str, "topic": str, "offsets": str, "started_at": int},
                     ("guarantee", "topic")),
    # each start of the fraud job's real-time query, with the guarantee it started under (written by
    # the job; resumed: it started from its checkpoint, so it replays what the last run left)
    "fraud_rt_runs": ({"id": int, "started_at": int, "guarantee": str, "resumed": int, "epoch": int,
                       "pid": int}, "id"),
    # the fraud job's two paths per slice of arrival time, from the live auditor
    # (pipelines.audit.paths.buckets over the transactions, decisions-rt and decisions topics)
    "fraud_paths": ({"path": str, "bucket": int, "transactions": int, "decided": int, "undecided": int,
                     "duplicated": int, "filled": int, "p50_ms": int, "p99_ms": int, "max_ms": int,
                     "alerts": int, "confirmed": int, "updated_at": int}, ("path", "bucket")),
    # what each kill or restart of the fraud job did to its real-time path (paths.episode), per
    # command, with the guarantee the restarted query ran under
    "fraud_rt_gaps": ({"command_id": int, "kind": str, "guarantee": str, "killed_at": int, "recovered_at": int,
                       "down_ms": int, "transactions": int, "undecided": int, "replayed": int,
                       "p99_after_recovery_ms": int, "filled_by_accurate": int, "accurate_p99_ms": int,
                       "accurate_max_ms": int, "updated_at": int}, "command_id"),
    # the event-time watermark of the windows query, advanced in the same transaction as its results
    "usage_watermarks": ({"name": str, "max_event_time": int, "watermark": int, "updated_at": int},
                         "name"),
    # the supervisor's housekeeping (pipelines/supervisor/housekeeping.py), every
    # MEMORY_SAMPLE_SECONDS: the resident memory (VmRSS) of each long-lived process of the run, one
    # row per process: supervisor, broker, simulator, dashboard, each Spark job's Python driver
    # (fraud, usage, fraud-standby, ...) and apart from it its Spark JVM (fraud-jvm, ...) and the
    # Spark Python workers under that JVM (fraud-pyworkers: their RSS summed)
    "process_memory": ({"ts": int, "process": str, "pid": int, "rss_mb": float}, ("ts", "process")),
    # the same pass: bytes on disk of the store (its file, WAL and shared memory), the checkpoint
    # root (offset and commit logs, RocksDB state) and the local broker's data
    # (what `table:sink_batches` / `table:card_profiles`: that table's pages with its indexes, and
    # `rows` its rows; `realtime-seed`: the newest real-time seed file, `rows` its cards)
    "storage_bytes": ({"ts": int, "what": str, "path": str, "bytes": int, "rows": int}, ("ts", "what")),
    # the store's retention (STORE_RETENTION_HOURS), per table it prunes: rows older than `horizon`
    # (ms) are gone; how many the last pass deleted and all passes together
    "store_retention": ({"name": str, "horizon": int, "deleted": int, "deleted_total": int, "ran_at": int},
                        "name"),
    # what `python -m bench latency` measured, one row per run (decision append - transaction
    # append, both the broker's LogAppendTime): the dashboard shows these, never estimates
    "latency_runs": ({"ts": int, "mode": str, "rate": float, "achieved_rate": float, "p50_ms": float,
                      "p95_ms": float, "p99_ms": float, "max_ms": float, "measured": int, "undecided": int,
                      "duplicates": int, "behind_schedule_p99_ms": float, "precision": float,
                      "recall": float}, None),
    # what `python -m bench quality` measured on the evaluation set (simulator/evaluation.py), one
    # row per pattern and run: fraud patterns against every legitimate transaction; legitimate ones
    # as the share flagged
    "quality": ({"run_id": str, "ts": int, "seed": int, "threshold": float, "pattern": str, "kind": str,
                 "transactions": int, "flagged": int, "precision": float, "recall": float,
                 "average_precision": float, "flagged_share": float}, ("run_id", "pattern")),
}


def connect(path: Path | str | None = None, s: Settings | None = None,
            busy_timeout_ms: int = BUSY_TIMEOUT_MS, synchronous: str = "NORMAL") -> sqlite_utils.Database:
    """Open the store (creating it and its tables on first use) in WAL mode with a busy timeout.

    Readers that must stay responsive (the dashboard) pass a shorter `busy_timeout_ms`. Commits
    are `synchronous=NORMAL` (durable across a crash of any process, not across a power loss: the
    WAL is flushed at its checkpoints); the exactly-once sinks pass "FULL" (each commit flushes the
    WAL), so a batch they wrote is on disk before Spark commits it (docs/recovery.md, Power loss).
    """
    if synchronous not in ("NORMAL", "FULL"):
        raise ValueError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
    path = Path(path) if path else (s or load()).store_path
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=busy_timeout_ms / 1000, isolation_level=None,
                           check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    db = sqlite_utils.Database(conn)
    if db.journal_mode != "wal":
        db.enable_wal()
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    ensure_schema(db)
    return db


INDEXES = [("decisions", ["decided_at"]), ("decisions", ["is_fraud", "decided_at"]),
           ("decisions", ["batch_id"]), ("commands", ["status", "id"]),
           ("sink_batches", ["sink", "checkpoint_id", "batch_id"]),
           # the dashboard's bounded reads (recent batches, audit series, windows)
           ("batch_progress", ["ts"]), ("batch_stages", ["ts"]), ("audit", ["job", "metric", "ts"]), ("windows", ["kind", "window_start"]),
           ("fraud_paths", ["bucket"]), ("card_profiles", ["updated_at"]), ("quarantines", ["query", "checkpoint_id", "batch_id"]),
           ("query_failures", ["query", "ts"])]

# Changes the declarative TABLES cannot express (drops, renames); applied once per store, in order.
MIGRATIONS = Migrations("cardstream")


@MIGRATIONS(name="0001_drop_unused_tables")
def _drop_unused(db: sqlite_utils.Database) -> None:
    """transactions_raw was never written by the product; the two per-guarantee batch tables
    became the one sink ledger `sink_batches` (their rows carried no checkpoint id, so they
    cannot be carried over: a store that old is a fresh start, like its checkpoints)."""
    for name in ("transactions_raw", "usage_applied_batches", "usage_dropped_batches"):
        db[name].drop(ignore=True)


def _missing(db: sqlite_utils.Database) -> bool:
    existing = set(db.table_names())
    return any(name not in existing or not set(columns) <= set(db[name].columns_dict)
               for name, (columns, _) in TABLES.items())


def ensure_schema(db: sqlite_utils.Database) -> None:
    """Bring the store to this version's schema, in one write transaction.

    Tables and columns are declarative (created when missing; an older store gets the columns it
    lacks); drops and renames are `MIGRATIONS`, sqlite-utils' migration sets. Jobs, the
    supervisor, the dashboard and tests open the store at the same moment on a fresh run; one
    BEGIN IMMEDIATE makes them take turns (busy timeout) instead of racing table by table.
    """
    if not _missing(db) and not MIGRATIONS.pending(db):
        return
    with transaction(db):
        MIGRATIONS.apply(db)
        existing = set(db.table_names())
        for name, (columns, pk) in TABLES.items():
            if name not in existing:
                db[name].create(columns, pk=pk, if_not_exists=True)
            else:
                have = set(db[name].columns_dict)
                for col, kind in columns.items():
                    if col not in have:
                        db[name].add_column(col, kind)
        for table, columns in INDEXES:
            db[table].create_index(columns, if_not_exists=True)


@contextmanager
def transaction(db: sqlite_utils.Database):
    """One write transaction (BEGIN IMMEDIATE … COMMIT), rolled back on any error.

    The connection runs in autocommit mode, so statements outside this block commit one by one;
    inside it they land together or not at all, which is what the exactly-once sink relies on.
    """
    conn = db.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
