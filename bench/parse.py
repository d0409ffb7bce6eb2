"""`python -m bench parse --json`: what the transaction contract's parsing costs in the JVM.

Every transaction is parsed and validated by Spark SQL expressions (pipelines/engine/sources.py)
once per query that reads it: the decisions query, the dead-letter query and, in real-time mode,
the real-time query. This scenario times that parsing alone, on a static frame cached in memory
(no Kafka, no state, no sink): `--rows` payloads shaped as the simulator writes them, one in
`--bad-every` malformed with a kind of the simulator's corpus, parsed `--rounds` times on the
job's own Spark session into Spark's no-op sink. It prints the median round and, per row, the
core-µs it stands for (the round's wall time × the cores parsing: both are busy throughout).
"""
from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timezone

import numpy as np

from bench.common import logger
from infra.config import load
from pipelines.engine.session import get_spark
from simulator import patterns as P

log = logger("parse")


def payloads(rows: int, bad_every: int, now_ms: int) -> list[bytes]:
    """Valid transactions like the simulator's (ids, cents, 5-decimal coordinates, ms times), with
    one malformed record of each of the corpus's kinds in turn every `bad_every` rows."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(rows):
        doc = {"txn_id": f"t-{i:09d}", "card_id": f"card-{i % 20_000:07d}", "merchant_id": f"m-{i % 500}",
               "amount_cents": int(100 + (i * 7919) % 90_000), "currency": "EUR",
               "lat": round(48.85661 + (i % 1000) / 1e4, 5), "lon": round(2.35222 - (i % 777) / 1e4, 5),
               "event_time": now_ms - 1_000 - i % 5_000, "produced_at": now_ms - 900}
        if bad_every and i % bad_every == bad_every - 1:
            out.append(P.malformed(doc, P.BAD_KINDS[(i // bad_every) % len(P.BAD_KINDS)], rng)[0])
        else:
            out.append(P._json(doc))
    return out


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench parse")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=6, help="timed rounds after two warm-up rounds")
    p.add_argument("--bad-every", type=int, default=100)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.rows < 1 or a.rounds < 1:
        p.error("--rows and --rounds must be at least 1")

    # deferred: pyspark (and its JVM) loads only where Spark runs
    from pyspark.sql import functions as F

    from pipelines.engine.sources import parse_transactions

    s = load()
    spark = get_spark("bench-parse", s)
    now_ms = int(time.time() * 1000)
    ts = datetime.fromtimestamp(now_ms / 1000, timezone.utc)
    data = [(v, i % 4, i, ts) for i, v in enumerate(payloads(a.rows, a.bad_every, now_ms))]
    cores = spark.sparkContext.defaultParallelism
    frame = (spark.createDataFrame(data, "value binary, partition int, offset long, timestamp timestamp")
             .repartition(cores).cache())
    frame.count()
    times = []
    for r in range(a.rounds + 2):
        # a new plan every round, written to Spark's no-op sink: re-running one DataFrame's plan
        # would skip its shuffle's map stage (the output is still there), so nothing is parsed
        t0 = time.perf_counter()
        parse_transactions(frame, s, now_ms=now_ms).write.format("noop").mode("overwrite").save()
        if r >= 2:
            times.append(time.perf_counter() - t0)
            log(f"round {r - 1}/{a.rounds}: {times[-1] * 1000:.0f} ms")
    result = parse_transactions(frame, s, now_ms=now_ms).agg(
        F.count(F.when(F.col("dlq_reason").isNull(), 1)).alias("valid"),
        F.count(F.col("dlq_reason")).alias("invalid")).collect()[0]
    frame.unpersist()
    median = statistics.median(times)
    return {"rows": a.rows, "valid": result.valid, "invalid": result.invalid, "rounds": a.rounds,
            "median_ms": round(median * 1000), "min_ms": round(min(times) * 1000),
            "rows_per_s": round(a.rows / median), "core_us_per_row": round(median * cores * 1e6 / a.rows, 1),
            "cores": cores}
