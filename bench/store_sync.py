"""`python -m bench store-sync [--batches 200] [--rows 500] --json`: what a durable sink commit
costs. The store runs WAL with `synchronous=NORMAL` (a commit is not flushed to disk, the next WAL
checkpoint does it); the exactly-once sinks open theirs with `synchronous=FULL` (each commit
flushes the WAL: fsync), so a power loss cannot take back a batch the sink had reported written
before Spark commits it (docs/recovery.md, "Power loss").

Writes `--batches` fraud decisions batches of `--rows` rows each into a scratch store in the run
folder, as the fraud sink does (one fenced transaction: the epoch check, the ledger row, the
decisions, the card profiles and their cut), alternating NORMAL and FULL batch by batch on two
connections to the same file, so both modes see the same disk and the same neighbours. The last
line: {batches, rows, normal_ms: {p50, p99, mean}, full_ms: {...}, full_over_normal_p50,
full_extra_ms_p50, path}. Wall-clock per transaction, BEGIN IMMEDIATE to COMMIT returned.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import time
import uuid

from controlplane import fencing, ledger
from controlplane.store import connect
from infra.config import load


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))]


def figures(values: list[float]) -> dict:
    return {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3),
            "mean": round(statistics.fmean(values), 3)}


def write_batch(db, batch_id: int, rows: int, epoch: int) -> float:
    """One decisions batch as the fraud sink writes it; the seconds it took."""
    from pipelines.fraud.sinks import _INSERT, DECISION_COLUMNS, write_profiles

    now = int(time.time() * 1000)
    decisions = [tuple({"txn_id": f"{batch_id}-{i}-{uuid.uuid4().hex[:6]}", "card_id": f"card-{i}",
                        "decided_at": now, "batch_id": batch_id}.get(c, 0) for c in DECISION_COLUMNS)
                 for i in range(rows)]
    profiles = [{"card_id": f"card-{i}", "p_count": batch_id, "p_mean": 100.0, "p_lat": 48.8, "p_lon": 2.3,
                 "p_time": now, "p_times": str(now)} for i in range(rows)]
    batch = ledger.Batch("fraud", "bench", batch_id, rows, 0, {"tx": {"0": batch_id * rows}},
                         {"tx": {"0": (batch_id + 1) * rows}})
    t0 = time.perf_counter()
    with fencing.fenced_write(db, "fraud", epoch, f"bench batch {batch_id}") as conn:
        if ledger.apply_once(conn, batch, epoch):
            conn.executemany(_INSERT, decisions)
            write_profiles(conn, profiles, batch)
    return time.perf_counter() - t0


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench store-sync")
    p.add_argument("--batches", type=int, default=200, help="batches per mode")
    p.add_argument("--rows", type=int, default=500, help="decisions per batch")
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    args = p.parse_args(argv)
    s = load()
    folder = s.run_dir / f"bench-store-sync-{uuid.uuid4().hex[:8]}"
    path = folder / "cardstream.db"
    try:
        normal, full = connect(path), connect(path, synchronous="FULL")
        epoch = fencing.take_lease(normal, "fraud")
        took = {"NORMAL": [], "FULL": []}
        for i in range(args.batches * 2):
            mode = "NORMAL" if i % 2 == 0 else "FULL"
            took[mode].append(1000 * write_batch(normal if mode == "NORMAL" else full, i, args.rows, epoch))
        normal.conn.close()
        full.conn.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    n, f = figures(took["NORMAL"]), figures(took["FULL"])
    return {"batches": args.batches, "rows": args.rows, "normal_ms": n, "full_ms": f,
            "full_over_normal_p50": round(f["p50"] / n["p50"], 2) if n["p50"] else None,
            "full_extra_ms_p50": round(f["p50"] - n["p50"], 3), "path": str(path)}
