"""The fraud detection job: one decision per transaction, to the store and to Kafka.

    python -m pipelines.fraud [--mode microbatch|realtime] [--starting-offsets earliest|latest]
                              [--available-now] [--trigger-seconds S] [--checkpoint DIR] ...

Micro-batch (default): transactions -> parse (JVM) -> malformed ones to the dead-letter topic ->
valid ones keyed by card bucket through `transformWithStateInPandas` (the three analyzers of
`pipelines.analyzers` over each card's transactions in event order; the profiles of a bucket's
cards in one value of Spark's RocksDB state, with a TTL per card, checkpointed) ->
the aggregator as SQL expressions -> the store's `decisions` table (idempotent: first decision per
txn_id stands, fenced) and the Kafka `decisions` topic (at least once; readers deduplicate).

Real-time (`--mode realtime`): Spark 4.2's real-time trigger only runs stateless, JVM-only plans
(no Python operator, no shuffle, no state store), so `pipelines.realtime` scores each transaction
in SQL against a snapshot of the card profiles that this stateful path keeps in the store, and
writes the decision straight to Kafka; the stateful path keeps deciding into the store.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from infra.config import Settings, load
from infra.contracts import ANALYZERS, DECISION_FIELDS

JOB = "fraud"
EXIT_FENCED = 3
REALTIME_STATEFUL_TRIGGER_S = 5.0
REALTIME_STATEFUL_MAX_OFFSETS = 500

# What the stateful operator emits per transaction, before the aggregator and decided_at.
SCORED_FIELDS = {
    "txn_id": "string", "card_id": "string", "merchant_id": "string", "amount_cents": "long",
    "event_time": "long", "produced_at": "long",
    **{f"score_{name}": "double" for name in ANALYZERS},
    "is_late": "boolean",
    # the card's profile right after this transaction (for the real-time path's snapshot)
    "p_count": "long", "p_mean": "double", "p_lat": "double", "p_lon": "double",
    "p_time": "long", "p_times": "string",
}
SCORED_DDL = ", ".join(f"{name} {kind}" for name, kind in SCORED_FIELDS.items())
TXN_COLUMNS = ("txn_id", "card_id", "merchant_id", "amount_cents", "lat", "lon", "event_time",
               "produced_at")
PROFILE_DDL = ("count long, mean double, lat double, lon double, place_time long, times string, "
               "last_seen long")
BUCKET_DDL = "profiles string"  # JSON {card_id: profile row (PROFILE_DDL)} of one bucket's cards


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- profile <-> state row (pure)

def profile_to_row(p) -> tuple:
    """CardProfile -> the ValueState tuple (PROFILE_DDL); None fields stay None."""
    return (p.ticket.count if p.ticket else None, p.ticket.mean if p.ticket else None,
            p.place.lat if p.place else None, p.place.lon if p.place else None,
            p.place.event_time if p.place else None,
            ",".join(map(str, p.recent.times)) if p.recent else "", p.last_seen)


def profile_from_row(row) -> "CardProfile":
    from pipelines.analyzers import CardProfile, ProximityState, TicketState, VelocityState

    count, mean, lat, lon, place_time, times, last_seen = row
    return CardProfile(
        ticket=TicketState(int(count), float(mean)) if count is not None else None,
        place=ProximityState(float(lat), float(lon), int(place_time)) if place_time is not None else None,
        recent=VelocityState(tuple(int(x) for x in times.split(",") if x)) if times else None,
        last_seen=int(last_seen or 0))


# ---------------------------------------------------------------- the stateful processor

def score_bucket(stored: str | None, batch, watermark: int, now: int, ttl_ms: int, limits) -> tuple[dict, str]:
    """Score one bucket's new transactions, card by card in event order (pure).

    `stored` is the bucket's state (JSON of profile rows by card), `batch` a pandas frame of
    TXN_COLUMNS + offset. Returns the output columns (SCORED_FIELDS) and the new state, in which
    cards not seen for `ttl_ms` are dropped.

    Why buckets, not one state value per card: Spark calls the Python processor and its state
    server once per key and batch, which costs about a millisecond per key on two cores; with
    cards paying about once a minute nearly every row is its own key. A bucket of cards costs one
    call and one state read and write per batch, whatever the number of its cards.
    """
    from pipelines.analyzers import score_transaction

    rows_by_card: dict = json.loads(stored) if stored else {}
    batch = batch.sort_values(["card_id", "event_time", "offset"], kind="stable")
    out = {name: [] for name in SCORED_FIELDS}
    columns = [batch[c].tolist() for c in TXN_COLUMNS]
    card, profile = None, None
    for values in zip(*columns):
        txn = dict(zip(TXN_COLUMNS, values))
        if txn["card_id"] != card:
            if card is not None:
                rows_by_card[card] = profile_to_row(replace(profile, last_seen=now))
            card = txn["card_id"]
            row = rows_by_card.get(card)
            profile = profile_from_row(row) if row is not None else None
        scores, profile = score_transaction(profile, txn, limits)
        p = profile_to_row(profile)
        for name, value in (("txn_id", txn["txn_id"]), ("card_id", card), ("merchant_id", txn["merchant_id"]),
                            ("amount_cents", int(txn["amount_cents"])), ("event_time", int(txn["event_time"])),
                            ("produced_at", int(txn["produced_at"])),
                            *((f"score_{a}", float(scores[a])) for a in ANALYZERS),
                            ("is_late", bool(watermark > 0 and txn["event_time"] < watermark)),
                            ("p_count", p[0]), ("p_mean", p[1]), ("p_lat", p[2]), ("p_lon", p[3]),
                            ("p_time", p[4]), ("p_times", p[5])):
            out[name].append(value)
    if card is not None:
        rows_by_card[card] = profile_to_row(replace(profile, last_seen=now))
    expired = now - ttl_ms
    kept = {c: r for c, r in rows_by_card.items() if (r[6] or 0) >= expired}
    return out, json.dumps(kept, separators=(",", ":"))


def make_processor(ttl_ms: int, limits=None):
    """The StatefulProcessor class instance (built lazily: pyspark is imported only in the job)."""
    from pyspark.sql.streaming import StatefulProcessor

    from pipelines.analyzers import DEFAULT_LIMITS

    class BucketScorer(StatefulProcessor):
        """Keyed by card bucket: runs the analyzers over each card's new transactions in event order."""

        def __init__(self, ttl_ms: int, limits):
            self.ttl_ms, self.limits = ttl_ms, limits

        def init(self, handle) -> None:
            self.profiles = handle.getValueState("profiles", BUCKET_DDL, self.ttl_ms)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            frames = list(rows)
            batch = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            stored = self.profiles.get()
            out, state = score_bucket(stored[0] if stored is not None else None, batch,
                                      timerValues.getCurrentWatermarkInMs(), now_ms(), self.ttl_ms, self.limits)
            self.profiles.update((state,))
            yield pd.DataFrame(out)

        def close(self) -> None:
            pass

    return BucketScorer(ttl_ms, limits or DEFAULT_LIMITS)


# ---------------------------------------------------------------- options

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
    checkpoint: Path
    store_path: Path
    threshold: float
    profile_refresh_seconds: float = 300.0


def parse_args(argv: list[str], s: Settings) -> Options:
    p = argparse.ArgumentParser(prog="python -m pipelines.fraud", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("microbatch", "realtime"), default="microbatch")
    p.add_argument("--starting-offsets", default="earliest",
                   help="where a fresh checkpoint starts reading: earliest, latest or Kafka's JSON offsets")
    p.add_argument("--available-now", action="store_true",
                   help="process what the topic holds now, then stop (micro-batch only)")
    p.add_argument("--trigger-seconds", type=float, default=s.trigger_seconds)
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--transactions-topic", default=s.topics.transactions)
    p.add_argument("--decisions-topic", default=s.topics.decisions)
    p.add_argument("--dlq-topic", default=s.topics.dead_letters)
    p.add_argument("--checkpoint", type=Path, default=s.checkpoint_root / JOB,
                   help="this job's checkpoint folder (one sub-folder per query)")
    p.add_argument("--store", type=Path, default=s.store_path)
    p.add_argument("--threshold", type=float, default=s.fraud_threshold)
    p.add_argument("--profile-refresh-seconds", type=float, default=300.0,
                   help="real-time mode: how often the scoring query takes a fresh profile snapshot (0: never)")
    a = p.parse_args(argv)
    if a.trigger_seconds < 0:
        p.error("--trigger-seconds must be zero or more")
    if a.max_offsets_per_trigger is not None and a.max_offsets_per_trigger <= 0:
        p.error("--max-offsets-per-trigger must be a positive number")
    if not 0.0 < a.threshold <= 1.0:
        p.error(f"--threshold must be in (0, 1], not {a.threshold}")
    if a.available_now and a.mode == "realtime":
        p.error("--available-now works in micro-batch mode only")
    return Options(a.mode, a.starting_offsets, a.available_now, a.trigger_seconds,
                   a.max_offsets_per_trigger, a.transactions_topic, a.decisions_topic, a.dlq_topic,
                   a.checkpoint.resolve(), a.store.resolve(), a.threshold, a.profile_refresh_seconds)


# ---------------------------------------------------------------- sinks (driver side)

DECISION_COLUMNS = list(DECISION_FIELDS) + ["batch_id"]
_INSERT = (f"INSERT INTO decisions ({', '.join(DECISION_COLUMNS)}) VALUES "
           f"({', '.join('?' for _ in DECISION_COLUMNS)}) ON CONFLICT(txn_id) DO NOTHING")


def decision_records(rows: list[dict], decided_at: int, batch_id: int) -> list[dict]:
    """Scored rows (with score/is_fraud) -> Decision dicts as the contract says (pure)."""
    out = []
    for r in rows:
        d = {name: r.get(name) for name in DECISION_FIELDS}
        d["decided_at"] = decided_at
        d["is_fraud"], d["is_late"] = bool(d["is_fraud"]), bool(d["is_late"])
        d["batch_id"] = batch_id
        out.append(d)
    return out


class Fenced(Exception):
    pass


class Sinks:
    """The store (fenced, idempotent) and Kafka (at least once) writers of the job's driver."""

    def __init__(self, o: Options, s: Settings, epoch: int, realtime: bool = False):
        from kafka import KafkaProducer

        from pipelines import store

        # in real-time mode the Kafka decisions come from the real-time query; this path keeps the
        # profiles it reads up to date and still decides into the store
        self.o, self.epoch, self.write_profiles, self.to_kafka = o, epoch, realtime, not realtime
        self.db = store.connect(o.store_path)
        self.producer = KafkaProducer(bootstrap_servers=s.kafka_bootstrap, acks="all", linger_ms=0,
                                      retries=10, max_in_flight_requests_per_connection=1)
        self.decided = self.late = self.fraud = 0

    def _fenced_transaction(self, what: str):
        from pipelines import fencing, store

        class _Tx:
            def __enter__(tx):
                tx.cm = store.transaction(self.db)
                conn = tx.cm.__enter__()
                try:
                    fencing.check(conn, JOB, self.epoch, what)
                except BaseException:
                    tx.cm.__exit__(*sys.exc_info())
                    raise
                return conn

            def __exit__(tx, *exc):
                return tx.cm.__exit__(*exc)

        return _Tx()

    def fenced(self, exc: Exception, what: str) -> None:
        from pipelines import fencing

        fencing.record_rejection(self.db, JOB, self.epoch, what)
        print(f"fraud: fenced: {exc}; a newer instance owns the job, exiting.", flush=True)
        self.producer.close(timeout=1)
        os._exit(EXIT_FENCED)

    def decisions(self, batch_df, batch_id: int) -> None:
        from pipelines.aggregator import aggregate_columns

        score, is_fraud = aggregate_columns(self.o.threshold)
        table = batch_df.select("*", score.alias("score"), is_fraud.alias("is_fraud")).toArrow()
        if table.num_rows == 0:
            return
        rows = table.to_pylist()
        decided_at = now_ms()  # as late as possible: everything above was the deciding
        records = decision_records(rows, decided_at, batch_id)
        self._store(records, batch_id, rows)
        for d in (records if self.to_kafka else ()):
            payload = {k: d[k] for k in DECISION_FIELDS}
            self.producer.send(self.o.decisions_topic, key=d["txn_id"].encode(),
                               value=json.dumps(payload).encode())
        self.producer.flush()
        self.decided += len(records)
        self.late += sum(d["is_late"] for d in records)
        self.fraud += sum(d["is_fraud"] for d in records)

    def _store(self, records: list[dict], batch_id: int, rows: list[dict]) -> None:
        from pipelines.fencing import FencedError

        what = f"decisions batch {batch_id}"
        try:
            with self._fenced_transaction(what) as conn:
                conn.executemany(_INSERT, [tuple(d[c] for c in DECISION_COLUMNS) for d in records])
                if self.write_profiles:
                    write_profiles(conn, rows)
        except FencedError as exc:
            self.fenced(exc, what)

    def dead_letters(self, batch_df, batch_id: int) -> None:
        from pipelines.fencing import FencedError

        rows = batch_df.select("raw", "dlq_reason", "partition", "offset").toArrow().to_pylist()
        if not rows:
            return
        for r in rows:
            payload = {"reason": r["dlq_reason"], "raw": r["raw"], "partition": r["partition"],
                       "offset": r["offset"], "topic": self.o.transactions_topic, "ts": now_ms()}
            self.producer.send(self.o.dlq_topic, value=json.dumps(payload).encode())
        self.producer.flush()
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["dlq_reason"]] = counts.get(r["dlq_reason"], 0) + 1
        what = f"dead letters batch {batch_id}"
        try:
            with self._fenced_transaction(what) as conn:
                conn.executemany(
                    "INSERT INTO dead_letters (reason, count, updated_at) VALUES (?, ?, ?) "
                    "ON CONFLICT(reason) DO UPDATE SET count = count + excluded.count, "
                    "updated_at = excluded.updated_at",
                    [(reason, n, now_ms()) for reason, n in counts.items()])
        except FencedError as exc:
            self.fenced(exc, what)


def write_profiles(conn, rows: list[dict]) -> None:
    """The latest profile per card of this batch -> `card_profiles` (the real-time path reads it)."""
    latest: dict[str, dict] = {}
    for r in rows:
        latest[r["card_id"]] = r
    conn.executemany(
        "INSERT INTO card_profiles (card_id, count, mean, lat, lon, place_time, times, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(card_id) DO UPDATE SET count = excluded.count, "
        "mean = excluded.mean, lat = excluded.lat, lon = excluded.lon, place_time = excluded.place_time, "
        "times = excluded.times, updated_at = excluded.updated_at",
        [(c, r["p_count"], r["p_mean"], r["p_lat"], r["p_lon"], r["p_time"], r["p_times"], now_ms())
         for c, r in latest.items()])


# ---------------------------------------------------------------- the queries

def build_scored(spark, o: Options, s: Settings):
    """Kafka -> (valid transactions scored per card, malformed records) as two streaming frames."""
    from pyspark.sql import functions as F

    from pipelines.sources import parse_transactions, read_kafka

    parsed = parse_transactions(read_kafka(spark, o.transactions_topic, s,
                                           starting_offsets=o.starting_offsets,
                                           max_offsets_per_trigger=o.max_offsets_per_trigger))
    bad = parsed.where(F.col("dlq_reason").isNotNull())
    valid = (parsed.where(F.col("dlq_reason").isNull())
             .withColumn("event_ts", F.timestamp_millis("event_time"))
             .withWatermark("event_ts", f"{s.watermark_seconds} seconds")
             .select("txn_id", "card_id", "merchant_id", "amount_cents", "lat", "lon", "event_time",
                     "produced_at", "offset"))
    scored = (valid.withColumn("bucket", F.pmod(F.xxhash64("card_id"), F.lit(s.fraud_state_buckets)))
              .groupBy("bucket")
              .transformWithStateInPandas(make_processor(s.state_ttl_minutes * 60_000),
                                          outputStructType=SCORED_DDL, outputMode="Append",
                                          timeMode="ProcessingTime"))
    return scored, bad


def start(spark, o: Options, s: Settings, sinks: Sinks):
    """Start the decisions query and the dead-letter query; return both."""
    scored, bad = build_scored(spark, o, s)

    def trigger(writer, seconds):
        if o.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=f"{int(seconds * 1000)} milliseconds")

    decisions = trigger(scored.writeStream.queryName(JOB)
                        .option("checkpointLocation", str(o.checkpoint / "decisions"))
                        .foreachBatch(sinks.decisions), o.trigger_seconds).start()
    dlq = trigger(bad.writeStream.queryName(f"{JOB}-dlq")
                  .option("checkpointLocation", str(o.checkpoint / "dlq"))
                  .foreachBatch(sinks.dead_letters), max(o.trigger_seconds, 1.0)).start()
    return [decisions, dlq]


def wait_for_listener(queries, db, timeout_s: float = 10.0) -> None:
    """Let the progress listener record each query's last batch before the process ends."""
    deadline = time.monotonic() + timeout_s
    for q in queries:
        last = getattr(q, "lastProgress", None)
        if not last:
            continue
        while time.monotonic() < deadline:
            row = db.conn.execute("SELECT max(batch_id) FROM batch_progress WHERE query = ?",
                                  (q.name,)).fetchone()
            if row[0] is not None and row[0] >= last["batchId"]:
                break
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    s = load()
    o = parse_args(sys.argv[1:] if argv is None else argv, s)
    from infra.topics import ensure_topics
    from pipelines import fencing, metrics, store
    from pipelines.spark import get_spark

    try:
        ensure_topics([o.transactions_topic, o.decisions_topic, o.dlq_topic], s=s)
    except Exception as exc:  # kafka-python's NoBrokersAvailable and friends
        print(f"fraud: cannot reach Kafka at {s.kafka_bootstrap}: {exc}", file=sys.stderr)
        return 2
    epoch = fencing.take_lease(store.connect(o.store_path), JOB)
    spark = get_spark("cardstream-fraud", s)
    # No empty batches: the TTL'd state would otherwise ask for one every trigger (and an
    # availableNow run would never end); idle cards still expire on the card's next batch.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    o.checkpoint.mkdir(parents=True, exist_ok=True)
    sinks = Sinks(o, s, epoch, realtime=(o.mode == "realtime"))
    metrics.install(spark, o.store_path, {JOB: str(o.checkpoint / "decisions"),
                                          f"{JOB}-dlq": str(o.checkpoint / "dlq"),
                                          f"{JOB}-rt": str(o.checkpoint / "realtime")})
    if o.mode == "realtime":
        # The real-time query needs the CPU; the stateful path only keeps profiles (and the store)
        # and is throttled so it cannot starve it: a slower trigger, a bounded batch.
        o = replace(o, trigger_seconds=max(o.trigger_seconds, REALTIME_STATEFUL_TRIGGER_S),
                    max_offsets_per_trigger=o.max_offsets_per_trigger or REALTIME_STATEFUL_MAX_OFFSETS)
    queries = start(spark, o, s, sinks)
    if o.mode == "realtime":
        from pipelines import realtime

        queries += realtime.start(spark, o, s)
    print(f"fraud: {o.mode} mode, epoch {epoch}, reading {o.transactions_topic} -> "
          f"{o.decisions_topic} + {o.store_path}, checkpoint {o.checkpoint}", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.is_set():
            if o.available_now and all(not q.isActive for q in queries):
                break
            failed = [q for q in queries if not q.isActive and q.exception() is not None]
            if failed:
                print(f"fraud: query {failed[0].name} failed: {str(failed[0].exception()).splitlines()[0]}",
                      file=sys.stderr, flush=True)
                return 1
            stop.wait(0.5)
    finally:
        for q in queries:
            if q.isActive:
                q.stop()
        sinks.producer.flush()
        wait_for_listener(queries, sinks.db)
        print(f"fraud: stopped; decided {sinks.decided} ({sinks.fraud} fraud, {sinks.late} late) "
              f"in this run.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
