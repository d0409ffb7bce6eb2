"""The SystemUsageAnalyzer: transactions processed and fraud detected, one query per guarantee.

`python -m pipelines.usage [--guarantee at-most-once|at-least-once|exactly-once] [--no-windows]
[--reset-sink]`

All queries read the Kafka `decisions` topic (read_committed) side by side in one Spark
application, each with its own checkpoint under settings.checkpoint_root/"usage-<guarantee>"
(at-most-once, which starts over on every run: a link to its instance's own folder) and its own
row in `usage_counts`. Each query parses its Kafka rows against the decision contract
(`counted_stream`: the decisions breaking it are counted with their reasons in the query's
observed metric `rejected_decisions`, which the progress listener stores in `not_kept`);
exactly-once then keeps each txn_id once with Spark's own `dropDuplicatesWithinWatermark` in the
session's RocksDB state (`pipelines.usage.dedupe`); each micro-batch is counted in one
aggregation (`tally`). Only those numbers reach the
driver, where the guarantee's policy object
(`pipelines.guarantees`) decides what the sink does with them. Every batch the sink is handed
goes into the sink ledger with its Kafka offset range from Spark's offset log, which is what the
auditor checks the counts against.

Sink down (`sink-down` fault): at-most-once drops the batch; the durable guarantees retry the
write with backoff inside foreachBatch until the sink is back (Spark does not commit the batch
meanwhile). A batch that fails otherwise (`task-failure`, a store error) fails its query, which
is restarted in-process from its checkpoint (`pipelines.restarts`), then exits 1.
A fenced instance (zombie) records the rejected write and exits 3; one whose query Spark stopped
first (one run per checkpoint) exits 4. A durable query whose store holds batches of another
checkpoint refuses to start (exit 2) and says how to fix it; so does one whose checkpoint hands a
batch id its store applied over another Kafka range (restored from a backup, or logs deleted), and
one whose checkpoint keeps state of the engine Spark's state replaced (`dedupe.private_state`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import threading

from controlplane import fencing, ledger
from controlplane.clock import now_ms
from controlplane.store import connect, transaction
from infra import kafka_client, logs
from infra.config import Settings, load
from infra.contracts import EXIT_FENCED, EXIT_REFUSED, EXIT_SUPERSEDED, GUARANTEES
from pipelines import guarantees
from pipelines.engine import checkpoints
from pipelines.engine.runner import QueryRunner
from pipelines.engine.standby import Heartbeat, listen, takeover_due, wait_for_takeover
from pipelines.guarantees import Guarantee
from pipelines.hooks import Faults
from pipelines.restarts import first_line
from pipelines.usage import dedupe

JOB = "usage"
log = logging.getLogger(JOB)


def checkpoint_dir(s: Settings, name: str):
    return s.checkpoint_root / name


def record_start(db, guarantee: str, topic: str, offsets: dict) -> None:
    """Remember where a query FIRST started reading `topic` (kept across restarts)."""
    db.conn.execute("INSERT OR IGNORE INTO usage_starts (guarantee, topic, offsets, started_at) "
                    "VALUES (?, ?, ?, ?)", (guarantee, topic, json.dumps(offsets), now_ms()))


def exit_fenced(db, epoch: int, exc: fencing.FencedError, what: str):
    """A newer instance holds the lease: record the rejected write, say so in one line, exit 3."""
    try:
        fencing.record_rejection(db, JOB, epoch, what)
    finally:
        log.error("fenced, exiting: %s", exc)
        logging.shutdown()
        os._exit(EXIT_FENCED)


def exit_refused(exc: Exception) -> None:
    """A batch the store cannot take without losing or repeating records (ledger.ReusedBatch):
    say why in one sentence and exit 2, which the supervisor does not restart."""
    log.error("%s", exc)
    logging.shutdown()
    os._exit(EXIT_REFUSED)


def reset_sink(db, s: Settings, sink: str, guarantee: str | None) -> None:
    """Clear one sink's rows and its checkpoint together (`--reset-sink`)."""
    with transaction(db) as conn:
        conn.execute("DELETE FROM sink_batches WHERE sink = ?", (sink,))
        if guarantee:
            conn.execute("DELETE FROM usage_counts WHERE guarantee = ?", (guarantee,))
            conn.execute("DELETE FROM usage_starts WHERE guarantee = ?", (guarantee,))
        else:
            for table in ("windows", "late_events", "usage_watermarks"):
                conn.execute(f"DELETE FROM {table}")
    checkpoints.clear(checkpoint_dir(s, sink))


class UsageJob:
    """One Spark application running the chosen guarantee queries (and the windows query)."""

    def __init__(self, guarantee_names: list[str], s: Settings, windows: bool = True,
                 amo_from_earliest: bool = False, reset: bool = False):
        """`amo_from_earliest` (benchmarks only) lets at-most-once read a pre-filled topic; its sink
        rule and fresh checkpoint stay the same."""
        self.s = s
        self.policies: list[Guarantee] = [guarantees.policy(g) for g in guarantee_names]
        self.windows = windows
        self.amo_from_earliest = amo_from_earliest
        self.db = connect(s.store_path)
        self.epoch = 0  # taken in `run`, once the session is up (a standby waits for it there)
        self.heartbeat: Heartbeat | None = None
        self.stopping = threading.Event()
        self.faults = Faults(s.store_path, [p.name for p in self.policies])
        self._dbs: dict[str, object] = {}
        self.spark = None
        self.runner: QueryRunner | None = None
        if reset:
            for p in self.policies:
                reset_sink(self.db, s, p.query, p.name)
            if windows:
                from pipelines.usage.windows import QUERY
                reset_sink(self.db, s, QUERY, None)

    @property
    def queries(self) -> dict:
        return self.runner.queries if self.runner else {}

    def store_for(self, name: str):
        """One store connection per query (a query's batches run one at a time)."""
        if name not in self._dbs:
            self._dbs[name] = connect(self.s.store_path, synchronous="FULL")  # durable before Spark commits
        return self._dbs[name]

    def check_bound(self, sink: str, keeps_checkpoint: bool = True) -> None:
        """Exit 2 with one sentence when the store holds batches of another checkpoint, or the
        checkpoint keeps state Spark's operators cannot resume."""
        if not keeps_checkpoint:
            return
        why = dedupe.private_state(checkpoint_dir(self.s, sink))
        if why:
            exit_refused(RuntimeError(f"The checkpoint of {sink} cannot be resumed: {why}; {guarantees.RESET_FIX}."))
        try:
            ledger.check_bound(self.db, sink, checkpoints.query_id(checkpoint_dir(self.s, sink)),
                               guarantees.RESET_FIX)
        except ledger.ForeignCheckpoint as exc:
            exit_refused(exc)

    # -- the foreachBatch of each guarantee ---------------------------------------------------------
    def batch_handler(self, policy: Guarantee, checkpoint):
        """The query's foreachBatch; `checkpoint` is the folder this instance's query runs in."""
        from pyspark.sql import functions as F

        name = policy.query

        def counts(df, batch_id, failing) -> tuple[int, int]:
            """(decisions, fraud) of the batch (`counted_stream`'s rows); an injected task failure
            fails a task of that job."""
            if failing is not None:
                msg = f"task-failure injected into {name} batch {batch_id}"
                df = df.withColumn("is_fraud", F.coalesce(F.raise_error(F.lit(msg)).cast("boolean"), F.col("is_fraud")))
            return tally(df)

        def handle(df, batch_id):
            db = self.store_for(name)
            batch = checkpoints.ledger_batch(name, checkpoint, batch_id)
            failing = self.faults.take_task_failure(policy.name)
            try:
                processed, fraud = counts(df, batch_id, failing)
            except Exception as exc:
                if failing is not None:
                    self.faults.task_failure_done(db, policy.name, failing, batch_id)
                if not policy.drops_failed_batches:
                    raise
                policy.failed(db, dataclasses.replace(batch, processed=_safe_count(df)), self.epoch,
                              RuntimeError(first_line(exc)))
                return
            if failing is not None:  # an empty batch raised nothing: keep the hook armed
                self.faults.rearm_task_failure(policy.name, failing)
            batch = dataclasses.replace(batch, processed=processed, fraud=fraud)
            if batch.processed == 0:
                return
            try:
                policy.write(db, batch, self.epoch, self.faults.gate, stop=self.stopping.is_set)
            except fencing.FencedError as exc:
                exit_fenced(db, self.epoch, exc, f"{name} batch {batch_id}")
            except ledger.ReusedBatch as exc:
                exit_refused(exc)
            self.faults.after_sink(db, policy.name, batch_id, batch.processed)

        return handle

    # -- starting and restarting queries -----------------------------------------------------------
    def start_query(self, policy: Guarantee, restart: bool = False):
        from pipelines.engine.sources import read_kafka

        s = self.s
        checkpoint = checkpoint_dir(s, policy.query)
        topic = s.topics.decisions
        starting = policy.starting_offsets
        if not policy.keeps_checkpoint:
            # its own folder per instance: a woken zombie's offsets never land in this one
            checkpoint = checkpoints.fresh_instance(checkpoint, self.epoch,
                                                    current=fencing.is_current(self.db, JOB, self.epoch))
            if starting == "latest" and not self.amo_from_earliest:
                # resolve "latest" here, so the first start is on record (the audit's truth
                # for this query starts there)
                ends = kafka_client.end_offsets(topic, s)
                record_start(self.db, policy.name, topic, {str(p): o for p, o in ends.items()})
                starting = json.dumps({topic: {str(p): o for p, o in ends.items()}})
            elif self.amo_from_earliest:
                starting = "earliest"
        self.check_bound(policy.query, policy.keeps_checkpoint)
        stream = counted_stream(read_kafka(self.spark, topic, s, starting_offsets=starting,
                                           max_offsets_per_trigger=s.usage_max_offsets, headers=False), policy, s)
        return (stream.writeStream.queryName(policy.query)
                .foreachBatch(self.batch_handler(policy, checkpoint))
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime=f"{s.usage_trigger_seconds} seconds")
                .start())

    def start_windows(self, restart: bool = False):
        from pipelines.usage import windows

        self.check_bound(windows.QUERY)
        return windows.start_query(self.spark, self.s, self.epoch, self.store_for(windows.QUERY),
                                   on_fenced=exit_fenced, on_refused=exit_refused)

    def starters(self) -> dict[str, callable]:
        out = {p.query: (lambda restart=False, p=p: self.start_query(p, restart)) for p in self.policies}
        if self.windows:
            from pipelines.usage.windows import QUERY
            out[QUERY] = self.start_windows
        return out

    def run(self, standby: bool = False) -> int:
        from infra.topics import ensure_topics
        from pipelines.engine import metrics
        from pipelines.engine.session import get_spark, record_ui, warm_up

        s = self.s
        ensure_topics([s.topics.decisions], s=s)
        self.spark = get_spark("cardstream-usage", s, **spark_conf(s))
        starters = self.starters()
        if standby:
            record_ui(self.db, f"{JOB}-standby", self.spark)
            warm_up(self.spark, s, s.topics.decisions)
            if s.standby_rehearsal:
                try:
                    rehearse(self.spark, s, self.policies, self.windows,
                             cancel=lambda: self.stopping.is_set() or takeover_due(self.db, JOB, s.lease_ttl_seconds))
                except Exception as exc:  # noqa: BLE001 - a warm-up: a standby without it still takes over
                    log.warning("the standby's rehearsal failed (%s); waiting without it", exc)
            if not wait_for_takeover(self.db, JOB, s.lease_ttl_seconds, self.stopping):
                self.shutdown()
                return 0
        # after the standby's rehearsal: its batches are no batches of the job's
        metrics.install(self.spark, s.store_path, {n: str(checkpoint_dir(s, n)) for n in starters}, job=JOB)
        self.epoch = fencing.take_lease(self.db, JOB)
        record_ui(self.db, JOB, self.spark)
        self.heartbeat = Heartbeat(s.store_path, JOB, self.epoch)
        self.heartbeat.start()
        self.runner = QueryRunner(JOB, self.db, self.epoch, starters, self.stopping)
        self.runner.start()
        self.faults.start()
        log.info("running %s on %s (epoch %s)", ", ".join(self.queries), s.topics.decisions, self.epoch)
        code = self.runner.watch()
        self.shutdown(superseded=code == EXIT_SUPERSEDED)
        return code

    def shutdown(self, superseded: bool = False) -> None:
        self.stopping.set()
        self.faults.stop()
        if self.runner:
            self.runner.stop()
        if self.heartbeat:
            self.heartbeat.stop(release=not superseded)
        if not superseded:  # a zombie leaves the live instance's checkpoints alone
            for p in self.policies:
                if not p.keeps_checkpoint:
                    checkpoints.clear(checkpoint_dir(self.s, p.query))
        if self.spark is not None:
            self.spark.stop()


def spark_conf(s: Settings) -> dict[str, str]:
    """The usage application's own Spark settings (the job's and the benches' sessions alike).

    No empty batches just to move a watermark: the sinks need no eviction output (exactly-once's
    dedupe and the windows query evict their keys at the next batch with data). Their state is in
    the session's RocksDB store (pipelines/engine/session.py), as the fraud job's.
    """
    return {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}


def counted_stream(source, policy: Guarantee, s: Settings):
    """Kafka rows of `decisions` -> what a guarantee query counts: its decisions that keep the
    contract (the others reported with their reasons in the observed metric `rejected_decisions`),
    each txn_id once within DEDUPE_SECONDS when the guarantee dedupes (Spark's state), as
    (`is_fraud`) rows."""
    from pipelines.engine.sources import parse_decisions

    decisions = parse_decisions(source, s=s)
    if policy.dedupes_input:
        decisions = dedupe.deduplicated(decisions, s)
    return decisions.select("is_fraud")


def tally(df) -> tuple[int, int]:
    """A batch of `counted_stream` rows -> (decisions, of them fraud), in one aggregation."""
    from pyspark.sql import functions as F

    row = df.agg(F.count(F.lit(1)).alias("n"), F.count_if(F.col("is_fraud")).alias("f")).collect()[0]
    return int(row["n"]), int(row["f"] or 0)


def rehearse(spark, s: Settings, policies: list[Guarantee], windows: bool, timeout_s: float = 180.0,
             cancel=lambda: False) -> bool:
    """A standby's dress rehearsal (pipelines/engine/rehearsal.py): every query of the job — one
    per guarantee and the windows — started at once as at a takeover, over 32 scratch decisions,
    each batch aggregated as its sink aggregates it; nothing reaches the store."""
    import time

    from infra.contracts import DECISION_FIELDS
    from pipelines.engine.rehearsal import kafka_rows, run_to_end, scratch_stream
    from pipelines.usage import windows as W

    now = int(time.time() * 1000)
    decisions = [{**{k: None for k in DECISION_FIELDS}, "txn_id": f"rehearsal-{i}", "card_id": f"card-{i % 8}",
                  "merchant_id": "m-rehearsal", "amount_cents": 1_000 + i, "event_time": now - (32 - i) * 1000,
                  "produced_at": now - 100, "decided_at": now - 50, "score": 0.1, "is_fraud": i % 5 == 0,
                  "is_late": False} for i in range(32)]
    rows = kafka_rows([(d["txn_id"].encode(), json.dumps(d).encode()) for d in decisions], now)
    with scratch_stream(spark, s, rows, JOB) as (source, tmp):
        plans = {p.query: (counted_stream(source, p, s), lambda df, _: tally(df)) for p in policies}
        if windows:
            plans[W.QUERY] = (W.windowed_stream(source, s),
                              lambda df, _: W.batch_results(df, None, s.session_gap_seconds))
        queries = [frame.writeStream.queryName(f"{name}-rehearsal").foreachBatch(handle)
                   .option("checkpointLocation", f"{tmp}/{name}").trigger(availableNow=True).start()
                   for name, (frame, handle) in plans.items()]
        return run_to_end(queries, timeout_s, cancel)


def _safe_count(df) -> int:
    """The batch's valid decisions (what it would have counted), for at-most-once's drop record
    (a query without state: the batch can be read again)."""
    try:
        return tally(df)[0]
    except Exception:  # noqa: BLE001 - only for the drop record
        return 0


def main(argv: list[str] | None = None) -> int:
    logs.setup()
    parser = argparse.ArgumentParser(prog="python -m pipelines.usage", description=__doc__.splitlines()[0])
    parser.add_argument("--guarantee", choices=GUARANTEES, help="run one query (default: all three)")
    parser.add_argument("--no-windows", action="store_true", help="skip the event-time windows query")
    parser.add_argument("--reset-sink", action="store_true",
                        help="clear the chosen queries' store rows and checkpoints together first")
    parser.add_argument("--standby", action="store_true",
                        help="start as a warm standby: session up, waiting for the job's lease")
    args = parser.parse_args(argv)
    s = load()
    if args.standby:
        listen(s.standby_nice)
    job = UsageJob([args.guarantee] if args.guarantee else list(GUARANTEES), s,
                   windows=not args.no_windows, reset=args.reset_sink)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: job.stopping.set())
    from kafka.errors import KafkaError

    try:
        return job.run(standby=args.standby)
    except KafkaError as exc:  # e.g. the broker is down at start: one sentence, the supervisor retries
        log.error("cannot reach Kafka at %s: %s", job.s.kafka_bootstrap, exc)
        job.shutdown()
        return 1
