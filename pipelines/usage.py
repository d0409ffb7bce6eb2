"""The SystemUsageAnalyzer: transactions processed and fraud detected, one query per guarantee.

`python -m pipelines.usage [--guarantee at-most-once|at-least-once|exactly-once] [--no-windows]`

All queries read the Kafka `decisions` topic side by side in one Spark application, each with its
own checkpoint under settings.checkpoint_root/"usage-<guarantee>" and its own row in
`usage_counts`. Each micro-batch is aggregated in the JVM (count, sum(is_fraud)); only those two
numbers reach the driver, where pipelines.guarantees applies the guarantee's sink rule.

How each guarantee is made (the mechanisms, nothing simulated):
- at-most-once: its checkpoint is deleted at every start (and at a clean stop), and it starts from
  the latest offsets, which are captured here and recorded once in `usage_starts` (the audit's
  truth for it starts there). Its sink never raises: failed writes are dropped.
- at-least-once: durable checkpoint, starts from the earliest offset the first time; the sink
  increments before Spark commits; a failed batch is not committed, so it is replayed.
- exactly-once: durable checkpoint, RocksDB state; input deduplicated by txn_id with
  dropDuplicatesWithinWatermark, the watermark on the Kafka record timestamp (when a duplicate was
  written: the fraud job's replays land shortly after the original, while event_time may be late
  by design); results + batch id in one SQLite transaction, replayed batch ids skipped.

Sink down (`sink-down` fault): at-most-once drops the batch; at-least-once and exactly-once retry
the write with backoff inside foreachBatch until the sink is back (Spark does not commit the batch
meanwhile). A batch that fails otherwise (`task-failure`, a store error) fails its query, which this
driver restarts in-process from its checkpoint, a bounded number of times, then exits 1.
A fenced instance (zombie) records the rejected write, prints one line and exits 3; one whose
query Spark stopped first (one run per checkpoint) exits 4 instead of restarting it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections import deque

from infra.config import Settings, load
from infra.contracts import DECISION_FIELDS, GUARANTEES
from pipelines import fencing, guarantees
from pipelines.commands import now_ms
from pipelines.faults import Faults
from pipelines.guarantees import AT_MOST_ONCE, EXACTLY_ONCE, BatchResult
from pipelines.store import connect

JOB = "usage"
MAX_RESTARTS = 5             # query restarts allowed within RESTART_WINDOW_S before giving up
RESTART_WINDOW_S = 300.0
USED_FIELDS = ("txn_id", "card_id", "event_time", "is_fraud")


def query_name(guarantee: str) -> str:
    return f"usage-{guarantee}"


def checkpoint_dir(s: Settings, name: str):
    return s.checkpoint_root / name


def parse_decisions(kafka_df):
    """Kafka rows of `decisions` -> the few columns the usage job needs (JVM-side JSON parsing)."""
    from pyspark.sql import functions as F

    from pipelines.sources import schema_of

    schema = schema_of({k: DECISION_FIELDS[k] for k in USED_FIELDS})
    d = F.from_json(F.col("value").cast("string"), schema)
    return (kafka_df.select(d.alias("d"), F.col("timestamp").alias("kafka_ts"))
            .select("d.*", "kafka_ts")
            .where(F.col("txn_id").isNotNull())
            .withColumn("event_ts", F.timestamp_millis("event_time")))


def latest_offsets(topic: str, s: Settings) -> dict[str, int]:
    """{partition: end offset} now, read with kafka-python (the at-most-once start point)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=s.kafka_bootstrap, enable_auto_commit=False)
    try:
        parts = None
        for _ in range(50):
            parts = consumer.partitions_for_topic(topic)
            if parts:
                break
            time.sleep(0.1)
        if not parts:
            raise SystemExit(f"usage: topic {topic!r} has no partitions on {s.kafka_bootstrap}.")
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in sorted(parts)])
        return {str(tp.partition): off for tp, off in ends.items()}
    finally:
        consumer.close()


def record_start(db, guarantee: str, topic: str, offsets: dict[str, int]) -> None:
    """Remember where a query FIRST started reading `topic` (kept across restarts)."""
    db.conn.execute("INSERT OR IGNORE INTO usage_starts (guarantee, topic, offsets, started_at) "
                    "VALUES (?, ?, ?, ?)", (guarantee, topic, json.dumps(offsets), now_ms()))


EXIT_SUPERSEDED = 4  # a newer instance owns the job and Spark stopped this one's query


def exit_fenced(db, epoch: int, exc: fencing.FencedError, what: str):
    """A newer instance holds the lease: record the rejected write, say so in one line, exit 3."""
    try:
        fencing.record_rejection(db, JOB, epoch, what)
    finally:
        print(f"usage: fenced, exiting: {exc}", flush=True)
        os._exit(3)


class UsageJob:
    """One Spark application running the chosen guarantee queries (and the windows query)."""

    def __init__(self, guarantee_names: list[str], s: Settings, windows: bool = True):
        self.s = s
        self.names = list(guarantee_names)
        self.windows = windows
        self.db = connect(s.store_path)
        self.epoch = fencing.take_lease(self.db, JOB)
        self.stopping = threading.Event()
        self.faults = Faults(s.store_path, self.names)
        self.queries: dict[str, object] = {}
        self._dbs: dict[str, object] = {}
        self.spark = None

    # -- per-query store connection (one query's batches run one at a time) -----------------------
    def store_for(self, name: str):
        if name not in self._dbs:
            self._dbs[name] = connect(self.s.store_path)
        return self._dbs[name]

    # -- the foreachBatch of each guarantee ---------------------------------------------------------
    def batch_handler(self, guarantee: str):
        from pyspark.sql import functions as F

        name = query_name(guarantee)

        def handle(df, batch_id):
            db = self.store_for(name)
            failing = self.faults.take_task_failure(guarantee)
            aggs = [F.count(F.lit(1)).alias("n"),
                    F.coalesce(F.sum(F.col("is_fraud").cast("long")), F.lit(0)).alias("f")]
            if failing is not None:
                msg = f"task-failure injected into {name} batch {batch_id}"
                aggs.append(F.sum(F.coalesce(F.raise_error(F.lit(msg)).cast("long"), F.lit(0))).alias("x"))
            try:
                row = df.agg(*aggs).collect()[0]
            except Exception as exc:
                if failing is not None:
                    self.faults.task_failure_done(db, guarantee, failing, batch_id)
                if guarantee == AT_MOST_ONCE:  # dropped, never retried (counted for the record)
                    lost = BatchResult(batch_id, _safe_count(df), 0)
                    guarantees.record_drop(db, guarantee, lost, _first_line(exc))
                    return
                raise
            if failing is not None:  # an empty batch raised nothing: keep the hook armed
                self.faults.rearm_task_failure(guarantee, failing)
            result = BatchResult(batch_id, int(row["n"]), int(row["f"]))
            if result.processed == 0:
                return
            try:
                if guarantee == AT_MOST_ONCE:
                    guarantees.write_at_most_once(db, result, self.epoch, self.faults.gate)
                else:
                    write = guarantees.WRITERS[guarantee]
                    guarantees.retry_until_written(
                        lambda: write(db, result, self.epoch, self.faults.gate), stop=self.stopping.is_set)
            except fencing.FencedError as exc:
                exit_fenced(db, self.epoch, exc, f"{name} batch {batch_id}")
            self.faults.after_sink(db, guarantee, batch_id, result.processed)

        return handle

    # -- starting and restarting queries -----------------------------------------------------------
    def start_query(self, guarantee: str, restart: bool = False, from_earliest: bool = False):
        """Start one guarantee's query. `from_earliest` (benchmarks only) lets at-most-once read a
        pre-filled topic; its sink rule and fresh checkpoint stay the same."""
        from pipelines.sources import read_kafka

        s = self.s
        name = query_name(guarantee)
        checkpoint = checkpoint_dir(s, name)
        topic = s.topics.decisions
        starting = "earliest"
        if guarantee == AT_MOST_ONCE and not restart and from_earliest:
            shutil.rmtree(checkpoint, ignore_errors=True)
        elif guarantee == AT_MOST_ONCE and not restart:
            shutil.rmtree(checkpoint, ignore_errors=True)  # no checkpoint kept across restarts
            offsets = latest_offsets(topic, s)
            record_start(self.db, guarantee, topic, offsets)
            starting = json.dumps({topic: {p: o for p, o in offsets.items()}})
        stream = parse_decisions(read_kafka(self.spark, topic, s, starting_offsets=starting,
                                            max_offsets_per_trigger=s.usage_max_offsets))
        stream = stream.select("txn_id", "is_fraud", "kafka_ts")  # only these cross the shuffle
        if guarantee == EXACTLY_ONCE:
            stream = (stream.withWatermark("kafka_ts", f"{s.dedupe_seconds} seconds")
                      .dropDuplicatesWithinWatermark(["txn_id"]))
        return (stream.writeStream.queryName(name)
                .foreachBatch(self.batch_handler(guarantee))
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime=f"{s.trigger_seconds} seconds")
                .start())

    def start_windows(self, restart: bool = False):
        from pipelines import windows

        return windows.start_query(self.spark, self.s, self.epoch, self.store_for(windows.QUERY),
                                   on_fenced=exit_fenced)

    def starters(self) -> dict[str, callable]:
        out = {query_name(g): (lambda restart=False, g=g: self.start_query(g, restart)) for g in self.names}
        if self.windows:
            from pipelines.windows import QUERY
            out[QUERY] = self.start_windows
        return out

    def run(self) -> int:
        from pipelines import metrics
        from pipelines.spark import get_spark
        from infra.topics import ensure_topics

        s = self.s
        ensure_topics([s.topics.decisions], s=s)
        # no empty batches just to move a watermark: the sinks need no eviction output
        self.spark = get_spark("cardstream-usage", s, **{"spark.sql.streaming.noDataMicroBatches.enabled": "false"})
        starters = self.starters()
        metrics.install(self.spark, s.store_path, {n: str(checkpoint_dir(s, n)) for n in starters})
        for name, start in starters.items():
            self.queries[name] = start()
        self.faults.start()
        print(f"usage: running {', '.join(self.queries)} on {s.topics.decisions} (epoch {self.epoch})",
              flush=True)
        restarts: deque[float] = deque()
        code = 0
        while not self.stopping.wait(0.5):
            for name, query in list(self.queries.items()):
                if query.isActive:
                    continue
                error = _first_line(query.exception()) if query.exception() else "stopped"
                newer = fencing.current_epoch(self.db, JOB)
                if newer > self.epoch:
                    # Spark's own guard (one run per checkpoint) tripped before our fencing did.
                    print(f"usage: {name} stopped by Spark ({error}); epoch {newer} now owns the job, "
                          f"so this instance (epoch {self.epoch}) exits without restarting it", flush=True)
                    code = EXIT_SUPERSEDED
                    self.stopping.set()
                    break
                now = time.monotonic()
                restarts.append(now)
                while restarts and now - restarts[0] > RESTART_WINDOW_S:
                    restarts.popleft()
                if len(restarts) > MAX_RESTARTS:
                    print(f"usage: {name} failed {len(restarts)} times in {RESTART_WINDOW_S:.0f} s, "
                          f"giving up: {error}", flush=True)
                    code = 1
                    self.stopping.set()
                    break
                delay = min(30.0, 2.0 ** (len(restarts) - 1))  # a broker outage gets time to pass
                print(f"usage: {name} failed ({error}); restarting it from its checkpoint in {delay:g} s",
                      flush=True)
                if self.stopping.wait(delay):
                    break
                self.queries[name] = starters[name](restart=True)
        self.shutdown(superseded=code == EXIT_SUPERSEDED)
        return code

    def shutdown(self, superseded: bool = False) -> None:
        self.stopping.set()
        self.faults.stop()
        for query in self.queries.values():
            try:
                query.stop()
            except Exception:  # noqa: BLE001 - stopping anyway
                pass
        if AT_MOST_ONCE in self.names and not superseded:  # a zombie leaves the live instance's alone
            shutil.rmtree(checkpoint_dir(self.s, query_name(AT_MOST_ONCE)), ignore_errors=True)
        if self.spark is not None:
            self.spark.stop()


def _first_line(exc) -> str:
    """The one telling line of a (often Py4J-wrapped, multi-line) Spark or Python error."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for line in lines:
        if "task-failure injected" in line:
            return line[:300]
    errors = [ln for ln in lines if ("Error" in ln or "Exception" in ln) and not ln.startswith(("at ", "File "))
              and "Python Proxy" not in ln]
    return (errors[-1] if errors else lines[0] if lines else type(exc).__name__)[:300]


def _safe_count(df) -> int:
    try:
        return int(df.count())
    except Exception:  # noqa: BLE001 - only for the drop record
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.usage", description=__doc__.splitlines()[0])
    parser.add_argument("--guarantee", choices=GUARANTEES, help="run one query (default: all three)")
    parser.add_argument("--no-windows", action="store_true", help="skip the event-time windows query")
    args = parser.parse_args(argv)
    job = UsageJob([args.guarantee] if args.guarantee else list(GUARANTEES), load(),
                   windows=not args.no_windows)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: job.stopping.set())
    from kafka.errors import KafkaError

    try:
        return job.run()
    except KafkaError as exc:  # e.g. the broker is down at start: one sentence, the supervisor retries
        print(f"usage: cannot reach Kafka at {job.s.kafka_bootstrap}: {exc}", flush=True)
        job.shutdown()
        return 1


if __name__ == "__main__":
    sys.exit(main())
