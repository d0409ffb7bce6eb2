"""The fraud detection job: one decision per transaction, to the store and to Kafka.

    python -m pipelines.fraud [--mode microbatch|realtime] [--starting-offsets earliest|latest]
                              [--available-now] [--trigger-seconds S] [--checkpoint DIR] ...

Micro-batch (default): transactions -> parse (JVM) -> malformed ones to the dead-letter topic ->
valid ones keyed by card bucket through `transformWithStateInPandas` (`pipelines.fraud.processor`:
the analyzers over each card's transactions in event order, the profiles of a bucket's cards in
Spark's RocksDB state, checkpointed) -> the aggregator as SQL expressions -> the store's
`decisions` table and the Kafka `decisions` topic, both exactly once (`pipelines.fraud.sinks`).

Real-time (`--mode realtime`): Spark's real-time trigger only runs stateless, JVM-only plans, so
`pipelines.fraud.realtime` scores each transaction in SQL against a snapshot of the card profiles
that the stateful path keeps in the store, and writes its decision to `decisions-rt`; the
stateful path keeps deciding into the store and `decisions`.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from controlplane import fencing, ledger
from controlplane.store import connect
from infra import kafka_client, logs, storage
from infra.storage import Place
from infra.topics import ensure_topics
from infra.config import Settings, load
from infra.contracts import EXIT_REFUSED, EXIT_SUPERSEDED
from pipelines.engine import checkpoints
from pipelines.engine.poison import Streaks
from pipelines.engine.runner import Poison, QueryRunner
from pipelines.engine.session import get_spark, record_ui, warm_up
from pipelines.engine.standby import Heartbeat, listen, takeover_due, wait_for_takeover
from pipelines.fraud.analyzers import DEFAULT_LIMITS, limits_text
from pipelines.fraud import models, realtime
from pipelines.fraud.features import labels_frame, with_history
from pipelines.fraud.processor import make_processor
from pipelines.fraud.quarantine import Quarantine
from pipelines.fraud.sinks import Sinks, scored_table, with_payloads
from pipelines.fraud.state import SCORED_DDL, STATE_LAYOUTS
from pipelines.guarantees import AT_MOST_ONCE, RT_POLICIES, RealtimeGuarantee, rt_policy
from pipelines.hooks import Faults

JOB = "fraud"
log = logging.getLogger(JOB)


@dataclass(frozen=True)
class Options:
    mode: str
    starting_offsets: str
    available_now: bool
    trigger_seconds: float
    max_offsets_per_trigger: int | None
    transactions_topic: str
    decisions_topic: str
    dlq_topic: str
    checkpoint: Place  # a local folder or a URI (infra.storage)
    store_path: Path
    threshold: float
    realtime_batch_seconds: float = 300.0
    markers_topic: str = "decisions-batches"
    realtime_topic: str = "decisions-rt"
    # the real-time path's, resolved once; the stateful path is exactly once
    guarantee: RealtimeGuarantee = RT_POLICIES[AT_MOST_ONCE]
    standby: bool = False             # start warm, waiting for the job's lease
    labels_topic: str = "labels"      # the feedback the terminal features learn from
    features_topic: str = "features"  # the feature log: every decision's features, exactly once
    # the real-time path's serving, seed and terminal files, which its JVM reads by local path: the
    # checkpoint folder when that is local, else this local folder (parse_args: the run folder's)
    files: Path | None = None

    @property
    def local_files(self) -> Path:
        return self.files or Path(self.checkpoint)


def parse_args(argv: list[str], s: Settings) -> Options:
    p = argparse.ArgumentParser(prog="python -m pipelines.fraud", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("microbatch", "realtime"), default=s.fraud_mode,
                   help="micro-batch: the stateful path alone; realtime: the real-time path beside it (FRAUD_MODE)")
    p.add_argument("--starting-offsets", default="earliest",
                   help="where a fresh checkpoint starts reading: earliest, latest or Kafka's JSON offsets")
    p.add_argument("--available-now", action="store_true",
                   help="process what the topic holds now, then stop (micro-batch only)")
    p.add_argument("--trigger-seconds", type=float, default=s.trigger_seconds)
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--transactions-topic", default=s.topics.transactions)
    p.add_argument("--decisions-topic", default=s.topics.decisions)
    p.add_argument("--dlq-topic", default=s.topics.dead_letters)
    p.add_argument("--markers-topic", default=s.topics.markers,
                   help="where each batch's marker is committed with its decisions (exactly once)")
    p.add_argument("--realtime-topic", default=s.topics.decisions_rt)
    p.add_argument("--labels-topic", default=s.topics.labels,
                   help="labels joined in the job (a terminal's risk): feedback, each after its delay")
    p.add_argument("--features-topic", default=s.topics.features,
                   help="the feature log: each decision's features, score and verdict, exactly once")
    p.add_argument("--guarantee", choices=tuple(RT_POLICIES), default=s.fraud_rt_guarantee,
                   help="the real-time path's guarantee (real-time mode): "
                        + "; ".join(f"{g.name} {g.sentence}" for g in RT_POLICIES.values())
                        + ". The stateful path decides every transaction exactly once either way.")
    p.add_argument("--standby", action="store_true",
                   help="start as a warm standby: session up, waiting for the job's lease")
    p.add_argument("--checkpoint", type=lambda text: storage.like(s.checkpoint_root, text),
                   default=s.checkpoint_root / JOB,
                   help="this job's checkpoint folder (one sub-folder per query)")
    p.add_argument("--store", type=Path, default=s.store_path)
    p.add_argument("--threshold", type=float, default=s.fraud_threshold)
    p.add_argument("--realtime-batch-seconds", type=float, default=s.realtime_batch_seconds,
                   help="real-time mode: the real-time query's batch, its checkpoint interval (REALTIME_BATCH_SECONDS)")
    a = p.parse_args(argv)
    if a.trigger_seconds < 0:
        p.error("--trigger-seconds must be zero or more")
    if a.max_offsets_per_trigger is not None and a.max_offsets_per_trigger <= 0:
        p.error("--max-offsets-per-trigger must be a positive number")
    if not 0.0 < a.threshold <= 1.0:
        p.error(f"--threshold must be in (0, 1], not {a.threshold}")
    if a.mode not in ("microbatch", "realtime"):
        p.error(f"FRAUD_MODE must be microbatch or realtime, not {a.mode!r}")
    if a.guarantee not in RT_POLICIES:
        p.error(f"FRAUD_RT_GUARANTEE must be one of {', '.join(RT_POLICIES)}, not {a.guarantee!r}")
    if s.fraud_processor not in STATE_LAYOUTS:
        p.error(f"FRAUD_PROCESSOR must be one of {', '.join(STATE_LAYOUTS)}, not {s.fraud_processor!r}")
    if a.available_now and a.mode == "realtime":
        p.error("--available-now works in micro-batch mode only")
    return Options(a.mode, a.starting_offsets, a.available_now, a.trigger_seconds,
                   a.max_offsets_per_trigger, a.transactions_topic, a.decisions_topic, a.dlq_topic,
                   a.checkpoint, a.store.resolve(), a.threshold, a.realtime_batch_seconds,
                   a.markers_topic, a.realtime_topic, rt_policy(a.guarantee), a.standby, a.labels_topic,
                   a.features_topic, s.fraud_files if storage.is_remote(a.checkpoint) else None)


def read_transactions(spark, o: Options, s: Settings):
    """The transactions topic as Kafka rows, in bounded batches by default (MAX_OFFSETS_PER_TRIGGER:
    a backlog drains in batches of bounded memory)."""
    from pipelines.engine.sources import read_kafka

    return read_kafka(spark, o.transactions_topic, s, starting_offsets=o.starting_offsets,
                      max_offsets_per_trigger=o.max_offsets_per_trigger or s.max_offsets_per_trigger)


def build_scored(spark, o: Options, s: Settings, exclude: str | None = None, model=None):
    """Kafka -> valid transactions scored per card, as a streaming frame.

    `exclude`: a condition on the Kafka records' partition and offset (the poison records the
    poison-batch rule dead-lettered), applied right after the source, before anything stateful.
    """
    from pipelines.engine.sources import read_kafka

    source = read_transactions(spark, o, s)
    # the labels from the start of the topic (a terminal's risk needs the last 37 days of them),
    # unless the job starts at the latest offsets
    labels = read_kafka(spark, o.labels_topic, s, starting_offsets="latest" if o.starting_offsets == "latest" else "earliest",
                        max_offsets_per_trigger=o.max_offsets_per_trigger or s.max_offsets_per_trigger)
    return score(source.where(exclude) if exclude else source, s, o.threshold, labels, model,
                 card_history=o.mode == "realtime")


def build_malformed(spark, o: Options, s: Settings):
    """Kafka -> the transactions that break the contract (`dlq_reason`), as a streaming frame: the
    dead-letter query's plan, the parse alone (not the scoring `build_scored` plans beside it)."""
    from pipelines.engine.sources import parse_transactions

    return malformed(parse_transactions(read_transactions(spark, o, s)))


def score(source, s: Settings, threshold: float, labels=None, model=None, card_history: bool = False):
    """Rows shaped as Kafka's (key, value, topic, partition, offset, timestamp, timestampType) ->
    the valid transactions scored per card with the event-time features (pipelines/fraud/features.py;
    `labels`: Kafka rows of the labels topic, the terminals' feedback) and the aggregator's score
    and verdict — by the rules, or by `model`, a learned version (pipelines/fraud/models.py); the
    malformed ones are `build_malformed`'s. `card_history`: each card's last row of a batch carries
    its event-time state (features.CARD_HISTORY; the real-time path's seed).

    The verdict is part of the streaming plan, planned once with it: built in the sink instead,
    its Python expression building and a second query plan cost every batch 60-80 ms."""
    from pyspark.sql import functions as F

    from pipelines.engine.sources import parse_transactions

    parsed = parse_transactions(source)
    valid = (parsed.where(F.col("dlq_reason").isNull())
             .withColumn("event_ts", F.timestamp_millis("event_time"))
             .withWatermark("event_ts", f"{s.watermark_seconds} seconds")
             .select("txn_id", "card_id", "merchant_id", "amount_cents", "lat", "lon", "event_time",
                     "produced_at", "offset"))
    history = with_history(per_card(valid, s), labels_frame(labels) if labels is not None else None,
                           SCORED_DDL, s.state_ttl_minutes * 60_000, s.label_delay_days, card_history)
    return with_payloads(verdict(history, threshold, model))


def malformed(parsed):
    """`parse_transactions` rows -> those with a `dlq_reason` (the dead letters)."""
    from pyspark.sql import functions as F

    return parsed.where(F.col("dlq_reason").isNotNull())


def verdict(scored, threshold: float, model=None):
    """The aggregator's `score`, `is_fraud` and `model_version` beside the analyzers' scores, in the
    JVM: the rules (model 0: Spark SQL) or a learned version (models.scored_columns)."""
    from pyspark.sql import functions as F

    from pipelines.fraud.aggregator import aggregate_columns

    if model is not None and model.pipeline is not None:
        return models.scored_columns(scored, model)
    total, is_fraud = aggregate_columns(threshold)
    return scored.select("*", total.alias("score"), is_fraud.alias("is_fraud"), F.lit(models.RULES).alias("model_version"),
                         models.rules_explanation().alias("explanation"))


def per_card(valid, s: Settings):
    """Valid transactions (with their watermark) -> SCORED_FIELDS, scored card by card in event
    order with the card's profile kept in Spark's state: in the JVM (`CardScoring.java`, the
    default) or in a pandas processor (FRAUD_PROCESSOR=python; slower, see the README)."""
    from pyspark.sql import functions as F

    ttl_ms = s.state_ttl_minutes * 60_000
    if s.fraud_processor == "jvm":
        from pyspark.sql import DataFrame

        jvm = valid.sparkSession._jvm
        scored = DataFrame(jvm.cardstream.fraud.CardScoring.score(valid._jdf, SCORED_DDL, limits_text(DEFAULT_LIMITS),
                                                                  ttl_ms), valid.sparkSession)
    else:
        scored = (valid.withColumn("bucket", F.pmod(F.xxhash64("card_id"), F.lit(s.fraud_state_buckets)))
                  .groupBy("bucket")
                  .transformWithStateInPandas(make_processor(ttl_ms), outputStructType=SCORED_DDL,
                                              outputMode="Append", timeMode="ProcessingTime"))
    return scored


REHEARSAL_BATCHES = 3


def rehearsal_rows(now_ms: int, n: int, batches: int = REHEARSAL_BATCHES) -> tuple[list[list[tuple]], list[list[tuple]]]:
    """`n` scratch transactions in `batches` batches (Kafka rows, event times in order up to
    `now_ms`, a card paying every few, a terminal every few more) and a label for every tenth (in
    one batch fewer: the last has none): the decisions plan's two sources as the job reads them."""
    from pipelines.engine.rehearsal import kafka_rows

    n = max(n, batches)
    cards, merchants = max(2, n // 4), max(1, n // 16)
    txns = [{"txn_id": f"rehearsal-{i}", "card_id": f"card-rehearsal-{i % cards}",
             "merchant_id": f"m-rehearsal-{i % merchants}", "amount_cents": 1_000 + i % 977, "currency": "EUR",
             "lat": 48.85 + (i % 7) / 100, "lon": 2.35, "event_time": now_ms - (n - i) * 1000, "produced_at": now_ms}
            for i in range(n)]
    labels = [{"txn_id": t["txn_id"], "merchant_id": t["merchant_id"], "event_time": t["event_time"],
               "is_fraud": i % 20 == 0} for i, t in enumerate(txns) if i % 10 == 0]
    rows = kafka_rows([(t["card_id"].encode(), json.dumps(t).encode()) for t in txns], now_ms)
    label_rows = kafka_rows([(t["txn_id"].encode(), json.dumps(t).encode()) for t in labels], now_ms)
    return split(rows, batches), split(label_rows, max(1, batches - 1))


def split(rows: list, parts: int) -> list[list]:
    """`rows` (not empty) in at most `parts` consecutive runs of (nearly) equal length, none empty:
    fewer rows than parts give one run a row."""
    size = -(-len(rows) // parts)
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def rehearse(spark, s: Settings, timeout_s: float = 180.0, cancel=lambda: False, model=None) -> bool:
    """A standby's dress rehearsal of its first batch (pipelines/engine/rehearsal.py): the
    decisions plan (parse, the stateful operators — the JVM processors, or the pandas one with its
    Python workers and state server — and their RocksDB stores, the labels' union, the aggregator
    (`model`, the version the standby loaded, or the rules),
    the foreachBatch callback's Arrow collection) over STANDBY_REHEARSAL_ROWS scratch transactions
    and their labels in REHEARSAL_BATCHES batches; nothing reaches Kafka or the store. Several
    batches of the same plan: the state loaded and committed again, the JIT's compilers given the
    per-row code while the standby waits rather than during the takeover's batch."""
    from pipelines.engine.rehearsal import run_to_end, scratch_streams

    txns, labels = rehearsal_rows(int(time.time() * 1000), s.standby_rehearsal_rows)
    with scratch_streams(spark, s, JOB, source=txns, labels=labels) as (frames, tmp):
        scored = score(frames["source"], s, s.fraud_threshold, frames["labels"], model)
        query = (scored.writeStream.queryName(f"{JOB}-rehearsal")
                 .option("checkpointLocation", f"{tmp}/checkpoint")
                 .foreachBatch(lambda df, _batch: scored_table(df))
                 .trigger(availableNow=True).start())
        done = run_to_end([query], timeout_s, cancel)
        read = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        log.info("the standby's rehearsal: %d batches, %d records read", len(read), sum(read))
        return done


def starters(spark, o: Options, s: Settings, sinks: Sinks, poison=None, quarantine=None,
             model=lambda: None) -> dict:
    """{query name: start(restart)} for the decisions query and the dead-letter query. With the
    poison-batch rule (`poison`, `quarantine`), each handler's own exception is recorded and the
    decisions query starts without the records it dead-lettered. `model()`: the aggregator the
    decisions query is planned with when it (re)starts (a use-model command changes it)."""
    guard = poison.recorder.guard if poison else (lambda name, handler: handler)

    def trigger(writer, seconds):
        if o.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=f"{int(seconds * 1000)} milliseconds")

    def decisions(restart=False):
        excluded = quarantine.excluded() if quarantine else None
        if excluded:
            log.info("decisions query starts without the poison records: %s", excluded[:200])
        scored = build_scored(spark, o, s, excluded, model())
        return trigger(scored.writeStream.queryName(JOB)
                       .option("checkpointLocation", str(o.checkpoint / "decisions"))
                       .foreachBatch(guard(JOB, sinks.decisions)), o.trigger_seconds).start()

    def dead_letters(restart=False):
        bad = build_malformed(spark, o, s)
        return trigger(bad.writeStream.queryName(f"{JOB}-dlq")
                       .option("checkpointLocation", str(o.checkpoint / "dlq"))
                       .foreachBatch(guard(f"{JOB}-dlq", sinks.dead_letters)),
                       max(o.trigger_seconds, s.dlq_trigger_seconds)).start()

    return {JOB: decisions, f"{JOB}-dlq": dead_letters}


class ModelSwitch:
    """The score aggregator the job serves, and its switch between two batches (use-model): the
    new version is loaded first (a model that cannot be loaded leaves the current one serving and
    fails the command in one sentence), the decisions query is stopped while idle and started again
    from its checkpoint with the new plan, and `model_use` says so in a fenced write."""

    def __init__(self, db, epoch: int, model: models.Loaded):
        self.db, self.epoch, self.model = db, epoch, model
        if model.why:
            log.warning("%s", model.why)
        self.record()

    def record(self, chosen: bool = False) -> None:
        """`model_use` says what the job serves from now; `chosen` (a use-model switch): also that
        its next start serves this version again (models.serving). A start leaves that as it is."""
        keep = ", chosen = excluded.chosen" if chosen else ""
        with fencing.fenced_write(self.db, JOB, self.epoch, f"model {self.model.version} in use") as conn:
            conn.execute("INSERT INTO model_use (job, version, why, since, epoch, chosen) VALUES (?, ?, ?, ?, ?, ?) "
                         "ON CONFLICT(job) DO UPDATE SET version = excluded.version, why = excluded.why, "
                         "since = excluded.since, epoch = excluded.epoch" + keep,
                         (JOB, self.model.version, self.model.why, int(time.time() * 1000), self.epoch,
                          self.model.version if chosen else None))
        log.info("deciding with model %s%s", self.model.version,
                 " (the rules)" if self.model.version == models.RULES else "")
        realtime.follow_switch(self.db, JOB, self.model.version)  # the real-time path, when it runs

    def switch_if_asked(self, runner, faults) -> None:
        from controlplane import commands

        asked = faults.take_model_switch()
        if asked is None:
            return
        command_id, version = asked
        loaded = models.Loaded(models.RULES) if version == models.RULES else models.load(self.db, version)
        if loaded.version != version:
            commands.finish(self.db, command_id, f"stayed on model {self.model.version}: {loaded.why}", ok=False)
            return
        previous, self.model = self.model, loaded
        runner.restart_between_batches(JOB, between_batches_s=5.0)
        self.record(chosen=True)
        commands.finish(self.db, command_id, f"switched from model {previous.version} to model {version} "
                                             f"between two batches")


def send_poison(s: Settings, topic: str, txn_id: str) -> None:
    """The poison-pill fault's transaction: valid by the contract, keyed like any other."""
    now = int(time.time() * 1000)
    txn = {"txn_id": txn_id, "card_id": f"card-{txn_id}", "merchant_id": "m-poison-pill", "amount_cents": 1_999,
           "currency": "EUR", "lat": 48.8566, "lon": 2.3522, "event_time": now, "produced_at": now}
    producer = kafka_client.producer(s, acks="all")
    try:
        producer.send(topic, key=txn["card_id"].encode(), value=json.dumps(txn).encode()).get(timeout=30)
    finally:
        producer.close(timeout=5)


def check_bound(db, o: Options) -> None:
    """Exit 2 with one sentence when the store holds decisions of another checkpoint."""
    for sink, folder in ((JOB, "decisions"), (f"{JOB}-dlq", "dlq")):
        try:
            ledger.check_bound(db, sink, checkpoints.query_id(o.checkpoint / folder),
                               "run `make clean` to clear the store and the checkpoints together")
        except ledger.ForeignCheckpoint as exc:
            log.error("%s", exc)
            sys.exit(EXIT_REFUSED)


def check_layout(folder: Place, buckets: int, processor: str = "jvm") -> str | None:
    """Refuse a checkpoint whose state another layout wrote: the other processor's state
    (FRAUD_PROCESSOR: a value per card, or the pandas processor's map entry per card under a
    bucket key; Spark would fail the query on its state schema at every restart), another
    card-bucket count for the pandas one (every card would be looked up in the wrong bucket and
    start afresh), or the older state of one JSON value per bucket. Returns the refusal's sentence,
    or None after recording the layout beside the checkpoint (`decisions-layout.json`)."""
    layout = STATE_LAYOUTS[processor]
    record = folder.parent / f"{folder.name}-layout.json"
    if storage.entries(folder / "offsets"):
        recorded = json.loads(storage.read_text(record) or "{}")
        if recorded.get("state") not in STATE_LAYOUTS.values():
            return (f"the fraud checkpoint {folder} holds state of an older layout "
                    f"({recorded.get('state') or 'one JSON value per card bucket'}), which this version cannot "
                    f"read: run `make clean` to start the state afresh")
        if recorded["state"] != layout:
            other = next(k for k, v in STATE_LAYOUTS.items() if v == recorded["state"])
            return (f"the fraud checkpoint {folder} holds the state of FRAUD_PROCESSOR={other}, not {processor}: "
                    f"set FRAUD_PROCESSOR={other}, or run `make clean` to start the state afresh")
        if processor == "python" and recorded.get("fraud_state_buckets") != buckets:
            return (f"the fraud checkpoint {folder} keeps its cards in FRAUD_STATE_BUCKETS="
                    f"{recorded.get('fraud_state_buckets')} buckets, not {buckets}: set FRAUD_STATE_BUCKETS="
                    f"{recorded.get('fraud_state_buckets')}, or run `make clean` to start the state afresh")
        return None
    storage.make_dirs(folder.parent)
    # never half a file, even on a crash
    storage.write_text(record, json.dumps({"fraud_state_buckets": buckets, "state": layout}))
    return None


def realtime_conf(s: Settings, o: Options) -> dict:
    """The session's settings for real-time mode. Its query holds one task slot per Kafka partition
    for a whole batch, beside the stateful path's tasks, so a local master gets more slots than
    cores (the real-time tasks mostly wait on Kafka), and an application on a standalone master as
    many one-core executors (the workers need that many free cores); and the stateful path's Python
    workers yield the CPU to the real-time tasks (pipelines/engine/niced_daemon.py). On a cluster
    the executors read the profiles' seed file (under CHECKPOINT_ROOT) by its path: a local folder
    on the loopback cluster, a shared file system on a real one."""
    from infra.kafka_client import end_offsets

    conf = {}
    partitions = len(end_offsets(o.transactions_topic, s)) or s.topics.partitions
    if s.spark_master.startswith("local"):
        conf["spark.master"] = f"local[{2 * partitions + 2}]"
    else:
        conf["spark.cores.max"] = str(2 * partitions + 2)
    if s.realtime_worker_nice:
        conf["spark.python.daemon.module"] = "pipelines.engine.niced_daemon"
    return conf


def refuse_other_layout(o: Options, s: Settings) -> None:
    """Exit 2 with check_layout's sentence when the checkpoint's state has another layout."""
    refusal = check_layout(o.checkpoint / "decisions", s.fraud_state_buckets, s.fraud_processor)
    if refusal:
        log.error("%s", refusal)
        sys.exit(EXIT_REFUSED)


def ensure_job_topics(o: Options, s: Settings) -> bool:
    """Create the job's topics; False (logged) when Kafka cannot be reached."""
    try:
        ensure_topics([o.transactions_topic, o.decisions_topic, o.dlq_topic, o.markers_topic,
                       o.realtime_topic, o.labels_topic, o.features_topic], s=s)
    except Exception as exc:  # kafka-python's NoBrokersAvailable and friends
        log.error("cannot reach Kafka at %s: %s", s.kafka_bootstrap, exc)
        return False
    return True


def open_session(o: Options, s: Settings):
    """The job's Spark session, with real-time mode's slots when the real-time path runs beside."""
    spark = get_spark("cardstream-fraud", s, **(realtime_conf(s, o) if o.mode == "realtime" else {}))
    # No empty batches: the TTL'd state would otherwise ask for one every trigger (and an
    # availableNow run would never end); an expired card reads as absent at once, and Spark
    # removes expired entries in the next batch with data.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    return spark


def stop_on_signal() -> threading.Event:
    """An event SIGTERM and SIGINT set: the job stops its queries cleanly when it is set."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def wait_as_standby(spark, db, o: Options, s: Settings, stop: threading.Event, held: models.Held) -> bool:
    """A warm standby: session warmed (and rehearsed with `held`'s model, the version it loaded to
    serve), then wait for the job's lease, loading and rehearsing again when the version to serve
    changes meanwhile. False when asked to stop first; on takeover, the checks the active may have
    made stale run again."""
    record_ui(db, f"{JOB}-standby", spark)
    warm_up(spark, s, o.transactions_topic)

    def rehearse_with_held():
        if not s.standby_rehearsal:
            return
        try:
            rehearse(spark, s, cancel=lambda: stop.is_set() or takeover_due(db, JOB, s.lease_ttl_seconds),
                     model=held.model)
        except Exception as exc:  # noqa: BLE001 - a warm-up: a standby without it still takes over
            log.warning("the standby's rehearsal failed (%s); waiting without it", exc)

    rehearse_with_held()
    if not wait_for_takeover(db, JOB, s.lease_ttl_seconds, stop,
                             tick=lambda: held.refresh() and rehearse_with_held()):
        return False
    check_bound(db, o)  # the active may have created the checkpoints meanwhile
    refuse_other_layout(o, s)
    return True


def record_progress(spark, o: Options) -> None:
    """The progress listener that records each of the job's batches in the store."""
    from pipelines.engine import metrics  # pyspark: loaded once the session is

    metrics.install(spark, o.store_path, {JOB: str(o.checkpoint / "decisions"),
                                          f"{JOB}-dlq": str(o.checkpoint / "dlq"),
                                          f"{JOB}-rt": str(o.checkpoint / "realtime")})


def take_over(spark, db, o: Options) -> tuple[int, Heartbeat]:
    """Become the job: the lease taken (its epoch fences every write), the heartbeat that keeps it."""
    epoch = fencing.take_lease(db, JOB)
    record_ui(db, JOB, spark)
    heartbeat = Heartbeat(o.store_path, JOB, epoch)
    heartbeat.start()
    return epoch, heartbeat


def companion_options(o: Options, s: Settings) -> Options:
    """The stateful path's options: in real-time mode it batches less often (the real-time query
    needs the CPU; COMPANION_TRIGGER_SECONDS, since each batch costs planning, commits and a pair
    of young collections whatever its size); the batch keeps the usual bound
    (MAX_OFFSETS_PER_TRIGGER), so the authoritative decisions keep up with the input."""
    if o.mode != "realtime":
        return o
    return replace(o, trigger_seconds=max(o.trigger_seconds, s.companion_trigger_seconds))


def realtime_starter(spark, db, o: Options, s: Settings, epoch: int):
    """start(restart) for the real-time query; each start is recorded in `fraud_rt_runs`."""
    def start_realtime(restart=False):
        started_at = int(time.time() * 1000)  # before the query: its first decision comes after
        query, plan, resumed = realtime.start(spark, o, s, started_at, JOB, epoch=epoch,
                                              current=fencing.is_current(db, JOB, epoch))
        log.info("real-time path (%s) reads from %s, folds from %s%s", o.guarantee, plan.starts, plan.folds,
                 f"; its profiles miss what came before the fold on partitions {sorted(plan.holes)}"
                 if plan.holes else "")
        # the Fraud page says what this start did: it reads the guarantee from here
        db["fraud_rt_runs"].insert({"started_at": started_at, "guarantee": o.guarantee.name,
                                    "resumed": int(resumed), "epoch": epoch, "pid": os.getpid()})
        return query

    return realtime.QUERY, start_realtime


def build_runner(spark, db, o: Options, s: Settings, epoch: int, sinks: Sinks, faults: Faults,
                 stop: threading.Event, ready: models.Loaded | None = None) -> QueryRunner:
    """The runner of the job's queries: decisions (with the poison-batch rule and the model
    switch), dead letters, and the real-time path in real-time mode. `ready`: the model a standby
    loaded while it waited (models.serving serves it when it is still the one to serve)."""
    poison = Poison(Streaks(s.poison_batch_failures),
                    {JOB: o.checkpoint / "decisions", f"{JOB}-dlq": o.checkpoint / "dlq"})
    quarantine = Quarantine(spark, o, s, sinks, faults, epoch)
    poison.quarantine[JOB] = quarantine
    faults.send_poison = lambda txn_id: send_poison(s, o.transactions_topic, txn_id)
    serving = ModelSwitch(db, epoch, models.serving(db, JOB, ready))
    start = starters(spark, o, s, sinks, poison, quarantine, lambda: serving.model)
    if o.mode == "realtime":
        name, start_realtime = realtime_starter(spark, db, o, s, epoch)
        start[name] = start_realtime
    # the dead-letter query never gives up: a dead-letter send that keeps failing must not stop
    # decisions (each failure is retried, counted in query_failures and shown on the Faults page)
    return QueryRunner(JOB, db, epoch, start, stop,
                       finished=lambda qs: o.available_now and all(
                           not q.isActive and q.exception() is None for q in qs),
                       poison=poison, retry_forever=(f"{JOB}-dlq",),
                       deferred=() if o.available_now else (f"{JOB}-dlq",),
                       tick=lambda r: serving.switch_if_asked(r, faults))


def run_until_stopped(runner: QueryRunner, stop: threading.Event, faults: Faults, heartbeat: Heartbeat,
                      sinks: Sinks) -> int:
    """Watch the queries until they finish, fail for good or the job is stopped; then stop
    everything in order (the lease kept when another epoch superseded this one)."""
    code = 1
    try:
        code = runner.watch()
    finally:
        stop.set()
        faults.stop()
        runner.stop()
        heartbeat.stop(release=code != EXIT_SUPERSEDED)
        sinks.close()
        from pipelines.engine.metrics import wait_for_listener  # pyspark: loaded by now
        wait_for_listener(list(runner.queries.values()), sinks.db)
        log.info("stopped; decided %s (%s fraud, %s late) in this run.", sinks.decided, sinks.fraud, sinks.late)
    return code


def main(argv: list[str] | None = None) -> int:
    logs.setup()
    s = load()
    o = parse_args(sys.argv[1:] if argv is None else argv, s)
    if o.standby:
        listen(s.standby_nice)
    if not ensure_job_topics(o, s):
        return 2
    db = connect(o.store_path)
    check_bound(db, o)
    refuse_other_layout(o, s)
    spark = open_session(o, s)
    storage.make_dirs(o.checkpoint)
    stop = stop_on_signal()
    # a standby loads the model it would serve while it waits (a takeover then plans with it at once)
    held = models.Held(db, JOB) if o.standby else None
    if held is not None and not wait_as_standby(spark, db, o, s, stop, held):
        spark.stop()
        return 0
    record_progress(spark, o)  # after the standby's rehearsal: its batch is no batch of the job's
    took_over = time.monotonic()
    epoch, heartbeat = take_over(spark, db, o)
    faults = Faults(o.store_path, [JOB], job=JOB)
    sinks = Sinks(o, s, epoch, faults)
    sinks.prepare()
    o = companion_options(o, s)
    runner = build_runner(spark, db, o, s, epoch, sinks, faults, stop, held.model if held else None)
    runner.start()
    faults.start()
    log.info("queries started %.1f s after taking the lease", time.monotonic() - took_over)
    log.info("%s mode, epoch %s, reading %s -> %s + %s, checkpoint %s%s", o.mode, epoch, o.transactions_topic,
             o.decisions_topic, o.store_path, o.checkpoint,
             f"; real-time path {o.guarantee} -> {o.realtime_topic}" if o.mode == "realtime" else "")
    return run_until_stopped(runner, stop, faults, heartbeat, sinks)
