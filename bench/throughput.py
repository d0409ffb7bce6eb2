"""Sustained events/s through each guarantee, Kafka -> Spark -> SQLite: `python -m bench throughput --json`.

Fills a fresh decisions topic with N events from several producer processes, then runs the usage
job's own query for each guarantee (pipelines.usage.UsageJob.start_query: same parsing, JVM
aggregation, dedupe and sink rule) over it, one after the other in one Spark application, until
its sink has counted all N. At-most-once is told to start from the earliest offset here (it
normally starts from the latest), otherwise it would see none of the pre-filled topic.

Figures: events/s = rows / summed trigger execution time over the query's batches (Spark's own
progress; excludes the query's start-up), plus the wall-clock rate for reference on stderr.
Prints {"at-most-once": …, "at-least-once": …, "exactly-once": …, "eo_over_alo": …}.

With --cluster the same queries run on the Spark standalone cluster (infra.cluster: started for
the run unless it is up, stopped after it if the bench started it), as an application with one
executor per worker; the figures add the master, the workers ALIVE and the executors the
application had.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import multiprocessing as mp
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import own_broker, own_cluster, own_spark, wait_for_rows
from infra import cluster, kafka_client
from infra.config import load
from infra.contracts import GUARANTEES
from infra.topics import ensure_topics


def log(msg: str) -> None:
    print(f"bench throughput: {msg}", file=sys.stderr, flush=True)


def _fill(args) -> int:
    s, topic, start, count = args

    prod = kafka_client.producer(s, acks=1, linger_ms=50, batch_size=1 << 20, max_request_size=8 << 20)
    now = int(time.time() * 1000)
    template = ('{"txn_id": "tx-%d", "card_id": "card-%d", "merchant_id": "m-%d", "amount_cents": %d, '
                '"event_time": %d, "produced_at": %d, "decided_at": %d, "score_avg_ticket": 0.1, '
                '"score_proximity": 0.2, "score_velocity": 0.3, "score": %s, "is_fraud": %s, "is_late": false}')
    for i in range(start, start + count):
        fraud = i % 50 == 0
        value = template % (i, i % 1000, i % 97, 1000 + i % 5000, now + i // 100, now, now,
                            "0.9" if fraud else "0.1", "true" if fraud else "false")
        prod.send(topic, key=b"tx-%d" % i, value=value.encode())
    prod.flush()
    prod.close()
    return count


def fill(s, topic: str, n: int, processes: int) -> float:
    per = n // processes
    jobs = [(s, topic, k * per, per if k < processes - 1 else n - per * (processes - 1))
            for k in range(processes)]
    t0 = time.monotonic()
    with mp.get_context("spawn").Pool(processes) as pool:
        sent = sum(pool.map(_fill, jobs))
    took = time.monotonic() - t0
    log(f"filled {topic} with {sent} events in {took:.1f} s ({sent / took:,.0f}/s, {processes} producers)")
    return took


def measure(job, guarantee: str, n: int, timeout: float, label: str = "") -> float:
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from pipelines import guarantees
    from pipelines.usage.job import reset_sink

    policy = guarantees.policy(guarantee)
    reset_sink(job.db, job.s, policy.query, policy.name)  # its counts, ledger and checkpoint: a fresh run
    t0 = time.monotonic()
    query = job.start_query(policy)
    try:
        progress = wait_for_rows(query, n, timeout, f"{guarantee} query", every=0.2)
        wall = time.monotonic() - t0
        sink = guarantees.counts(job.db).get(guarantee, {}).get("processed", 0)
    finally:
        query.stop()
    if sink != n:
        raise RuntimeError(f"{guarantee}: the sink counted {sink} of {n} events")
    rows = sum(p["numInputRows"] for p in progress)
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
    rate = rows / busy if busy else 0.0
    log(f"{label}{guarantee}: {rows} rows in {len(progress)} batches, {busy:.1f} s busy -> {rate:,.0f}/s "
        f"(wall {wall:.1f} s incl. start-up -> {rows / wall:,.0f}/s)")
    return rate


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench throughput")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (always)")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets", type=int, default=None, help="maxOffsetsPerTrigger (default: setting)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--topic", help="reuse a topic already filled with exactly --events events")
    parser.add_argument("--cluster", action="store_true",
                        help="run on the Spark standalone cluster (SPARK_MASTER_PORT, SPARK_WORKERS ...)")
    args = parser.parse_args(argv)
    if args.events < 1 or args.producers < 1:
        raise SystemExit("--events and --producers must be positive.")

    base = load()
    if args.cluster and base.spark_master.startswith("local"):
        base = dataclasses.replace(base, spark_master=base.spark_master_url)
    with own_broker(base, log), (own_cluster(base, log) if args.cluster else contextlib.nullcontext()):
        return _run(args, base)


def executors(spark) -> int:
    """The executors the application has now: its block managers, the driver's not counted."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


def _run(args, base) -> dict:
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from controlplane import fencing
    from pipelines.usage.job import UsageJob

    topic = args.topic or f"bench-throughput-{uuid.uuid4().hex[:8]}"
    if not args.topic:
        ensure_topics([topic], partitions=args.partitions, s=base)
        fill(base, topic, args.events, args.producers)
    out = {}
    with tempfile.TemporaryDirectory(prefix="bench-throughput-", dir=base.run_dir) as tmp:
        s = dataclasses.replace(base, topics=dataclasses.replace(base.topics, decisions=topic),
                                store_path=Path(tmp) / "cardstream.db", checkpoint_root=Path(tmp) / "checkpoints",
                                trigger_seconds=0.0,
                                usage_max_offsets=args.max_offsets or base.usage_max_offsets)
        with own_spark("cardstream-bench-throughput", s) as spark:
            out["master"] = s.spark_master
            job = UsageJob(list(GUARANTEES), s, windows=False, amo_from_earliest=True)
            job.spark = spark
            job.epoch = fencing.take_lease(job.db, "usage")  # the queries run here, not through job.run()
            measure(job, "at-least-once", args.events, args.timeout, label="warm-up (not counted) ")
            for g in GUARANTEES:
                out[g] = round(measure(job, g, args.events, args.timeout))
            if not s.spark_master.startswith("local"):
                out["workers"] = len(cluster.alive_workers(cluster.master_json(s) or {}, s))
                out["executors"] = executors(spark)
    out["eo_over_alo"] = round(out["exactly-once"] / out["at-least-once"], 3) if out["at-least-once"] else None
    return out
