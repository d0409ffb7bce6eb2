"""A store and checkpoint folders holding only what the real system writes, for the dashboard's tests.

Nothing is typed in: five minutes of CardStream are simulated and written as its parts write them.
- The simulator sends 40 transactions/s over two partitions (17 malformed ones first, sent by a
  `bad-input` command, which the fraud job's dead-letter query counts); one in 40 is fraud, one in
  20 is late (event time 45 s old), and the fraud job decides each (latency 6-14 ms, one in a
  hundred 30 ms more) into `decisions` (store and topic) in 1 s batches.
- Each usage query (at-most-once, at-least-once, exactly-once, and the windows) plans a batch every
  5 s, hands it to its sink (the ledger records it, `sink_batches`) and commits it (Spark's commit
  log). Spark's progress rows (`batch_progress`) follow each commit, as the listener posts them.
- Scenario "crash": `crash` on usage 70 s before the end, after the sink write of batch 45 and
  before its commit. The supervisor restarts the job (recovery recorded); 7 s after the kill the
  queries run again: at-least-once replays batch 45 and applies it a second time, exactly-once and
  the windows skip it, at-most-once starts a new checkpoint from the latest offsets and never reads
  what came meanwhile.
- Scenario "quiet": no fault; every guarantee exact.
- In both, at-least-once's last batch is planned and still running at the end: it is behind.
- Every 5 s the audit is computed with the auditor's own arithmetic (`pipelines.audit.applications`,
  `pipelines.audit.cut.figures`) on the topic and the ledger as they stood then, and recorded with
  `pipelines.audit.record`: lost and duplicated are exact at each cut and never include lag.
- The checkpoint folders (`write_checkpoints`) are Spark's format: metadata, sources/0/0, offsets/N
  (batchTimestampMs), commits/N (written at the commit time), the last 20 batches kept.

`seed_store` returns a `Seeded` whose figures the tests look for on the pages.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import sqlite3
from dataclasses import dataclass, field
from dataclasses import replace as dataclasses_replace
from pathlib import Path

import numpy as np
import pytest

from controlplane import ledger
from controlplane.store import connect
from infra.contracts import GUARANTEES
from pipelines import audit
from pipelines.audit import record_paths
from pipelines.audit.cut import Partition, figures
from pipelines.audit.paths import Stamps, survey
from pipelines.engine.checkpoints import merge_max
from pipelines.supervisor.faults import phases
from pipelines.usage.windows import MINUTE_MS, panes_to_windows

STEP_MS = 25                 # one transaction every 25 ms: 40/s
RATE = 1000 // STEP_MS
DURATION_MS = 300_000        # five minutes
TRIGGER_MS = 5_000           # the usage queries' batches
FRAUD_TRIGGER_MS = 1_000     # the fraud job's
FAULT_BATCH = 45             # crash after this batch's sink write, before its commit
RESTART_DELAY_MS = 2_000     # the supervisor's RESTART_DELAY_SECONDS
RESUME_AFTER_MS = 7_000      # kill -> the queries run again
WATERMARK_MS = 30_000
LATE_BY_MS = 45_000
BAD = 17                     # malformed messages before the first transaction, partition 0
RETAINED = 20                # Spark's minBatchesToRetain
PARTITIONS = 2
WINDOWS = "usage-windows"
CHECKPOINT_IDS = {"usage-at-most-once": "a7f3c2d1-0000-4000-8000-000000000001",
                  "usage-at-least-once": "b81e40aa-0000-4000-8000-000000000002",
                  "usage-exactly-once": "c95d11be-0000-4000-8000-000000000003",
                  WINDOWS: "d0c4e7f2-0000-4000-8000-000000000004",
                  "fraud": "e3b2a9c0-0000-4000-8000-000000000005",
                  "fraud-dlq": "f1a0b3d4-0000-4000-8000-000000000006"}
AMO_RESTARTED = "5e21b7c9-0000-4000-8000-00000000000a"  # at-most-once's checkpoint after the restart
SCORES = ("score_avg_ticket", "score_proximity", "score_velocity")


@dataclass
class Batch:
    query: str
    checkpoint_id: str
    batch_id: int
    planned: int
    start: dict
    end: dict
    handed: list = field(default_factory=list)     # [(ts, outcome)] as the sink ledger records them
    committed: int | None = None


@dataclass
class Seeded:
    now: int
    scenario: str
    fault_at: int | None
    restarted_at: int | None
    final: dict                   # guarantee -> the newest audit row (processed)
    fraud: dict                   # the fraud job's newest audit figures
    topic_end: dict               # {"transactions": {p: end}, "decisions": {p: end}}
    batches: dict                 # query -> [Batch]
    commands: list
    replayed_batch: int = FAULT_BATCH


class Stream:
    """The decisions topic (and the transactions topic, 17 malformed records ahead on partition 0)."""

    def __init__(self, t0: int, now: int):
        self.t0 = t0
        n = (now - t0) // STEP_MS
        i = np.arange(n, dtype=np.int64)
        self.times = t0 + i * STEP_MS
        self.labelled = i % 40 == 0                                  # the simulator's labels
        self.flagged = (self.labelled & (i % 1000 != 0)) | (i % 400 == 210)   # the detector's decisions
        self.late = (i % 20 == 10) & ~self.labelled
        self.partition, self.offset = i % PARTITIONS, i // PARTITIONS
        self.n = n

    def ends_at(self, t: int) -> dict[int, int]:
        """End offsets of the decisions topic at time t (records appended before t)."""
        k = int(np.searchsorted(self.times, t, "left"))
        return {p: (k - p + PARTITIONS - 1) // PARTITIONS for p in range(PARTITIONS)}

    def tx_ends_at(self, t: int) -> dict[int, int]:
        ends = self.ends_at(t)
        return {p: o + (BAD if p == 0 and t > self.t0 else 0) for p, o in ends.items()}

    def between(self, start: dict, end: dict) -> np.ndarray:
        """Record indexes in [start, end) of the decisions topic."""
        mask = np.zeros(self.n, dtype=bool)
        for p in range(PARTITIONS):
            mask |= (self.partition == p) & (self.offset >= start.get(p, 0)) & (self.offset < end.get(p, 0))
        return np.flatnonzero(mask)

    def partitions(self, until: int) -> dict[int, Partition]:
        upto = self.times <= until
        return {p: Partition(self.offset[(self.partition == p) & upto], np.flatnonzero((self.partition == p) & upto),
                             self.flagged[(self.partition == p) & upto], self.times[(self.partition == p) & upto])
                for p in range(PARTITIONS)}


def _plans(t0: int, now: int, scenario: str, fault_at: int | None, resume: int | None, query: str):
    """[(checkpoint id, batch id, planned at, replay of an earlier hand-over?)] for one usage query."""
    ckpt = CHECKPOINT_IDS[query]
    regular = [t0 + b * TRIGGER_MS + TRIGGER_MS - 200 for b in range(DURATION_MS // TRIGGER_MS)]
    if scenario != "crash":
        return [(ckpt, b, p) for b, p in enumerate(regular) if p <= now]
    before = [(ckpt, b, p) for b, p in enumerate(regular) if b <= FAULT_BATCH]
    after_times = [resume + 200] + [p for p in regular if p > resume + 200 and p <= now]
    if query == "usage-at-most-once":  # a new checkpoint, batch ids from 0, from the latest offsets
        return before + [(AMO_RESTARTED, j, p) for j, p in enumerate(after_times)]
    return before + [(ckpt, FAULT_BATCH + 1 + j, p) for j, p in enumerate(after_times)]


def simulate_usage(stream: Stream, now: int, scenario: str, fault_at: int | None, resume: int | None) -> dict:
    """query -> its batches: ranges from the topic, hand-overs and commits as each policy makes them."""
    out = {}
    for query in [f"usage-{g}" for g in GUARANTEES] + [WINDOWS]:
        batches: list[Batch] = []
        prev_end = {p: 0 for p in range(PARTITIONS)}
        for ckpt, batch_id, planned in _plans(stream.t0, now, scenario, fault_at, resume, query):
            if ckpt == AMO_RESTARTED and batch_id == 0:
                prev_end = stream.ends_at(resume)          # "latest" when the new query started
            b = Batch(query, ckpt, batch_id, planned, dict(prev_end), stream.ends_at(planned))
            prev_end = b.end
            crashed = scenario == "crash" and batch_id == FAULT_BATCH and ckpt == CHECKPOINT_IDS[query]
            b.handed.append((planned + 100, ledger.APPLIED))
            if crashed:                                     # killed at fault_at: no commit by this run
                if query != "usage-at-most-once":           # the durable ones replay it on restart
                    replay = resume + 100
                    again = ledger.APPLIED if query == "usage-at-least-once" else ledger.SKIPPED
                    b.handed.append((replay, again))
                    b.committed = resume + 150
            else:
                b.committed = planned + 150
            batches.append(b)
        last = batches[-1]
        if query == "usage-at-least-once" and last.planned > now - 1_000:  # still running at the end
            last.handed, last.committed = [], None
        out[query] = batches
    return out


def ledger_rows(stream: Stream, batches: dict, fault_at: int | None) -> list[dict]:
    """The sink ledger as the sinks write it (epoch 2 after the restart took a new lease)."""
    rows = []
    for query, bs in batches.items():
        for b in bs:
            idx = stream.between(b.start, b.end)
            for ts, outcome in b.handed:
                rows.append({"sink": query, "checkpoint_id": b.checkpoint_id, "batch_id": b.batch_id,
                             "outcome": outcome, "processed": int(idx.size), "fraud": int(stream.flagged[idx].sum()),
                             "start_offsets": json.dumps({"decisions": b.start}),
                             "end_offsets": json.dumps({"decisions": b.end}),
                             "reason": "replay of a batch already applied" if outcome == ledger.SKIPPED else None,
                             "epoch": 2 if fault_at and ts > fault_at else 1, "ts": ts})
    return sorted(rows, key=lambda r: r["ts"])


def usage_audit(stream: Stream, batches: dict, rows: list[dict], at: int) -> dict:
    """What the auditor computes for each guarantee at `at` (its `usage` step, from the same inputs)."""
    parts = stream.partitions(at)
    out = {}
    for g in GUARANTEES:
        query = f"usage-{g}"
        mine = [r for r in rows if r["sink"] == query and r["ts"] <= at]
        current = [b for b in batches[query] if b.planned <= at]
        ckpt = current[-1].checkpoint_id if current else CHECKPOINT_IDS[query]
        done = [b for b in current if b.checkpoint_id == ckpt and b.committed is not None and b.committed <= at]
        committed = done[-1].batch_id if done else None
        if done:
            committed_offsets = done[-1].end
        else:
            first = next((b for b in current if b.checkpoint_id == ckpt), None)
            committed_offsets = first.start if first else {p: 0 for p in range(PARTITIONS)}
        apps = audit.applications(mine, "decisions", ckpt, committed)
        end = merge_max({"decisions": committed_offsets},
                        *({"decisions": {p: e for p, (_, e) in a.ranges.items()}} for a in apps))["decisions"]
        fig = figures(parts, {p: 0 for p in range(PARTITIONS)}, end, apps, at)
        fig.update(checkpoint_id=ckpt, committed_batch=committed,
                   sink_total=sum(r["processed"] for r in mine if r["outcome"] == ledger.APPLIED))
        out[g] = fig
    return out


def fraud_audit(stream: Stream, at: int) -> dict:
    """The fraud job's audit at `at`: it commits a batch every second and loses nothing."""
    batch = (at - stream.t0 - 1_150) // FRAUD_TRIGGER_MS
    cut = stream.t0 + batch * FRAUD_TRIGGER_MS + FRAUD_TRIGGER_MS - 100
    decided = stream.times < cut
    arrived = stream.times <= at
    behind = arrived & ~decided
    tp = int((decided & stream.flagged & stream.labelled).sum())
    fp = int((decided & stream.flagged & ~stream.labelled).sum())
    fn = int((decided & ~stream.flagged & stream.labelled).sum())
    n = int(decided.sum())
    ends = stream.tx_ends_at(cut)
    return {"truth": n, "observed": n, "lost": 0, "topic": n, "topic_lost": 0, "duplicated": 0,
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None,
            "lag_records": int(behind.sum()),
            "lag_seconds": round((at - int(stream.times[behind].min())) / 1000, 1) if behind.any() else 0.0,
            "committed_offsets": {str(p): o for p, o in ends.items()},
            "checkpoint_id": CHECKPOINT_IDS["fraud"], "committed_batch": int(batch)}


def explanation(contributions: dict, values: dict) -> str:
    """A decision's `explanation` as pipelines.fraud.models.explanation computes it in Spark SQL: the
    three largest contributions by size, each {feature, value, share} (its size over the sum of all)."""
    total = sum(abs(c) for c in contributions.values())
    top = sorted(((abs(c), name) for name, c in contributions.items()), reverse=True)[:3]
    return json.dumps([{"feature": name, "value": round(float(values[name]), 4),
                        "share": round(w / total, 4) if total > 0 else 0.0} for w, name in top],
                      separators=(",", ":"))


def rules_explanation(scores: dict) -> str:
    """The rules' reasons (models.rules_explanation): the analyzers' scores, the largest first."""
    return explanation(scores, scores)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _spark_offsets(topic: str, parts: dict) -> str:
    """As pipelines.engine.metrics records a source's offsets: a JSON list of Spark's JSON strings."""
    return json.dumps([json.dumps({topic: {str(p): o for p, o in parts.items()}})])


def _sources(topic: str, rows: int, per_s: float) -> str:
    """As pipelines.engine.metrics records a one-source query's figures per source (`source_figures`)."""
    return json.dumps({topic: {"rows": int(rows), "per_s": float(per_s)}})


def seed_store(db, now: int, topics: dict[str, str] | None = None, scenario: str = "crash",
               checkpoint_root: Path | None = None) -> Seeded:
    """Fill every table the dashboard reads (and, given `checkpoint_root`, the checkpoint folders);
    `topics` renames the Kafka topics in Spark's offsets (the browser test's fresh topics)."""
    topics = topics or {"transactions": "transactions", "decisions": "decisions"}
    t0 = now - DURATION_MS
    stream = Stream(t0, now)
    fault_at = t0 + FAULT_BATCH * TRIGGER_MS + TRIGGER_MS - 200 + 120 if scenario == "crash" else None
    resume = fault_at + RESUME_AFTER_MS if fault_at else None
    restarted = fault_at + RESTART_DELAY_MS if fault_at else None
    batches = simulate_usage(stream, now, scenario, fault_at, resume)
    rows = ledger_rows(stream, batches, fault_at)
    db["sink_batches"].insert_all(rows, alter=False)

    rnd = random.Random(7)
    decisions = []
    for i in range(stream.n):
        t = int(stream.times[i])
        latency = 6 + rnd.random() * 8 + (30 if i % 100 == 0 else 0)
        fraud = bool(stream.flagged[i])
        scores = [rnd.uniform(0.7, 1.0) if fraud else rnd.uniform(0, 0.4) for _ in SCORES]
        decisions.append({
            "txn_id": f"txn-{i:06d}", "card_id": f"card-{i % 97:03d}", "merchant_id": f"m-{i % 13}",
            "amount_cents": 1_000 + (i * 7) % 9_000 + (250_000 if stream.labelled[i] else 0),
            "event_time": t - (LATE_BY_MS if stream.late[i] else 40), "produced_at": int(t - latency),
            "decided_at": t, **dict(zip(SCORES, scores)), "score": sum(scores) / 3, "is_fraud": int(fraud),
            "is_late": int(stream.late[i]), "batch_id": (t - t0) // FRAUD_TRIGGER_MS, "model_version": 0,
            "explanation": rules_explanation(dict(zip(SCORES, scores)))})
    db["decisions"].insert_all(decisions, alter=False)
    # the fraud job records the aggregator it decides with at its start (no model trained: the rules)
    db["model_use"].insert({"job": "fraud", "version": 0, "why": None, "since": t0 - 25_000, "epoch": 1}, alter=False)

    # Spark's progress, posted after each commit (a batch cut short by the crash posts nothing)
    progress = []
    for query, bs in batches.items():
        for b in bs:
            if b.committed is None:
                continue
            n = int(stream.between(b.start, b.end).size)
            eo = query in ("usage-exactly-once", WINDOWS)
            progress.append({
                "query": query, "batch_id": b.batch_id, "ts": b.committed + 10, "num_input_rows": n,
                "input_rows_per_s": n / (TRIGGER_MS / 1000), "processed_rows_per_s": n / 0.15,
                "duration_ms": 150 + (b.batch_id * 37) % 60, "trigger_ms": 90 + (b.batch_id * 13) % 40,
                "commit_ms": 25 + (b.batch_id * 7) % 20,
                "state_rows": int(stream.ends_at(b.planned)[0] * 2) if eo else 0,
                "state_memory_bytes": int(stream.ends_at(b.planned)[0] * 2 * 96) if eo else 0,
                "state_disk_bytes": 0, "state_rows_dropped_late": 0,
                # Spark's watermark for the dedupe: 300 s (DEDUPE_SECONDS / 2) behind the newest event;
                # its keys live 600 s, longer than these five minutes
                "state_rows_removed": 0,
                "watermark": _iso(b.planned - 300_000) if eo else None,
                "event_time_max": _iso(b.planned - 40) if eo else None,
                "start_offsets": _spark_offsets(topics["decisions"], b.start),
                "end_offsets": _spark_offsets(topics["decisions"], b.end),
                "sources": _sources(topics["decisions"], n, n / (TRIGGER_MS / 1000)),
                "checkpoint": f"/run/checkpoints/{query}"})
    for f in range((now - t0 - 1_150) // FRAUD_TRIGGER_MS + 1):
        planned = t0 + f * FRAUD_TRIGGER_MS + FRAUD_TRIGGER_MS - 100
        start, end = stream.tx_ends_at(planned - FRAUD_TRIGGER_MS) if f else {0: 0, 1: 0}, stream.tx_ends_at(planned)
        n = sum(end.values()) - sum(start.values())
        progress.append({
            "query": "fraud", "batch_id": f, "ts": planned + 260, "num_input_rows": n,
            "input_rows_per_s": float(n), "processed_rows_per_s": n / 0.25, "duration_ms": 230 + (f * 11) % 50,
            "trigger_ms": 180, "commit_ms": 30 + (f * 3) % 15, "state_rows": min(97, int(n * (f + 1))),
            "state_memory_bytes": (3 + f // 60) * 2**20, "state_disk_bytes": 2**20,
            "state_rows_dropped_late": 1 if f % 20 == 10 else 0, "state_rows_removed": 0,
            "watermark": _iso(planned - 40 - WATERMARK_MS), "event_time_max": _iso(planned - 40),
            "start_offsets": _spark_offsets(topics["transactions"], start),
            "end_offsets": _spark_offsets(topics["transactions"], end), "checkpoint": "/run/checkpoints/fraud/decisions",
            "sources": _sources(topics["transactions"], n, float(n)),
            "offsets_ms": 6 + f % 4, "planning_ms": 11 + f % 5, "state_update_ms": 40 + f % 9, "state_commit_ms": 9})
    db["batch_progress"].insert_all(progress, alter=False)
    # the decisions sink's laps inside addBatch (180 ms), recorded just before Spark's progress
    db["batch_stages"].insert_all([{"query": "fraud", "batch_id": p["batch_id"], "ts": p["ts"] - 40,
                                    "rows": p["num_input_rows"], "compute_ms": 118 + p["batch_id"] % 7,
                                    "decide_ms": 14, "store_ms": 11, "kafka_ms": 19}
                                   for p in progress if p["query"] == "fraud" and p["num_input_rows"] > 0],
                                  alter=False)

    counts = {}
    for r in rows:
        if r["outcome"] == ledger.APPLIED and r["sink"] != WINDOWS:
            c = counts.setdefault(r["sink"].removeprefix("usage-"), {"processed": 0, "fraud": 0})
            c["processed"] += r["processed"]
            c["fraud"] += r["fraud"]
    db["usage_counts"].insert_all([{"guarantee": g, **c, "updated_at": now} for g, c in counts.items()], alter=False)
    db["usage_starts"].insert_all([{"guarantee": g, "topic": topics["decisions"], "offsets": json.dumps({"0": 0, "1": 0}),
                                    "started_at": t0} for g in GUARANTEES], alter=False)

    # the audit, every 5 s, as the live auditor computes and records it
    last = {}
    for k in range(DURATION_MS // TRIGGER_MS):
        at = t0 + (k + 1) * TRIGGER_MS
        last = {"fraud": fraud_audit(stream, at), "usage": usage_audit(stream, batches, rows, at)}
        audit.record(db, last, ts=at)

    commands = [{"kind": "bad-input", "job": "simulator", "params": json.dumps({"count": BAD}), "status": "done",
                 "issued_at": t0 - 2_000, "started_at": t0 - 1_900, "done_at": t0 - 1_900,
                 "result": f"the next {BAD} messages are malformed"},
                {"kind": "set-rate", "job": "simulator", "params": json.dumps({"rate": float(RATE)}), "status": "done",
                 "issued_at": t0 - 5_000, "started_at": t0 - 4_800, "done_at": t0 - 4_800,
                 "result": f"rate {RATE}/s (1,000 cards)"}]
    if fault_at:
        commands.append({"kind": "crash", "job": "usage", "params": "{}", "status": "done",
                         "issued_at": fault_at - 180, "started_at": fault_at, "done_at": fault_at + 2,
                         "result": f"SIGKILL sent to usage driver pid 4242; restart in {RESTART_DELAY_MS // 1000} s"})
    db["commands"].insert_all(sorted(commands, key=lambda c: c["issued_at"]), alter=False)

    usage_started = restarted or t0 - 20_000
    db["job_status"].insert_all([
        {"job": "fraud", "status": "running", "pid": 4100, "restarts": 0, "last_batch": progress[-1]["batch_id"],
         "started_at": t0 - 30_000, "updated_at": now - 400, "detail": "started pid 4100",
         # each Spark process writes its UI's address (pipelines.engine.session.record_ui)
         "ui_url": "http://localhost:4040", "ui_pid": 4100},
        {"job": "usage", "status": "running", "pid": 4243 if fault_at else 4242, "restarts": 1 if fault_at else 0,
         "last_batch": max(b.batch_id for b in batches["usage-at-least-once"] if b.committed),
         "started_at": usage_started, "updated_at": now - 400,
         "detail": f"started pid {4243 if fault_at else 4242}",
         "ui_url": f"http://localhost:{4043 if fault_at else 4041}", "ui_pid": 4243 if fault_at else 4242},
        {"job": "simulator", "status": "running", "pid": 4000, "restarts": 0, "last_batch": None,
         "started_at": t0 - 40_000, "updated_at": now - 400, "detail": "started pid 4000"},
        # make demo runs a warm standby per Spark job (the supervisor's --standby)
        *({"job": f"{job}-standby", "status": "ready", "pid": pid, "restarts": 0, "last_batch": None,
           "started_at": t0 - 10_000, "updated_at": now - 400, "detail": f"warm standby pid {pid}, session up",
           "ui_url": f"http://localhost:{port}", "ui_pid": pid}
          for job, pid, port in (("fraud", 4101, 4042), ("usage", 4301, 4044))),
    ], alter=False)
    db["standbys"].insert_all([{"job": "fraud", "pid": 4101, "ready_at": t0 - 2_000},
                               {"job": "usage", "pid": 4301, "ready_at": t0 - 2_000}], alter=False)
    db["leases"].insert_all([{"job": "usage", "epoch": 2 if fault_at else 1, "holder": f"host:{4243 if fault_at else 4242}",
                              "taken_at": usage_started + 3_000, "renewed_at": now - 300},
                             {"job": "fraud", "epoch": 1, "holder": "host:4100", "taken_at": t0 - 25_000,
                              "renewed_at": now - 300}], alter=False)
    if fault_at:
        first = min((p for p in progress if p["query"].startswith("usage-") and p["ts"] > fault_at
                     and p["num_input_rows"] > 0), key=lambda p: p["ts"])
        recovered = first["ts"]
        crash_id = db.execute("SELECT id FROM commands WHERE kind = 'crash' AND job = 'usage'").fetchone()[0]
        db["recoveries"].insert({"job": "usage", "fault": "crash", "killed_at": fault_at, "recovered_at": recovered,
                                 "seconds": (recovered - fault_at) / 1000, "via": "restart",
                                 "command_id": crash_id,
                                 **phases(fault_at, usage_started + 3_000, recovered, first["duration_ms"])},
                                alter=False)
    db["dead_letters"].insert_all([{"reason": "malformed JSON", "count": 12, "updated_at": t0 + 900},
                                   {"reason": "missing field card_id", "count": BAD - 12, "updated_at": t0 + 900}],
                                  alter=False)
    _seed_windows(db, stream, batches[WINDOWS], now)

    final = {g: next(r for r in db.query("SELECT * FROM audit WHERE job = 'usage' AND guarantee = ? AND metric = "
                                         "'processed' ORDER BY ts DESC LIMIT 1", [g])) for g in GUARANTEES}
    seeded = Seeded(now, scenario, fault_at, restarted, final, last["fraud"],
                    {"transactions": stream.tx_ends_at(now + 1), "decisions": stream.ends_at(now + 1)},
                    batches, commands)
    if checkpoint_root is not None:
        write_checkpoints(Path(checkpoint_root), seeded, stream)
    return seeded


def _seed_windows(db, stream: Stream, batches: list[Batch], now: int) -> None:
    """The windows query's results, merged batch by batch as its sink does (replays skipped)."""
    windows: dict = {}
    late: dict = {}
    watermark, max_event = None, None
    cards: dict = {}
    for b in batches:
        if not b.handed:
            continue
        idx = stream.between(b.start, b.end)
        event = np.where(stream.late[idx], stream.times[idx] - LATE_BY_MS, stream.times[idx] - 40)
        is_late = event < watermark if watermark is not None else np.zeros(idx.size, dtype=bool)
        panes: dict = {}
        for e, f, lt in zip(event.tolist(), stream.flagged[idx].tolist(), is_late.tolist()):
            pane = panes.setdefault(e - e % MINUTE_MS, [0, 0, 0])
            pane[2 if lt else 0] += 1
            pane[1] += int(f and not lt)
        fixed, late_counts = panes_to_windows([(s, n, f, lt) for s, (n, f, lt) in sorted(panes.items())])
        for w in fixed:
            acc = windows.setdefault((w.kind, w.key, w.start), [w.end, 0, 0])
            acc[1] += w.processed
            acc[2] += w.fraud
        for kind, start, c in late_counts:
            late[(kind, start)] = late.get((kind, start), 0) + c
        for i, e, lt in zip(idx.tolist(), event.tolist(), is_late.tolist()):
            if not lt:
                s = cards.setdefault(f"card-{i % 97:03d}", [e, e, 0, 0])
                s[0], s[1] = min(s[0], e), max(s[1], e)
                s[2] += 1
                s[3] += int(stream.flagged[i])
        max_event = max(max_event or 0, int(event.max())) if idx.size else max_event
        watermark = max_event - WATERMARK_MS if max_event else watermark
    db["windows"].insert_all([{"kind": k, "key": key, "window_start": s, "window_end": e, "processed": n, "fraud": f,
                               "updated_at": now} for (k, key, s), (e, n, f) in windows.items()]
                             + [{"kind": "session", "key": card, "window_start": s, "window_end": e + 60_000,
                                 "processed": n, "fraud": f, "updated_at": now}
                                for card, (s, e, n, f) in cards.items()], alter=False)
    db["late_events"].insert_all([{"kind": k, "window_start": s, "count": c} for (k, s), c in late.items()], alter=False)
    if max_event:
        db["usage_watermarks"].insert({"name": WINDOWS, "max_event_time": max_event, "watermark": watermark,
                                       "updated_at": now}, alter=False)


def write_checkpoints(root: Path, seeded: Seeded, stream: Stream) -> None:
    """The usage and fraud checkpoint folders as Spark leaves them (the last RETAINED batches)."""
    def write(path: Path, text: str, at: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (at / 1000, at / 1000))

    def folder(path: Path, ckpt: str, initial: dict, topic: str, plans: list[tuple[int, int, dict, int | None]]):
        write(path / "metadata", json.dumps({"id": ckpt}), plans[0][1] if plans else seeded.now)
        write(path / "sources" / "0" / "0", "v1\n" + json.dumps({topic: {str(p): o for p, o in initial.items()}}),
              plans[0][1] if plans else seeded.now)
        for batch_id, planned, end, committed in plans[-RETAINED:]:
            meta = {"batchWatermarkMs": 0, "batchTimestampMs": planned, "conf": {}}
            write(path / "offsets" / str(batch_id),
                  "v1\n" + json.dumps(meta) + "\n" + json.dumps({topic: {str(p): o for p, o in end.items()}}), planned)
            if committed is not None:
                write(path / "commits" / str(batch_id), 'v1\n{"nextBatchWatermarkMs":0}', committed)

    for query, bs in seeded.batches.items():
        current = bs[-1].checkpoint_id
        mine = [b for b in bs if b.checkpoint_id == current]   # at-most-once's old checkpoint was deleted
        folder(root / query, current, mine[0].start, "decisions",
               [(b.batch_id, b.planned, b.end, b.committed) for b in mine])
    t0 = seeded.now - DURATION_MS
    plans = []
    for f in range((seeded.now - t0 - 1_150) // FRAUD_TRIGGER_MS + 1):
        planned = t0 + f * FRAUD_TRIGGER_MS + FRAUD_TRIGGER_MS - 100
        plans.append((f, planned, stream.tx_ends_at(planned), planned + 250))
    folder(root / "fraud" / "decisions", CHECKPOINT_IDS["fraud"], {0: 0, 1: 0}, "transactions", plans)
    folder(root / "fraud" / "dlq", CHECKPOINT_IDS["fraud-dlq"], {0: 0, 1: 0}, "transactions", plans[:1])


def seeded_copy(source: Path, target: Path) -> Path:
    """A copy of a seeded store file (its WAL checkpointed first), for a test that writes."""
    conn = sqlite3.connect(str(source))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    shutil.copy(source, target)
    return target


# --- pytest fixtures (import them into a test module to use them) ---------------------------------

NOW = 1_800_000_000_000


def _seeded_world(tmp_path_factory, scenario: str):
    root = tmp_path_factory.mktemp(scenario)
    db = connect(root / "cardstream.db")
    seeded = seed_store(db, NOW, scenario=scenario, checkpoint_root=root / "checkpoints")
    return db, seeded, root / "checkpoints"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(store, Seeded, checkpoint root) of the "crash" scenario at NOW, read-only for a module."""
    db, seeded, root = _seeded_world(tmp_path_factory, "crash")
    yield db, seeded, root
    db.conn.close()


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """(store, Seeded, checkpoint root) of the "quiet" scenario: no fault, at-least-once behind."""
    db, seeded, root = _seeded_world(tmp_path_factory, "quiet")
    yield db, seeded, root
    db.conn.close()


# --- the fraud job's two paths (real-time mode), for the Fraud page ------------------------------

@dataclass
class FraudPaths:
    now: int
    guarantee: str
    killed_at: int
    restarted_at: int
    gap: dict                     # the episode the auditor recorded for the crash
    totals: dict                  # {path: decided, undecided} over the survey


FRAUD_EVERY, FAST_ONLY_EVERY = 50, 500


def seed_fraud_paths(db, now: int, guarantee: str = "at-most-once", crash: bool = True) -> FraudPaths:
    """Five minutes of the fraud job in real-time mode at 40 tx/s, as its parts write them: the job
    records each start of its real-time query (`fraud_rt_runs`); `crash` on fraud 2 minutes before
    the end (the supervisor's command), the job restarted 6 s later (2 s delay, 4 s to start); the
    restarted query's tasks run 1.5 s after it starts. Real-time decisions come 8 ms after arrival;
    at-most-once's restart reads from the latest offsets (what arrived while it was down is never
    decided), at-least-once's resumes its one real-time batch from its start (everything since is
    sent again). The stateful path decides 2.1 s after arrival, and after the restart drains its
    backlog at 400 tx/s from 4 s after the restart. The auditor's own arithmetic
    (`pipelines.audit.paths.survey`) turns the topics into the recorded rows."""
    t0 = now - DURATION_MS
    killed_at = now - 120_000 if crash else None
    restarted_at = killed_at + 6_000 if crash else None
    runs = [(t0 - 20_000, guarantee, 0)] + ([(restarted_at, guarantee, int(guarantee == "at-least-once"))]
                                            if crash else [])
    db["fraud_rt_runs"].insert_all([{"started_at": at, "guarantee": g, "resumed": r, "epoch": 1 + k,
                                     "pid": 4100 + k} for k, (at, g, r) in enumerate(runs)], alter=False)
    arrived = np.arange(t0, now, STEP_MS, dtype=np.int64)
    codes = np.arange(len(arrived), dtype=np.int64)
    if not crash:
        rt = Stamps(codes, arrived + 8)
        acc = Stamps(codes, arrived + 2_100)
    else:
        running = restarted_at + 1_500
        before = arrived < killed_at
        after = arrived >= restarted_at
        rt_codes = [codes[before], codes[after]]
        rt_times = [arrived[before] + 8, np.maximum(arrived[after] + 8, running + 8)]
        if guarantee == "at-least-once":           # the batch's replay, then what came meanwhile
            since_start = arrived < restarted_at
            rt_codes.append(codes[since_start])
            rt_times.append(running + np.arange(int(since_start.sum()), dtype=np.int64))
        rt = Stamps(np.concatenate(rt_codes), np.concatenate(rt_times))
        drain = restarted_at + 4_000 + np.cumsum(np.where(arrived >= killed_at - 2_000, 2.5, 0)).astype(np.int64)
        acc = Stamps(codes, np.maximum(arrived + 2_100, np.where(arrived >= killed_at - 2_000, drain, 0)))
        db["commands"].insert({"kind": "crash", "job": "fraud", "params": "{}", "status": "done",
                               "issued_at": killed_at - 150, "started_at": killed_at, "done_at": killed_at + 2,
                               "result": "SIGKILL sent to fraud driver pid 4100; restart in 2 s"}, alter=False)
    faults = [tuple(r) for r in db.execute("SELECT id, kind, started_at FROM commands WHERE kind = 'crash' "
                                           "AND job = 'fraud' ORDER BY started_at").fetchall()]
    # one transaction in FRAUD_EVERY is a fraud both paths flag; the real-time path also flags one
    # in FAST_ONLY_EVERY the stateful path clears (a replay scored on a profile that moved on)
    rt = Stamps(rt.codes, rt.times, (rt.codes % FRAUD_EVERY == 0) | (rt.codes % FAST_ONLY_EVERY == 7))
    acc = Stamps(acc.codes, acc.times, acc.codes % FRAUD_EVERY == 0)
    rt, acc = rt.where(rt.times <= now), acc.where(acc.times <= now)
    tx = Stamps(codes, arrived)
    # the live auditor: every 5 s over the newest 30 minutes (slices upserted as replays land)
    last = None
    for at in range(t0 + TRIGGER_MS, now + 1, TRIGGER_MS):
        seen = lambda s: s.where(s.times <= at)  # noqa: E731
        last = survey(seen(tx), seen(rt), seen(acc), [(a, g) for a, g, _ in runs if a <= at],
                      [f for f in faults if f[2] <= at], at, TRIGGER_MS, 15_000, 30)
        record_paths(db, last, at)
    rows = [r for r in db.query("SELECT * FROM fraud_paths")]
    totals = {p: {"decided": sum(r["decided"] for r in rows if r["path"] == p),
                  "undecided": sum(r["undecided"] or 0 for r in rows if r["path"] == p)}
              for p in ("real-time", "stateful")}
    return FraudPaths(now, guarantee, killed_at, restarted_at, last["gaps"][-1] if last["gaps"] else {}, totals)


POISON_BATCH = 40  # the fraud batch the seeded poison pill was in


def seed_poison(db, now: int, failures: int = 3) -> dict:
    """What the poison-batch rule leaves in the store after a `poison-pill` command: the command,
    `failures` identical failures of one fraud batch (restart, restart, quarantine), the quarantine
    with its one dead-lettered record, its dead-letter count; and one failed dead-letter batch of
    the fraud-dlq query (retried). As `pipelines.engine.runner` and `pipelines.fraud.quarantine`
    write them."""
    issued = now - 60_000
    command = db["commands"].insert({"kind": "poison-pill", "job": "fraud", "params": "{}", "status": "done",
                                     "issued_at": issued, "started_at": issued + 200, "done_at": issued + 21_000,
                                     "result": ""}, alter=False).last_pk
    txn_id = f"poison-pill-{command}"
    start, end = {"transactions": {"0": 812, "1": 790}}, {"transactions": {"0": 840, "1": 815}}
    error = f"PoisonPillError: transaction {txn_id} meets a bug in the fraud job's code (poison-pill command {command})"
    reason = f"poison batch: {error}"
    db["commands"].update(command, {"result": f"1 record(s) of batch {POISON_BATCH} dead-lettered after {failures} "
                                              f"identical failures ({txn_id})"})
    for n in range(1, failures + 1):
        db["query_failures"].insert({"job": "fraud", "query": "fraud", "checkpoint_id": "ckpt-fraud",
                                     "batch_id": POISON_BATCH, "start_offsets": json.dumps(start),
                                     "end_offsets": json.dumps(end), "error": error, "in_a_row": n,
                                     "action": "quarantine" if n == failures else "restart", "epoch": 1,
                                     "ts": issued + 1_000 + 2_000 * (2 ** n - 1)}, alter=False)
    db["query_failures"].insert({"job": "fraud", "query": "fraud-dlq", "checkpoint_id": "ckpt-dlq", "batch_id": 7,
                                 "start_offsets": "{}", "end_offsets": "{}", "in_a_row": 1, "action": "restart",
                                 "error": "KafkaTimeoutError: Timeout after waiting for 60000 secs.",
                                 "epoch": 1, "ts": issued - 30_000}, alter=False)
    letter = {"reason": reason, "raw": json.dumps({"txn_id": txn_id}), "raw_encoding": "utf-8", "raw_bytes": 180,
              "raw_truncated": False, "partition": 0, "offset": 839, "topic": "transactions", "ts": issued + 20_000}
    db["quarantines"].insert({"job": "fraud", "query": "fraud", "checkpoint_id": "ckpt-fraud",
                              "batch_id": POISON_BATCH, "start_offsets": json.dumps(start),
                              "end_offsets": json.dumps(end), "error": error, "failures": failures,
                              "batch_records": 53, "status": "dead-lettered", "dead_lettered": 1, "attempts": 1,
                              "records": json.dumps([{"partition": 0, "offset": 839, "txn_id": txn_id,
                                                      "reason": reason, "letter": letter}]),
                              "last_error": None, "created_at": issued + 19_500, "done_at": issued + 20_500,
                              "epoch": 1}, alter=False)
    db["dead_letters"].insert({"reason": reason, "count": 1, "updated_at": issued + 20_500}, alter=False)
    return {"command": command, "txn_id": txn_id, "reason": reason}


# --- the first minute of make demo, for the Overview's start-up sentences and warm-up -----------

@dataclass
class FirstMinute:
    now: int
    phase: str
    sim_started: int
    lease_at: int | None
    first_batch_started: int | None
    warm: int                     # decisions that waited through the start
    steady: int                   # decisions after it


def seed_first_minute(db, now: int, phase: str, first_started: int | None = None) -> FirstMinute:
    """The store as the supervisor, the simulator and the fraud job write it in the first minute of
    `make demo`: the simulator feeds 40 tx/s from 60 s before `now`; the fraud job's process
    started 55 s before `now` (job_status), and then, by `phase`:
    - "session": its SparkSession is still starting: no lease, no batch;
    - "first-batch": the session is up and it took the lease (epoch 1) 15 s before `now`; its first
      batch is running: no progress posted, no decision;
    - "warm": lease 35 s before `now`; its first batch started 1 s later, read the backlog of 26 s
      (every transaction produced since the simulator started) and committed 20 s later; from then
      on a batch every second decides what arrived in it (6-14 ms after production).
    `first_started` moves the first batch's start (the warm-up's cut): to a moment between records
    a test wrote to Kafka, whose append times the Overview's latency is read from."""
    sim_started, proc_started = now - 60_000, now - 55_000
    db["job_status"].insert_all([
        {"job": "simulator", "status": "running", "pid": 4000, "restarts": 0, "last_batch": None,
         "started_at": sim_started - 1_000, "updated_at": now - 300, "detail": "started pid 4000"},
        {"job": "fraud", "status": "running", "pid": 4100, "restarts": 0, "last_batch": None,
         "started_at": proc_started, "updated_at": now - 300, "detail": "started pid 4100"}], alter=False)
    if phase == "session":
        return FirstMinute(now, phase, sim_started, None, None, 0, 0)
    lease_at = now - (15_000 if phase == "first-batch" else 35_000)
    db["leases"].insert({"job": "fraud", "epoch": 1, "holder": "host:4100", "taken_at": lease_at,
                         "renewed_at": now - 200}, alter=False)
    db.conn.execute("UPDATE job_status SET ui_url = 'http://localhost:4040', ui_pid = 4100 WHERE job = 'fraud'")
    if phase == "first-batch":
        return FirstMinute(now, phase, sim_started, lease_at, None, 0, 0)
    first_started = lease_at + 1_000 if first_started is None else first_started
    first_done = first_started + 20_000
    produced = np.arange(sim_started, now - 1_000, STEP_MS, dtype=np.int64)
    rnd = random.Random(11)
    decisions, progress, warm = [], [], 0
    batch_ends = [first_done] + list(range(first_done + 1_000, now, 1_000))
    for i, p in enumerate(produced.tolist()):
        if p < first_started:
            decided, batch = first_done - 30, 0
            warm += 1
        else:
            decided = int(p + 6 + rnd.random() * 8)
            k = next((j for j, e in enumerate(batch_ends) if e >= decided), None)
            if k is None:
                break
            batch = k
        decisions.append({"txn_id": f"txn-{i:06d}", "card_id": f"card-{i % 97:03d}", "merchant_id": f"m-{i % 13}",
                          "amount_cents": 1_000 + (i * 7) % 9_000, "event_time": int(p) - 40, "produced_at": int(p),
                          "decided_at": decided, "score_avg_ticket": 0.1, "score_proximity": 0.1,
                          "score_velocity": 0.1, "score": 0.1, "is_fraud": 0, "is_late": 0, "batch_id": batch})
    db["decisions"].insert_all(decisions, alter=False)
    for b, end in enumerate(batch_ends):
        n = sum(1 for d in decisions if d["batch_id"] == b)
        duration = 20_000 if b == 0 else 250
        progress.append({"query": "fraud", "batch_id": b, "ts": end + 10, "num_input_rows": n,
                         "input_rows_per_s": float(n) / (20 if b == 0 else 1), "processed_rows_per_s": n / (duration / 1000),
                         "duration_ms": duration, "trigger_ms": duration - 60, "commit_ms": 40, "state_rows": 97,
                         "state_memory_bytes": 3 * 2**20, "state_disk_bytes": 2**20, "state_rows_dropped_late": 0,
                         "state_rows_removed": 0, "watermark": _iso(end - 30_000), "event_time_max": _iso(end - 40),
                         "start_offsets": _spark_offsets("transactions", {0: 0}),
                         "end_offsets": _spark_offsets("transactions", {0: n}),
                         "sources": _sources("transactions", n, float(n) / (20 if b == 0 else 1)),
                         "checkpoint": "/run/checkpoints/fraud/decisions"})
    # Spark posts a batch's progress when the batch ends: its start is ts - duration (10 ms of posting)
    progress[0]["duration_ms"] = first_done + 10 - first_started
    db["batch_progress"].insert_all(progress, alter=False)
    return FirstMinute(now, phase, sim_started, lease_at, first_started, warm, len(decisions) - warm)


# --- learned models, the benches' quality runs, and the labels, for the Model and Fraud pages ------

def simulator_labels(seeded: Seeded) -> list[tuple[str, int]]:
    """The labels the simulator sent for the seeded stream (topic `labels`: one per transaction,
    fraud for one in 40), as (txn_id, is_fraud): what `dashboard.data.kafka.recent_labels` reads."""
    stream = Stream(seeded.now - DURATION_MS, seeded.now)
    return [(f"txn-{i:06d}", int(stream.labelled[i])) for i in range(stream.n)]


def label_records(seeded: Seeded) -> list[dict]:
    """The same labels as the simulator writes them to Kafka (infra.contracts.LABEL_FIELDS)."""
    return [{"txn_id": txn, "is_fraud": bool(fraud), "pattern": "spend-spike" if fraud else "normal",
             "is_late": False} for txn, fraud in simulator_labels(seeded)]


def _store_path(db) -> Path:
    return Path(next(r[2] for r in db.conn.execute("PRAGMA database_list") if r[1] == "main"))


def _tried(kind: str, params: dict, auc: float, ap: float, cp: float, threshold: float, fit_s: float) -> dict:
    """One candidate as train.train records it in `candidates` (and the chosen one in `validation`)."""
    return {"kind": kind, "params": params, "fit_s": fit_s, "auc_roc": auc, "average_precision": ap,
            "card_precision_at_100": cp, "threshold": threshold}


MODEL_RUNS = [  # (training window, the candidates' validation figures); the best average precision wins
    (("2018-07-25", "2018-07-31"), [_tried("logistic-regression", {"regParam": 1e-4}, 0.861, 0.588, 0.271, 0.2412, 6.1),
                                    _tried("random-forest", {"numTrees": 100, "maxDepth": 8}, 0.868, 0.652, 0.283, 0.3377, 21.4),
                                    _tried("gradient-boosted-trees", {"maxIter": 50, "maxDepth": 4, "stepSize": 0.1},
                                           0.866, 0.641, 0.279, 0.3021, 34.9)]),
    (("2018-07-04", "2018-07-31"), [_tried("logistic-regression", {"regParam": 1e-4}, 0.884, 0.731, 0.301, 0.4025, 9.8),
                                    _tried("random-forest", {"numTrees": 100, "maxDepth": 8}, 0.879, 0.689, 0.296, 0.3190, 48.0),
                                    _tried("gradient-boosted-trees", {"maxIter": 50, "maxDepth": 4, "stepSize": 0.1},
                                           0.872, 0.641, 0.286, 0.2875, 71.2)]),
]


def _linear() -> dict:
    """A logistic regression's `explain` as models.linear_explain saves it: its coefficients on the
    features' own scale and the training means (a planted pattern: terminal risk and amount lead)."""
    from pipelines.fraud.models import MODEL_FEATURES

    weights = {"amount": 0.004, "t_risk_7d": 9.0, "t_risk_30d": 4.0, "c_count_1d": 0.35, "score_avg_ticket": 2.2,
               "is_night": 0.3}
    means = {"amount": 52.0, "t_risk_7d": 0.004, "t_risk_30d": 0.004, "c_count_1d": 3.1, "score_avg_ticket": 0.05,
             "is_night": 0.28}
    return {"method": "coefficient x (value - training mean)", "features": list(MODEL_FEATURES),
            "coefficients": [weights.get(f, 0.01) for f in MODEL_FEATURES], "means": [means.get(f, 1.0) for f in MODEL_FEATURES]}


LINEAR_EXPLAIN = _linear()


def linear_explanation(explain: dict, row) -> str:
    """A decision of the logistic regression explained as the job does (models.scored_columns): the
    contribution of each feature is coefficient x (value - training mean). Its features' values as
    the feature log would hold them for the seeded payment: a flagged one at a risky terminal."""
    _, cents, avg_ticket, proximity, velocity, fraud = row
    values = {f: m for f, m in zip(explain["features"], explain["means"])}
    values.update(amount=cents / 100, score_avg_ticket=avg_ticket, score_proximity=proximity,
                  score_velocity=velocity, t_risk_7d=0.31 if fraud else 0.0, t_risk_30d=0.12 if fraud else 0.0,
                  c_count_1d=5.0 if fraud else 2.0)
    contributions = {f: w * (values[f] - m) for f, w, m in zip(explain["features"], explain["coefficients"],
                                                                explain["means"])}
    return explanation(contributions, values)


def seed_models(db, now: int, fallback: bool = False, delay_days: int = 7) -> list[int]:
    """Two versions as `python -m pipelines.fraud.train` saves them (`models.register` with train.py's
    row: the validation period from the protocol, every candidate tried, the MLlib folder's path, a
    logistic regression's coefficients and means in `explain`), and the fraud job's `model_use` at its
    start with the newest: model 2 (a logistic regression) from 2 minutes before `now`, its decisions
    since then carrying version 2 and its explanations; or, with `fallback`, model 2's folder could not
    be loaded and the job decides with the rules, saying why (`models.load`'s sentence). Their numbers."""
    # deferred: the protocol and the models registry only where a test seeds models
    from pipelines.fraud import handbook, models

    folder = models.models_dir(_store_path(db).parent)
    out = []
    for k, ((start, end), tried) in enumerate(MODEL_RUNS):
        first, last = dt.date.fromisoformat(start), dt.date.fromisoformat(end)
        days = (last - first).days + 1
        validation = handbook.Protocol(first, days, delay_days, min(days, 7)).validation()
        best = max(tried, key=lambda t: t["average_precision"])
        as_of = dt.datetime.combine(last + dt.timedelta(days=1 + delay_days), dt.time())
        explain = LINEAR_EXPLAIN if best["kind"] == "logistic-regression" else None  # train.py: a linear model's only
        row = {"explain": json.dumps(explain) if explain else None,
               "kind": best["kind"], "params": json.dumps(best["params"]), "features": json.dumps(list(models.MODEL_FEATURES)),
               "train_from": start, "train_to": end, "as_of": as_of.isoformat(), "threshold": best["threshold"],
               "validation": json.dumps({**validation.describe(), **best}), "candidates": json.dumps(tried),
               "train_rows": 58_000 * days // 7, "train_frauds": 420 * days // 7, "fit_s": best["fit_s"],
               "created_at": now - 3_600_000 * (len(MODEL_RUNS) - k), "path": ""}
        version = models.register(db, row)
        with db.conn:
            db.execute("UPDATE models SET path = ? WHERE version = ?", [str(folder / f"v{version}"), version])
        out.append(version)
    newest = out[-1]
    since = now - 120_000
    if fallback:
        use = {"version": 0, "why": f"model {newest} could not be loaded from {folder / f'v{newest}'} "
                                    f"([PATH_NOT_FOUND] Path does not exist: file:{folder / f'v{newest}'}/metadata.); "
                                    "deciding with the rules (model 0)"}
    else:
        use = {"version": newest, "why": None}
        explains = explain  # the newest version's (None for trees: their decisions carry no explanation)
        rows = db.execute("SELECT txn_id, amount_cents, score_avg_ticket, score_proximity, score_velocity, is_fraud "
                          "FROM decisions WHERE decided_at >= ?", [since]).fetchall()
        with db.conn:
            db.conn.executemany("UPDATE decisions SET model_version = ?, explanation = ? WHERE txn_id = ?",
                                [(newest, linear_explanation(explains, r) if explains else None, r[0]) for r in rows])
    with db.conn:
        db.execute("INSERT INTO model_use (job, version, why, since, epoch) VALUES ('fraud', ?, ?, ?, 2) "
                   "ON CONFLICT(job) DO UPDATE SET version = excluded.version, why = excluded.why, "
                   "since = excluded.since, epoch = excluded.epoch", [use["version"], use["why"], since])
    return out


HANDBOOK_FIGURES = {  # per aggregator: auc_roc, average_precision, card_precision_at_100, per day
    "rules": (0.791, 0.402, 0.231, [0.26, 0.24, 0.22, 0.25, 0.21, 0.23, 0.21]),
    "learned": (0.883, 0.727, 0.304, [0.33, 0.31, 0.30, 0.31, 0.29, 0.30, 0.29]),
}


def seed_bench_runs(db, version: int | None = None) -> None:
    """A `bench handbook` run (rules, and the learned model `version` unless None) and a `bench
    quality` run, recorded by the benches' own `record` functions into this store."""
    # deferred: the benches load Kafka and Spark helpers only where a test records their runs
    from bench import handbook as bench_handbook
    from bench import quality as bench_quality
    from infra.config import load
    from pipelines.fraud.handbook import Protocol

    s = dataclasses_replace(load(), store_path=_store_path(db))
    result = {}
    for key, (auc, ap, cp, per_day) in HANDBOOK_FIGURES.items():
        if key == "learned" and version is None:
            continue
        result[key] = {"model": "rules (model 0)" if key == "rules" else f"logistic-regression (model {version})",
                       "auc_roc": auc, "average_precision": ap, "card_precision_at_100": cp,
                       "card_precision_at_100_per_day": per_day, "test_transactions": 58_264, "test_frauds": 385,
                       "per_scenario": {1: {"frauds": 98, "average_precision": 0.99}, 2: {"frauds": 120},
                                        3: {"frauds": 167}}}
        if key == "learned":
            result[key]["training"] = {"version": version}
    bench_handbook.record(s, "hb0001", result, Protocol())
    figures = {"card-testing": {"kind": "fraud", "transactions": 120, "flagged": 9, "precision": 0.5, "recall": 0.075,
                                "average_precision": 0.11, "flagged_share": 0.075},
               "large-purchase": {"kind": "legitimate", "transactions": 900, "flagged": 41, "precision": None,
                                  "recall": None, "average_precision": None, "flagged_share": 0.046},
               "all": {"kind": "all", "transactions": 610, "flagged": 92, "precision": 0.483, "recall": 0.151,
                       "average_precision": 0.162, "flagged_share": 0.151}}
    bench_quality.record(s, "q0001", 20240614, 0.7, figures)


RT_UNPUBLISHED = "m-0"  # a terminal the stateful companion has not published to the real-time path yet


def seed_realtime(db, started_at: int, epoch: int = 2) -> None:
    """The fraud job's real-time query started at `started_at`, as the job records it (`fraud_rt_runs`)."""
    db["fraud_rt_runs"].insert({"started_at": started_at, "guarantee": "at-least-once", "resumed": 0,
                                "epoch": epoch, "pid": 4343}, alter=False)


def rt_decision(txn: dict, k: int, decided_at: int, version: int, threshold: float) -> dict:
    """The real-time path's decision of `txn` (the k-th of its partition) as it writes it to
    `decisions-rt` (realtime.RT_DECISION_FIELDS through Spark's to_json: a null field is absent):
    by model `version` (its score, verdict and explanation; no `model_why`), or, at the terminal
    RT_UNPUBLISHED, by the rules with LiveModel.java's sentence for a terminal the stateful
    companion has not published yet. tests/spark/test_realtime_model.py checks the shape against
    the path's own output."""
    rnd = random.Random(k)
    flagged = k % 4 == 1
    scores = dict(zip(SCORES, (rnd.uniform(0.75, 1.0) if flagged else rnd.uniform(0, 0.5) for _ in SCORES)))
    out = {f: txn[f] for f in ("txn_id", "card_id", "merchant_id", "amount_cents", "event_time", "produced_at")}
    out.update(decided_at=decided_at, **scores)
    fallback = txn["merchant_id"] == RT_UNPUBLISHED
    if fallback:
        score = sum(scores.values()) / 3
        out.update(score=score, is_fraud=score >= 0.7, is_late=False, model_version=0,
                   explanation=rules_explanation(scores))
    else:
        score = rnd.uniform(threshold, 1.0) if flagged else rnd.uniform(0, threshold)
        out.update(score=score, is_fraud=flagged, is_late=False, model_version=version,
                   explanation=linear_explanation(LINEAR_EXPLAIN, (txn["txn_id"], txn["amount_cents"], *scores.values(),
                                                                   flagged)))
    out["profile_age_ms"] = 900 + k % 400
    if fallback:
        out["model_why"] = (f"terminal {txn['merchant_id']} has no features from the stateful path yet: "
                            "decided with the rules (model 0)")
    return out
