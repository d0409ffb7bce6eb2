"""The ceilings on this machine: `python -m bench limit --json [--events N]`.

Why: a pipeline's events/s means little alone; next to what Kafka and Spark can do here with no
work at all, it says how much of the machine the pipeline leaves on the table.

Starts the broker if none of ours runs (and stops it again if it started it), then on a fresh
topic shaped like `transactions` (`--partitions`, default 4):

- produce_eps: records acknowledged per second while `--producers` kafka-python processes
  (default: one per core) fill the topic with N records (acks=1, 50 ms linger, 1 MiB batches);
- kafka_python_consume_eps: one kafka-python consumer reading all N records back (raw bytes, no
  decoding), from the first poll to the last record;
- spark_noop_eps: Spark's Kafka source into the `noop` sink (rows are materialised, nothing is
  written), maxOffsetsPerTrigger as the usage job's; rows / summed trigger execution time over the
  batches, the same definition as bench/throughput.py, after one untimed warm-up pass.

Prints {"kafka_python_consume_eps", "spark_noop_eps", "produce_eps", ...}; the topic is deleted.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time
import uuid

from bench.common import create_topic, delete_topics, fill, logger, own_broker, own_spark, wait_for_rows
from infra import kafka_client
from infra.config import load

log = logger("limit")


def consume_rate(s, topic: str, n: int, timeout: float) -> float:
    """Events/s one kafka-python consumer reads `topic` at, raw, from its first poll to record n."""
    consumer = kafka_client.consumer(s, topic, auto_offset_reset="earliest", max_poll_records=100_000,
                                     fetch_max_bytes=64 << 20, max_partition_fetch_bytes=16 << 20)
    try:
        got, t0 = 0, None
        deadline = time.monotonic() + timeout
        while got < n and time.monotonic() < deadline:
            batch = consumer.poll(500)
            if batch and t0 is None:
                t0 = time.monotonic()
            got += sum(len(v) for v in batch.values())
        took = time.monotonic() - (t0 or time.monotonic())
    finally:
        consumer.close()
    if got < n:
        raise SystemExit(f"bench limit: kafka-python read {got} of {n} records within {timeout:.0f} s.")
    log(f"kafka-python: {got:,} records in {took:.2f} s -> {got / took:,.0f}/s")
    return got / took


def noop_query(spark, topic: str, s):
    """Spark's Kafka source (as the usage job's guarantee queries read it: no headers) into the
    `noop` sink, from the earliest offset: every record read and materialised, nothing done with
    it; trigger 0 s."""
    # deferred: pyspark (and its JVM) loads only where Spark runs
    from pipelines.engine.sources import read_kafka

    return (read_kafka(spark, topic, s, starting_offsets="earliest", max_offsets_per_trigger=s.usage_max_offsets,
                       headers=False)
            .select("key", "value", "partition", "offset", "timestamp")
            .writeStream.format("noop").trigger(processingTime="0 seconds").start())


def spark_noop_rate(s, topic: str, n: int, timeout: float) -> float:
    """Spark Kafka source -> noop sink; rows / summed triggerExecution, after a warm-up pass."""
    with own_spark("cardstream-bench-limit", s) as spark:
        rate = 0.0
        for label in ("warm-up (not counted) ", ""):
            query = noop_query(spark, topic, s)
            try:
                progress = wait_for_rows(query, n, timeout, "bench limit: the Spark noop query")
            except RuntimeError as exc:
                raise SystemExit(str(exc)) from None
            finally:
                query.stop()
            rows = sum(p["numInputRows"] for p in progress)
            busy = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
            if rows < n:
                raise SystemExit(f"bench limit: Spark read {rows} of {n} records within {timeout:.0f} s.")
            rate = rows / busy if busy else 0.0
            log(f"{label}spark noop: {rows:,} rows in {len(progress)} batches, {busy:.2f} s busy -> {rate:,.0f}/s")
        return rate


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench limit")
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--producers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per measurement")
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    args = p.parse_args(argv)
    if args.events < 1 or args.producers < 1 or args.partitions < 1:
        p.error("--events, --producers and --partitions must be positive")

    base = load()
    tag = uuid.uuid4().hex[:8]
    topic = f"bench-limit-transactions-{tag}"
    with own_broker(base, log):
        try:
            create_topic(base, topic, args.partitions)
            sent, took = fill(base, topic, args.events, args.producers, kind="transactions")
            produce_eps = sent / took
            log(f"produced {sent:,} transactions in {took:.2f} s -> {produce_eps:,.0f}/s "
                f"({args.producers} kafka-python processes)")
            consume_eps = consume_rate(base, topic, args.events, args.timeout)
            s = dataclasses.replace(base, trigger_seconds=0.0)
            spark_eps = spark_noop_rate(s, topic, args.events, args.timeout)
        finally:
            delete_topics(base, tag, log)
    return {"kafka_python_consume_eps": round(consume_eps), "spark_noop_eps": round(spark_eps),
            "produce_eps": round(produce_eps), "events": args.events, "partitions": args.partitions,
            "producers": args.producers, "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2)}
