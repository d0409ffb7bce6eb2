"""The real-time scoring path: Spark 4.2's `realTime` trigger, stateless, JVM only.

What PySpark 4.2.0's real-time mode accepts (tried here, see the README): the Kafka source and
sink (and foreach), and only the operators on its allowlist — projections, filters, unions,
watermarks and broadcast joins with a static side. A Python UDF (ArrowEvalPythonExec), any
aggregation or state store (HashAggregateExec, StateStoreSaveExec) and so transformWithState are
rejected with STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST.

So this path keeps no state of its own: it joins each transaction with a broadcast snapshot of
the card profiles that the stateful micro-batch path keeps (store table `card_profiles`), computes
the same three scores and the aggregator as SQL expressions (mirrors of `pipelines.analyzers`),
and writes the decision straight to the Kafka `decisions-rt` topic. The snapshot is refreshed by
restarting the query on the same checkpoint every `--profile-refresh-seconds` (default 300,
also the real-time batch duration: each batch boundary stalls the query for a moment).
"""
from __future__ import annotations

import threading

from infra import kafka_client
from infra.config import Settings
from infra.contracts import ANALYZERS, DECISION_FIELDS
from pipelines.fraud.analyzers import DEFAULT_LIMITS, Limits

QUERY = "fraud-rt"
PROFILE_COLUMNS = ("card_id", "count", "mean", "lat", "lon", "place_time", "times")
PROFILE_DDL = ("card_id string, p_count long, p_mean double, p_lat double, p_lon double, "
               "p_time long, p_times string")


def _ramp(x, low: float, high: float):
    from pyspark.sql import functions as F

    return F.least(F.lit(1.0), F.greatest(F.lit(0.0), (x - F.lit(low)) / F.lit(high - low)))


def score_columns(limits: Limits = DEFAULT_LIMITS) -> dict:
    """SQL mirrors of the analyzers over a transaction joined with its card's p_* profile columns.

    They score against the profile as it was at the snapshot (not updated by this transaction):
    the price of staying stateless.
    """
    from pyspark.sql import functions as F

    L = limits
    amount, t = F.col("amount_cents").cast("double"), F.col("event_time")
    ticket = F.when((F.col("p_count") >= L.ticket_min_history) & (F.col("p_mean") > 0),
                    _ramp(amount / F.col("p_mean"), L.ticket_ratio_low, L.ticket_ratio_high)).otherwise(0.0)
    lat1, lat2 = F.radians("p_lat"), F.radians("lat")
    dlat, dlon = lat2 - lat1, F.radians(F.col("lon") - F.col("p_lon"))
    a = F.pow(F.sin(dlat / 2), 2) + F.cos(lat1) * F.cos(lat2) * F.pow(F.sin(dlon / 2), 2)
    km = F.lit(2 * 6371.0088) * F.asin(F.least(F.lit(1.0), F.sqrt(a)))
    gap = F.abs(t - F.col("p_time"))
    speed = km / (F.greatest(gap, F.lit(L.min_gap_ms)) / F.lit(3_600_000.0))
    place = F.when(F.col("p_time").isNotNull() & (gap <= L.proximity_window_ms) & (km >= L.min_distance_km),
                   _ramp(speed, L.speed_low_kmh, L.speed_high_kmh)).otherwise(0.0)
    past = F.transform(F.split(F.coalesce(F.col("p_times"), F.lit("")), ","), lambda x: x.try_cast("bigint"))

    def count(window_ms: int):
        return F.size(F.filter(past, lambda x: x.isNotNull() & (x > t - F.lit(window_ms)) & (x <= t))) + 1

    velocity = F.greatest(_ramp(count(L.velocity_window_ms), L.velocity_low, L.velocity_high),
                          _ramp(count(L.velocity_burst_ms), L.velocity_burst_low, L.velocity_burst_high))
    return {"avg_ticket": ticket, "proximity": place, "velocity": velocity}


def wall_clock_ms():
    """Per-row wall clock in ms (current_timestamp() is fixed per batch; reflection is not)."""
    from pyspark.sql import functions as F

    return F.expr("cast(reflect('java.lang.System', 'currentTimeMillis') as bigint)")


def load_profiles(spark, store_path):
    """The store's card profiles as a small static DataFrame (a LocalTableScan: allowlisted)."""
    from controlplane import store

    db = store.connect(store_path)
    try:
        rows = db.conn.execute(f"SELECT {', '.join(PROFILE_COLUMNS)} FROM card_profiles").fetchall()
    finally:
        db.conn.close()
    return spark.createDataFrame(rows, PROFILE_DDL)


def build(spark, o, s: Settings, limits: Limits = DEFAULT_LIMITS):
    """Transactions (Kafka) -> decisions as Kafka rows (key, value), stateless."""
    from pyspark.sql import functions as F

    from pipelines.fraud.aggregator import aggregate_columns
    from pipelines.engine.sources import parse_transactions, read_kafka

    # A real-time batch lasts minutes: the validation window follows each row's wall clock.
    # Invalid rows are dropped here; the accurate companion writes them to the dead-letter topic.
    txns = parse_transactions(read_kafka(spark, o.transactions_topic, s, starting_offsets="latest"),
                              s, now_ms=wall_clock_ms())
    valid = txns.where(F.col("dlq_reason").isNull())
    joined = valid.join(F.broadcast(load_profiles(spark, o.store_path)), "card_id", "left")
    scores = score_columns(limits)
    scored = joined.select("*", *[scores[n].alias(f"score_{n}") for n in ANALYZERS])
    score, is_fraud = aggregate_columns(o.threshold)
    decided_at = wall_clock_ms()
    decision = scored.select(
        *[F.col(n) for n in ("txn_id", "card_id", "merchant_id", "amount_cents", "event_time", "produced_at")],
        decided_at.alias("decided_at"),
        *[F.col(f"score_{n}") for n in ANALYZERS],
        score.alias("score"), is_fraud.alias("is_fraud"),
        (F.col("event_time") < decided_at - F.lit(s.watermark_seconds * 1000)).alias("is_late"))
    return decision.select(F.col("txn_id").alias("key"),
                           F.to_json(F.struct(*list(DECISION_FIELDS))).alias("value"))


def _start_once(spark, o, s: Settings):
    return (build(spark, o, s).writeStream.queryName(QUERY).format("kafka")
            .options(**kafka_client.spark_options(s))
            .option("kafka.linger.ms", "0")
            .option("topic", o.realtime_topic)
            .option("checkpointLocation", str(o.checkpoint / "realtime"))
            .outputMode("update")
            .trigger(realTime=f"{max(5, int(o.profile_refresh_seconds or 300))} seconds")
            .start())


class Refreshing:
    """The real-time query, restarted on a fresh profile snapshot every refresh interval.

    Looks like a StreamingQuery to the job's main loop (name, isActive, exception, stop).
    """

    name = QUERY

    def __init__(self, spark, o, s: Settings):
        self.spark, self.o, self.s = spark, o, s
        self.query = _start_once(spark, o, s)
        self._stop = threading.Event()
        self.restarts = 0
        self._thread = threading.Thread(target=self._loop, name="fraud-rt-refresh", daemon=True)
        if o.profile_refresh_seconds > 0:
            self._thread.start()

    def _loop(self):
        while not self._stop.wait(self.o.profile_refresh_seconds):
            if not self.query.isActive:
                return
            self.query.stop()
            if self._stop.is_set():
                return
            self.query = _start_once(self.spark, self.o, self.s)
            self.restarts += 1

    @property
    def isActive(self) -> bool:
        return self.query.isActive or (self._thread.is_alive() and not self._stop.is_set())

    def exception(self):
        return None if self.query.isActive else self.query.exception()

    def stop(self):
        self._stop.set()
        self.query.stop()


