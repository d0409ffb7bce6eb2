"""A store seeded with rows shaped as the pipelines write them, for the dashboard's tests.

The numbers are fixed so tests can look for them on the pages: truth 10,000; at-most-once lost
120 (9,880), at-least-once replayed batch 41 (+380 → 10,380), exactly-once 10,000; precision 92 %
(230 of 250 flagged), recall 95.8 % (230 of 240 labelled).
"""
from __future__ import annotations

import json
import random

from infra.contracts import GUARANTEES

TRUTH = 10_000
OBSERVED = {"at-most-once": 9_880, "at-least-once": 10_380, "exactly-once": 10_000}
LOST = {"at-most-once": 120, "at-least-once": 0, "exactly-once": 0}
DUPLICATED = {"at-most-once": 0, "at-least-once": 380, "exactly-once": 0}
REPLAYED_BATCH = 41
FAULT_AGO_MS = 120_000
TOPIC_END = {"transactions": {0: 5_000, 1: 5_100}, "decisions": {0: 4_990, 1: 5_010}}


def _offsets(topic: str, parts: dict[int, int]) -> str:
    """As pipelines.metrics records them: a JSON list of Spark's per-source JSON strings."""
    return json.dumps([json.dumps({topic: {str(p): o for p, o in parts.items()}})])


def seed_store(db, now: int, topics: dict[str, str] | None = None) -> None:
    """Fill every table the dashboard reads; `topics` renames the Kafka topics in the offsets."""
    rnd = random.Random(7)
    topics = topics or {"transactions": "transactions", "decisions": "decisions"}
    decisions = []
    for i in range(1200):
        decided = now - 60_000 + i * 50
        fraud = i % 40 == 0
        latency = 6 + rnd.random() * 8 + (30 if i % 100 == 0 else 0)
        scores = [rnd.uniform(0.7, 1.0) if fraud else rnd.uniform(0, 0.4) for _ in range(3)]
        decisions.append({
            "txn_id": f"txn-{i:06d}", "card_id": f"card-{i % 97:03d}", "merchant_id": f"m-{i % 13}",
            "amount_cents": 1_000 + i * 7 + (250_000 if fraud else 0), "event_time": decided - 40,
            "produced_at": int(decided - latency), "decided_at": decided,
            "score_avg_ticket": scores[0], "score_proximity": scores[1], "score_velocity": scores[2],
            "score": sum(scores) / 3, "is_fraud": int(fraud), "is_late": 0, "batch_id": i // 20,
        })
    db["decisions"].insert_all(decisions)

    progress = []
    queries = {"fraud": topics["transactions"], **{f"usage-{g}": topics["decisions"] for g in GUARANTEES}}
    for qi, (q, topic) in enumerate(queries.items()):
        ends = TOPIC_END["transactions" if q == "fraud" else "decisions"]
        for b in range(60):
            batch_id = b if q == "fraud" else b
            ts = now - 300_000 + b * 5_000
            lagging = 0 if q == "fraud" else (200 if "at-least" in q else 0)
            done = {p: int(o * (b + 1) / 60) - (lagging if b == 59 else 0) for p, o in ends.items()}
            row = {"query": q, "batch_id": batch_id, "ts": ts, "num_input_rows": 100 + b,
                   "input_rows_per_s": 200.0 if q == "fraud" else 190.0, "processed_rows_per_s": 400.0,
                   "duration_ms": 250 + qi * 60 + (b * (qi + 3)) % 7 * 15, "trigger_ms": 200,
                   "commit_ms": 30 + qi * 12 + (b * (qi + 2)) % 5 * 4,
                   "state_rows": 1_000 + qi * 700 + b * (10 + qi * 5),
                   "state_memory_bytes": int((2 + qi + b * (1 + qi) / 40) * 2**20),
                   "state_rows_dropped_late": 2 if b % 10 == 0 else 0,
                   "watermark": _iso(ts - 30_000), "start_offsets": "[]",
                   "end_offsets": _offsets(topic, done),
                   "checkpoint": f"/run/checkpoints/{q}"}
            progress.append(row)
            if b == REPLAYED_BATCH and q in ("usage-at-least-once", "usage-exactly-once"):
                progress.append({**row, "ts": ts + 2_500})
    db["batch_progress"].insert_all(progress)

    db["usage_counts"].insert_all([{"guarantee": g, "processed": OBSERVED[g], "fraud": 250, "updated_at": now}
                                   for g in GUARANTEES])
    db["usage_applied_batches"].insert_all([{"guarantee": "exactly-once", "batch_id": b, "processed": 170,
                                             "fraud": 4, "epoch": 1, "applied_at": now - 300_000 + b * 5_000}
                                            for b in range(60)])

    audit = []
    for k in range(60):
        ts = now - 300_000 + k * 5_000
        after = ts >= now - FAULT_AGO_MS
        truth = int(TRUTH * (k + 1) / 60)
        for g in GUARANTEES:
            lost, dup = (LOST[g], DUPLICATED[g]) if after else (0, 0)
            if k == 59:
                truth = TRUTH
            audit.append({"ts": ts, "job": "usage", "guarantee": g, "metric": "processed", "truth": truth,
                          "observed": truth - lost + dup, "lost": lost, "duplicated": dup})
        audit += [
            {"ts": ts, "job": "fraud", "guarantee": "", "metric": "processed", "truth": truth, "observed": truth,
             "lost": 0, "duplicated": 0},
            {"ts": ts, "job": "fraud", "guarantee": "", "metric": "fraud", "truth": 240, "observed": 250,
             "lost": 0, "duplicated": 0},
            {"ts": ts, "job": "fraud", "guarantee": "", "metric": "precision", "truth": 250, "observed": 230,
             "lost": 0, "duplicated": 0},
            {"ts": ts, "job": "fraud", "guarantee": "", "metric": "recall", "truth": 240, "observed": 230,
             "lost": 0, "duplicated": 0},
        ]
    db["audit"].insert_all(audit)

    fault_at = now - FAULT_AGO_MS
    db["commands"].insert_all([
        {"kind": "crash", "job": "usage", "params": "{}", "status": "done", "issued_at": fault_at - 500,
         "started_at": fault_at, "done_at": fault_at + 300, "result": "SIGKILL sent to pid 4242; restarted"},
        {"kind": "set-rate", "job": "simulator", "params": json.dumps({"rate": 2500}), "status": "done",
         "issued_at": now - 200_000, "started_at": now - 199_000, "done_at": now - 199_000, "result": "rate 2500/s"},
    ])
    db["job_status"].insert_all([
        {"job": "fraud", "status": "running", "pid": 4100, "restarts": 0, "last_batch": 59,
         "started_at": now - 600_000, "updated_at": now - 1_000, "detail": ""},
        {"job": "usage", "status": "running", "pid": 4243, "restarts": 1, "last_batch": 59,
         "started_at": fault_at + 5_000, "updated_at": now - 1_000, "detail": "restarted after crash"},
    ])
    db["leases"].insert({"job": "usage", "epoch": 2, "holder": "host:4243", "taken_at": fault_at + 5_000})
    db["rejected_writes"].insert_all([{"job": "usage", "epoch": 1, "current_epoch": 2, "ts": now - 50_000 + i,
                                       "what": f"batch {55 + i}"} for i in range(3)])
    db["dead_letters"].insert_all([{"reason": "bad-json", "count": 12, "updated_at": now},
                                   {"reason": "missing-field", "count": 5, "updated_at": now}])
    db["recoveries"].insert({"job": "usage", "fault": "crash", "killed_at": fault_at,
                             "recovered_at": fault_at + 7_400, "seconds": 7.4})

    windows = []
    start0 = (now - 300_000) // 10_000 * 10_000
    for w in range(30):
        s = start0 + w * 10_000
        windows.append({"kind": "tumbling", "key": "all", "window_start": s, "window_end": s + 10_000,
                        "processed": 300 + w * 3, "fraud": 5 + w % 4, "updated_at": now})
        windows.append({"kind": "sliding", "key": "all", "window_start": s, "window_end": s + 30_000,
                        "processed": 900 + w * 5, "fraud": 15 + w % 5, "updated_at": now})
    for c in range(12):
        s = now - 280_000 + c * 20_000
        windows.append({"kind": "session", "key": f"card-{c:03d}", "window_start": s,
                        "window_end": s + 60_000 + c * 5_000, "processed": 3 + c, "fraud": c % 3 == 0,
                        "updated_at": now})
    db["windows"].insert_all(windows)
    db["usage_watermarks"].insert({"name": "usage-windows", "max_event_time": now - 1_000,
                                   "watermark": now - 31_000, "updated_at": now})
    db["late_events"].insert_all([{"kind": k, "window_start": start0 + w * 10_000, "count": 4 + w % 3}
                                  for k in ("tumbling", "sliding") for w in range(0, 30, 3)])


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
