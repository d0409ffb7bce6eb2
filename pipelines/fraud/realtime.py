"""The real-time scoring path: Spark 4.2's `realTime` trigger, decisions in milliseconds.

What PySpark 4.2.0's real-time mode accepts (tried here, see the README): the Kafka source and
sink (and foreach), and only the operators on its allowlist — projections, filters, unions,
watermarks and broadcast joins with a static side. A Python UDF (ArrowEvalPythonExec), any
aggregation or state store (HashAggregateExec, StateStoreSaveExec) and so transformWithState are
rejected with STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST. The allowlist names
operators, not expressions: a projection may call a static Java method (`reflect`).

So the profiles live in the executor JVM (`LiveProfiles.java`, compiled by `make setup`): the
query's long-running tasks, one per Kafka partition, fold each transaction into its card's profile
as they score it, the same three analyzers as the stateful path, in order per card (the simulator
keys transactions by card). A start seeds them from the stateful path's profiles and reads from
the offsets those cover (`pipelines.fraud.seed`), so no transaction is missing from a profile; a
decision records how old the newest transaction its profile may be missing is (`profile_age_ms`:
the transaction's own age, or the age of a hole when a replay was cut short). The aggregator and
the rest stay SQL expressions; decisions go straight to the Kafka `decisions-rt` topic.

At-least-once reads back to its own last committed offsets (or the snapshot's, if earlier) and
sends those decisions again; at-most-once folds the records since the snapshot into the profiles
but sends a decision only for transactions that reach Kafka after the start.
"""
from __future__ import annotations

import json
import shutil

from infra import kafka_client
from infra.config import Settings
from infra.contracts import ANALYZERS, DECISION_FIELDS
from pipelines.fraud.analyzers import DEFAULT_LIMITS, Limits

QUERY = "fraud-rt"
LIVE_CLASS = "cardstream.fraud.LiveProfiles"
SEEDS_KEPT = 3
# a real-time decision: the stateful path's fields and the age of the profile it used
RT_DECISION_FIELDS = (*DECISION_FIELDS, "profile_age_ms")


def wall_clock_ms():
    """Per-row wall clock in ms (current_timestamp() is fixed per batch; reflection is not)."""
    from pyspark.sql import functions as F

    return F.expr("cast(reflect('java.lang.System', 'currentTimeMillis') as bigint)")


def live_scores(seed_path: str):
    """The Java call that scores a transaction against its card's live profile and folds it in:
    a string "ticket,proximity,velocity,profile_age_ms" (LiveProfiles.decide)."""
    from pyspark.sql import functions as F

    c = F.col
    return F.reflect(F.lit(LIVE_CLASS), F.lit("decide"), F.lit(seed_path), c("card_id"),
                     c("amount_cents").cast("bigint"),
                     # no coordinates (a replayed history): NaN, on which the proximity analyzer has no opinion
                     F.coalesce(c("lat").cast("double"), F.lit(float("nan"))),
                     F.coalesce(c("lon").cast("double"), F.lit(float("nan"))),
                     c("event_time").cast("bigint"), c("partition").cast("int"), c("offset").cast("bigint"),
                     c("produced_at").cast("bigint"))


def decisions(valid, seed_path: str, emit_from_ms: int | None, threshold: float, watermark_ms: int):
    """Valid transactions (with their Kafka `partition`, `offset`, `kafka_ts`) -> decision columns.

    `emit_from_ms`: decide only the transactions appended from then on (at-most-once); the earlier
    ones are still folded into the profiles."""
    from pyspark.sql import functions as F

    from pipelines.fraud.aggregator import aggregate_columns
    from pipelines.fraud.models import rules_explanation

    scored = valid.select("*", F.split(live_scores(seed_path), ",").alias("_live"))
    if emit_from_ms is not None:
        # above the (nondeterministic) projection: Spark does not push a filter through it, so
        # the skipped transactions are still folded (tests/spark/test_fraud_sql.py checks it)
        scored = scored.where(F.col("kafka_ts") >= F.timestamp_millis(F.lit(emit_from_ms)))
    scored = scored.select("*", *[F.col("_live")[i].cast("double").alias(f"score_{n}") for i, n in enumerate(ANALYZERS)],
                           F.col("_live")[len(ANALYZERS)].cast("bigint").alias("profile_age_ms"))
    score, is_fraud = aggregate_columns(threshold)
    decided_at = wall_clock_ms()
    return scored.select(
        *[F.col(n) for n in ("txn_id", "card_id", "merchant_id", "amount_cents", "event_time", "produced_at")],
        decided_at.alias("decided_at"),
        *[F.col(f"score_{n}") for n in ANALYZERS],
        score.alias("score"), is_fraud.alias("is_fraud"),
        (F.col("event_time") < decided_at - F.lit(watermark_ms)).alias("is_late"),
        F.lit(0).alias("model_version"),  # the real-time path decides with the rules
        rules_explanation().alias("explanation"),
        F.col("profile_age_ms"))


def build(spark, o, s: Settings, starts: dict, seed_path: str, emit_from_ms: int | None):
    """Transactions (Kafka, from `starts`) -> decisions as Kafka rows (key, value)."""
    from pyspark.sql import functions as F

    from pipelines.engine.sources import parse_transactions, read_kafka

    offsets = json.dumps({o.transactions_topic: {str(p): int(v) for p, v in starts.items()}})
    # A real-time batch lasts minutes: the validation window follows each row's wall clock.
    # Invalid rows are dropped here; the accurate companion writes them to the dead-letter topic.
    txns = parse_transactions(read_kafka(spark, o.transactions_topic, s, starting_offsets=offsets),
                              s, now_ms=wall_clock_ms())
    valid = txns.where(F.col("dlq_reason").isNull())
    decision = decisions(valid, seed_path, emit_from_ms, o.threshold, s.watermark_seconds * 1000)
    return decision.select(F.col("txn_id").alias("key"),
                           F.to_json(F.struct(*list(RT_DECISION_FIELDS))).alias("value"))


def offset_bounds(s: Settings, topic: str) -> tuple[dict, dict]:
    """({partition: earliest offset}, {partition: end offset}) of `topic` now."""
    from kafka import TopicPartition

    c = kafka_client.consumer(s)
    try:
        parts = [TopicPartition(topic, p) for p in kafka_client.partitions(c, topic)]
        if not parts:
            raise RuntimeError(f"the topic {topic!r} has no partitions")
        first, ends = c.beginning_offsets(parts), c.end_offsets(parts)
        return {tp.partition: o for tp, o in first.items()}, {tp.partition: o for tp, o in ends.items()}
    finally:
        c.close()


def start(spark, o, s: Settings, started_at: int, sink: str, limits: Limits = DEFAULT_LIMITS):
    """Start the real-time query on a fresh checkpoint at the seed's offsets: (query, plan, resumed)."""
    from controlplane import store
    from pipelines.engine import checkpoints
    from pipelines.fraud import seed

    topic, folder = o.transactions_topic, o.checkpoint / "realtime"
    earliest, latest = offset_bounds(s, topic)
    db = store.connect(o.store_path)
    try:
        snapshot = seed.read_snapshot(db, sink, topic)
    finally:
        db.conn.close()
    resume = checkpoints.position(folder).committed_offsets.get(topic) if o.guarantee == "at-least-once" else None
    plan = seed.plan(snapshot, earliest, latest, o.starting_offsets, resume, s.realtime_max_replay, started_at)
    seeds = o.checkpoint / "realtime-seeds"
    path = seed.write(seeds / f"{started_at}.tsv",
                      seed.seed_lines(topic, snapshot, plan, limits, s.state_ttl_minutes * 60_000, len(latest)))
    for old in sorted(seeds.glob("*.tsv"), key=lambda p: p.stat().st_mtime)[:-SEEDS_KEPT]:
        old.unlink(missing_ok=True)
    # the query always starts at the plan's offsets: Spark honours startingOffsets only on a new checkpoint
    shutil.rmtree(folder, ignore_errors=True)
    emit_from = started_at if o.guarantee == "at-most-once" else None
    query = (build(spark, o, s, plan.starts, str(path), emit_from).writeStream.queryName(QUERY).format("kafka")
             .options(**kafka_client.spark_options(s))
             .option("kafka.linger.ms", "0")
             .option("topic", o.realtime_topic)
             .option("checkpointLocation", str(folder))
             .outputMode("update")
             .trigger(realTime=f"{max(5, int(o.realtime_batch_seconds))} seconds")
             .start())
    return query, plan, bool(resume)
