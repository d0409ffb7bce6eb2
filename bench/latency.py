"""End-to-end decision latency of the fraud job: `python -m bench latency --mode M --rate R --seconds S --json`.

Starts the broker if it is not running (and stops it afterwards if it started it), creates fresh
topics, starts `python -m pipelines.fraud --mode M` on its own checkpoint and store, feeds it with
`python -m simulator --rate R` for a warm-up and then S measured seconds, reads the decisions back
(read_committed) from the mode's output topic (micro-batch: `decisions`; real-time: the real-time
path's `decisions-rt`), first decision per txn_id (what a deduplicating reader sees), and prints
as the last line {"mode", "rate", "achieved_rate", "p50_ms", "p95_ms", "p99_ms", "max_ms", ...}:
latency = decided_at - produced_at over the transactions produced in the measured window, both
stamped from this machine's wall clock. Precision and recall against the simulator's labels ride
along (for the whole run, measured window or not). Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from infra import broker, kafka_client
from infra.config import ROOT, load


def log(msg: str) -> None:
    print(f"bench latency: {msg}", file=sys.stderr, flush=True)


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return float(sorted_values[rank - 1])


def latency_figures(decisions: list[dict], since_ms: int) -> dict:
    """First decision per txn_id, produced at or after `since_ms` -> percentiles of decided - produced."""
    first: dict[str, dict] = {}
    for d in decisions:
        seen = first.get(d["txn_id"])
        if seen is None or d["decided_at"] < seen["decided_at"]:
            first[d["txn_id"]] = d
    lat = sorted(d["decided_at"] - d["produced_at"] for d in first.values() if d["produced_at"] >= since_ms)
    return {"measured": len(lat), "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
            "p99_ms": percentile(lat, 99), "max_ms": lat[-1] if lat else None}


def quality(decisions: list[dict], labels: list[dict]) -> dict:
    """Precision and recall of is_fraud against the simulator's labels (valid transactions only)."""
    truth = {l["txn_id"]: bool(l["is_fraud"]) for l in labels if not str(l.get("pattern", "")).startswith("bad:")}
    said = {}
    for d in decisions:
        said[d["txn_id"]] = said.get(d["txn_id"], False) or bool(d["is_fraud"])
    both = [t for t in said if t in truth]
    tp = sum(1 for t in both if said[t] and truth[t])
    fp = sum(1 for t in both if said[t] and not truth[t])
    fn = sum(1 for t in both if not said[t] and truth[t])
    return {"labelled": len(both), "frauds": tp + fn,
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / (tp + fn), 4) if tp + fn else None}


def read_topic(s, topic: str, idle_ms: int = 3_000) -> list[dict]:
    """Every committed record of `topic` (a transactional writer's aborted ones are never read)."""
    consumer = kafka_client.consumer(s, topic, auto_offset_reset="earliest", consumer_timeout_ms=idle_ms,
                                     max_poll_records=5_000, isolation_level="read_committed")
    try:
        return [json.loads(m.value) for m in consumer]
    finally:
        consumer.close()


def prime(s, tx: str, dec: str, deadline: float) -> None:
    """Send a few transactions until one comes back decided: the job's first, slow batches
    (Python workers, state store, real-time tasks) are then behind us."""
    producer = kafka_client.producer(s, acks="all")
    i = 0
    try:
        while time.monotonic() < deadline:
            now = int(time.time() * 1000)
            txn = {"txn_id": f"prime-{i}", "card_id": f"prime-{i}", "merchant_id": "prime",
                   "amount_cents": 1_000, "currency": "EUR", "lat": 0.0, "lon": 0.0, "event_time": now,
                   "produced_at": now}
            producer.send(tx, key=txn["card_id"].encode(), value=json.dumps(txn).encode())
            producer.flush()
            i += 1
            if read_topic(s, dec, 1_000):
                return
            time.sleep(1)
        raise SystemExit("bench latency: the fraud job decided nothing within 5 minutes.")
    finally:
        producer.close()


def _stop(proc: subprocess.Popen, grace_s: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench latency")
    p.add_argument("--mode", choices=("microbatch", "realtime"), default="microbatch")
    p.add_argument("--rate", type=float, default=1_000.0)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=20.0, help="seconds fed before measuring")
    p.add_argument("--trigger-seconds", type=float, default=0.0,
                   help="micro-batch trigger (0: next batch as soon as the last one ends)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    args = p.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.warmup < 0:
        p.error("--rate and --seconds must be positive and --warmup zero or more")

    from infra.topics import ensure_topics

    s = load()
    started_broker = not s.external_bootstrap and not broker.broker_pids(s)
    broker.up(s, quiet=True)
    tag = uuid.uuid4().hex[:8]
    tx, labels, dec, dlq, marks, rt = (f"bench-{name}-{tag}" for name in ("tx", "labels", "dec", "dlq", "marks", "rt"))
    out_topic = rt if args.mode == "realtime" else dec  # where this mode's decisions land
    work = s.run_dir / f"bench-latency-{tag}"
    work.mkdir(parents=True)
    ensure_topics([tx, labels, dec, dlq, marks, rt], s=s)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.mode == "realtime":
        # the real-time query holds one task slot per Kafka partition for its whole batch, next to
        # the stateful path's tasks: more slots than cores (its tasks mostly wait on Kafka)
        env.setdefault("SPARK_MASTER", f"local[{2 * s.topics.partitions + 2}]")
    job = sim = None
    try:
        job_log = open(work / "job.log", "w")
        job = subprocess.Popen(
            [sys.executable, "-m", "pipelines.fraud", "--mode", args.mode, "--transactions-topic", tx,
             "--decisions-topic", dec, "--dlq-topic", dlq, "--markers-topic", marks, "--realtime-topic", rt,
             "--checkpoint", str(work / "checkpoint"),
             "--store", str(work / "store.db"), "--trigger-seconds", str(args.trigger_seconds),
             "--starting-offsets", "earliest", "--profile-refresh-seconds", "0"],
            cwd=ROOT, env=env, stdout=job_log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while "mode, epoch" not in (work / "job.log").read_text():
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench latency: the fraud job did not start; see {work / 'job.log'}")
            time.sleep(0.5)
        prime(s, tx, out_topic, time.monotonic() + 300)
        log(f"job up ({args.mode}); feeding {args.rate:g} tx/s for {args.warmup:g} s warm-up + "
            f"{args.seconds:g} s measured")
        total = int(args.rate * (args.warmup + args.seconds))
        t_start = time.time()
        sim = subprocess.Popen(
            [sys.executable, "-m", "simulator", "--rate", str(args.rate), "--count", str(total),
             "--seed", str(args.seed), "--topic", tx, "--labels-topic", labels, "--no-control",
             "--linger-ms", "0", "--progress-seconds", "0"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        since_ms = int((t_start + args.warmup) * 1000)
        out, err = sim.communicate(timeout=args.warmup + args.seconds + 300)
        t_end = time.time()
        if sim.returncode != 0:
            raise SystemExit(f"bench latency: the simulator failed: {err.strip()[-300:]}")
        totals = json.loads(out.strip().splitlines()[-1])
        log(f"simulator done: {totals}")
        sent = int(totals.get("sent", total))
        # let the job drain, then read everything back
        expected = len([l for l in read_topic(s, labels, 2_000)
                        if not str(l.get("pattern", "")).startswith("bad:")])
        drain_deadline = time.monotonic() + 120
        decisions: list[dict] = []
        while time.monotonic() < drain_deadline:
            decisions = [d for d in read_topic(s, out_topic) if not d["txn_id"].startswith("prime-")]
            if len({d["txn_id"] for d in decisions}) >= expected:
                break
            log(f"{len({d['txn_id'] for d in decisions})} of {expected} decided; waiting")
            time.sleep(3)
        decisions = [d for d in decisions if not d["txn_id"].startswith("prime-")]
        figures = latency_figures(decisions, since_ms)
        label_rows = read_topic(s, labels, 2_000)
        result = {"mode": args.mode, "rate": args.rate,
                  "achieved_rate": round(float(totals.get("achieved_rate") or sent / max(1e-9, t_end - t_start)), 1),
                  **{k: figures[k] for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")},
                  "measured": figures["measured"], "decided": len({d["txn_id"] for d in decisions}),
                  "expected": expected, **quality(decisions, label_rows)}
        if result["decided"] < expected:
            log(f"only {result['decided']} of {expected} transactions decided; job log kept: {work / 'job.log'}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        return result
    finally:
        if sim is not None and sim.poll() is None:
            sim.kill()
        if job is not None:
            _stop(job)
        if started_broker:
            broker.down(s, quiet=True)
