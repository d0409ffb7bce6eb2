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
the offsets those cover (`pipelines.fraud.seed`; with each card's event-time history, so the
model's card windows are whole from the first payment after a start), so no transaction is missing from a profile; a
decision records how stale its card's profile is (`profile_age_ms`: the age of the newest history
the profile has folded, the card's previous transaction or the seed's cut, and never younger than
a hole of its partition; absent when unknown: a transaction off its card's key partition; see
LiveProfiles.java). The aggregator and the rest stay SQL expressions; decisions go straight to
the Kafka `decisions-rt` topic.

The model in use scores here too, in the same JVM (`LiveModel.java`, `ModelScore.java`: the
version's model.json), on the features it was trained on, by name: the amount and the calendar
from the payment, the analyzers' scores and the card windows from the live profile, the
terminal's features from the table the stateful companion publishes (`TerminalTable`). A payment
whose features the path cannot serve (card windows shorter than the model needs, a terminal not
published yet or published too long before) is decided by the rules, its decision saying why
(`model_why`); every decision carries the version that made it (docs/fraud.md).

The path's guarantee is a policy (`pipelines.guarantees.RealtimeGuarantee`) that `start` asks:
at-least-once reads back to its own last committed offsets (or the snapshot's, if earlier) and
sends those decisions again; at-most-once folds the records since the snapshot into the profiles
but sends a decision only for transactions that reach Kafka after the start.
"""
from __future__ import annotations

import json
import time

from infra import kafka_client
from infra.config import Settings
from infra.contracts import ANALYZERS, DECISION_FIELDS
from pipelines.fraud.analyzers import DEFAULT_LIMITS, Limits
from pipelines.fraud.features import history_ttl_ms

QUERY = "fraud-rt"
LIVE_CLASS = "cardstream.fraud.LiveProfiles"
SEEDS_KEPT = 3
MODEL_CLASS = "cardstream.fraud.LiveModel"
# a real-time decision: the stateful path's fields, the age of the profile it used, and why the
# rules decided although a model is in use (null when the model decided)
RT_DECISION_FIELDS = (*DECISION_FIELDS, "profile_age_ms", "model_why")
SERVING_FILE, TERMINALS_FILE = "realtime-serving.tsv", "realtime-terminals.tsv"
# how far (event time) a payment may be from the one its terminal's published features are of
TERMINAL_MAX_GAP_MS = 3_600_000
RT_JOB = "fraud-rt"  # its row in `model_use`


def why_kind(sentence: str) -> str:
    """A decision's `model_why` with what varies per payment (a terminal's id, a date, a number)
    as "…": the reasons the rules decided, countable (bench latency, the Fraud page)."""
    import re

    sentence = re.sub(r"terminal \S+?('s)? ", lambda m: f"terminal …{m.group(1) or ''} ", sentence)
    sentence = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "…", sentence)
    return re.sub(r"\d+", "…", sentence).replace("(model …)", "(model 0)")


def wall_clock_ms():
    """Per-row wall clock in ms (current_timestamp() is fixed per batch; reflection is not)."""
    from pyspark.sql import functions as F

    return F.expr("cast(reflect('java.lang.System', 'currentTimeMillis') as bigint)")


def live_scores(seed_path: str, serving_path: str = ""):
    """The Java call that scores a transaction against its card's live profile, folds it in and
    scores it with the model in use: "ticket,proximity,velocity,profile_age_ms" then, tab-separated,
    the deciding version, the model's score and verdict, its explanation and why the rules decided
    instead (LiveModel.decide; no `serving_path`: the rules)."""
    from pyspark.sql import functions as F

    c = F.col
    return F.reflect(F.lit(MODEL_CLASS), F.lit("decide"), F.lit(seed_path), F.lit(serving_path), c("card_id"),
                     c("merchant_id"), c("amount_cents").cast("bigint"),
                     # no coordinates (a replayed history): NaN, on which the proximity analyzer has no opinion
                     F.coalesce(c("lat").cast("double"), F.lit(float("nan"))),
                     F.coalesce(c("lon").cast("double"), F.lit(float("nan"))),
                     c("event_time").cast("bigint"), c("partition").cast("int"), c("offset").cast("bigint"),
                     c("produced_at").cast("bigint"))


def decisions(valid, seed_path: str, emit_from_ms: int | None, threshold: float, watermark_ms: int,
              serving_path: str = ""):
    """Valid transactions (with their Kafka `partition`, `offset`, `kafka_ts`) -> decision columns.

    `emit_from_ms`: decide only the transactions appended from then on (the guarantee's
    `sends_from`: at-most-once's start); the earlier ones are still folded into the profiles."""
    from pyspark.sql import functions as F

    from pipelines.fraud.aggregator import aggregate_columns
    from pipelines.fraud.models import rules_explanation

    scored = valid.select("*", F.split(live_scores(seed_path, serving_path), "\t").alias("_model"))
    if emit_from_ms is not None:
        # above the (nondeterministic) projection: Spark does not push a filter through it, so
        # the skipped transactions are still folded (tests/spark/test_fraud_sql.py checks it)
        scored = scored.where(F.col("kafka_ts") >= F.timestamp_millis(F.lit(emit_from_ms)))
    scored = scored.select("*", F.split(F.col("_model")[0], ",").alias("_live"))
    scored = scored.select("*", *[F.col("_live")[i].cast("double").alias(f"score_{n}") for i, n in enumerate(ANALYZERS)],
                           # "": unknown (a card off its key's partition), null in the decision
                           F.nullif(F.col("_live")[len(ANALYZERS)], F.lit("")).cast("bigint").alias("profile_age_ms"))
    rules_score, rules_fraud = aggregate_columns(threshold)
    version = F.col("_model")[1].cast("int")
    learned = version > F.lit(0)
    score = F.when(learned, F.col("_model")[2].cast("double")).otherwise(rules_score)
    is_fraud = F.when(learned, F.col("_model")[3] == F.lit("1")).otherwise(rules_fraud)
    decided_at = wall_clock_ms()
    return scored.select(
        *[F.col(n) for n in ("txn_id", "card_id", "merchant_id", "amount_cents", "event_time", "produced_at")],
        decided_at.alias("decided_at"),
        *[F.col(f"score_{n}") for n in ANALYZERS],
        score.alias("score"), is_fraud.alias("is_fraud"),
        (F.col("event_time") < decided_at - F.lit(watermark_ms)).alias("is_late"),
        version.alias("model_version"),
        F.when(learned, F.col("_model")[4]).otherwise(rules_explanation()).alias("explanation"),
        F.col("profile_age_ms"), F.nullif(F.col("_model")[5], F.lit("")).alias("model_why"))


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
    decision = decisions(valid, seed_path, emit_from_ms, o.threshold, s.watermark_seconds * 1000,
                         str(o.local_files / SERVING_FILE))
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


def record_times(s: Settings, topic: str, offsets: dict) -> dict:
    """{partition: Kafka timestamp (ms) of the record at that offset} for the ones still readable."""
    from kafka import TopicPartition

    if not offsets:
        return {}
    c = kafka_client.consumer(s, isolation_level="read_committed", group_id=None)
    out = {}
    try:
        parts = {TopicPartition(topic, p): o for p, o in offsets.items()}
        c.assign(list(parts))
        for tp, o in parts.items():
            c.seek(tp, o)
        deadline = time.monotonic() + 10
        while len(out) < len(parts) and time.monotonic() < deadline:
            for tp, records in c.poll(timeout_ms=500, max_records=100).items():
                if records and tp.partition not in out:
                    out[tp.partition] = int(records[0].timestamp)
                    c.pause(tp)
        return out
    finally:
        c.close()


def start(spark, o, s: Settings, started_at: int, sink: str, limits: Limits = DEFAULT_LIMITS, *, epoch: int,
          current: bool):
    """Start the real-time query on a fresh checkpoint at the seed's offsets: (query, plan, resumed).
    `epoch`: the instance's fencing epoch, which names its checkpoint folder; `current`: it holds
    the job's newest lease (checkpoints.fresh_instance)."""
    from controlplane import store
    from pipelines.engine import checkpoints
    from pipelines.fraud import seed

    topic, folder = o.transactions_topic, o.checkpoint / "realtime"
    earliest, latest = offset_bounds(s, topic)
    ttl_ms = s.state_ttl_minutes * 60_000
    history_ttl = history_ttl_ms(ttl_ms, s.label_delay_days)
    db = store.connect(o.store_path)
    try:
        snapshot = seed.read_snapshot(db, sink, topic, started_at, ttl_ms, history_ttl)
    finally:
        db.conn.close()
    resume = o.guarantee.resume_from(checkpoints.position(folder).committed_offsets.get(topic))
    plan = seed.plan(snapshot, earliest, latest, o.starting_offsets, resume, s.realtime_max_replay, started_at)
    if snapshot.as_of is None and plan.holes:
        # a hole without a cut: the profiles miss everything from the first record they skip
        plan.holes.update(record_times(s, topic, plan.missed))
    seeds = o.local_files / "realtime-seeds"
    # the companion's terminal table says since when it has decided every payment: its card
    # histories (in the snapshot) hold every payment since then too
    complete_from = TerminalTable(o.local_files / TERMINALS_FILE, 0).complete_from
    path = seed.write(seeds / f"{started_at}.tsv",
                      seed.seed_lines(topic, snapshot, plan, limits, ttl_ms, len(latest), now=started_at,
                                      history_from=seed.history_from(snapshot, complete_from),
                                      history_ttl_ms=history_ttl))
    for old in sorted(seeds.glob("*.tsv"), key=lambda p: p.stat().st_mtime)[:-SEEDS_KEPT]:
        old.unlink(missing_ok=True)
    # the query always starts at the plan's offsets: Spark honours startingOffsets only on a new
    # checkpoint, one of this instance's own (a woken zombie's offsets never land in it)
    run_folder = checkpoints.fresh_instance(folder, epoch, current=current)
    db = store.connect(o.store_path)
    try:
        publish_model(db, o.local_files, sink)  # the version the stateful path decides with
    finally:
        db.conn.close()
    _FOLLOWING["checkpoint"] = o.local_files
    emit_from = o.guarantee.sends_from(started_at)
    query = (build(spark, o, s, plan.starts, str(path), emit_from).writeStream.queryName(QUERY).format("kafka")
             .options(**kafka_client.spark_options(s))
             .option("kafka.linger.ms", "0")
             .option("topic", o.realtime_topic)
             .option("checkpointLocation", str(run_folder))
             .outputMode("update")
             .trigger(realTime=f"{max(5, int(o.realtime_batch_seconds))} seconds")
             .start())
    return query, plan, bool(resume)


# ------------------------------------------------------------------ what the real-time path serves

def _replace_whole(path, text: str) -> None:
    """Write `text` to `path` by rename: the JVM never reads half a file."""
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def serving_lines(version: int, threshold: float | None, folder: str | None, checkpoint) -> tuple[int, str | None, str]:
    """(version served, why not the one in use or None, the serving file's text) for the version
    in use (its threshold and folder), read by LiveModel.java. A learned version without its JVM
    export (model.json, written by train.py since issue 35 item 3) cannot be served here: model 0
    and one sentence."""
    from pathlib import Path

    from pipelines.fraud.features import CARD_FEATURES, CARD_PAST_FEATURES
    from pipelines.fraud.models import MODEL_JSON, RULES, export_path, export_text

    if version == RULES:
        return RULES, None, "version\t0\nend\n"
    exported = export_path(folder) if folder else None  # local, or on hdfs:// (read by the JVM)
    if exported is None or export_text(exported) is None:
        why = (f"model {version} has no export for the JVM ({MODEL_JSON}, which train.py writes beside the "
               f"MLlib files): the real-time path decides with the rules (model 0)")
        return RULES, why, f"version\t0\nwhy\t{why}\nend\n"
    return version, None, "".join([
        f"version\t{version}\n", f"threshold\t{float(threshold)!r}\n", f"model\t{exported}\n",
        f"card_features\t{','.join(CARD_FEATURES + CARD_PAST_FEATURES)}\n", f"terminals\t{Path(checkpoint) / TERMINALS_FILE}\n",
        f"terminal_max_gap_ms\t{TERMINAL_MAX_GAP_MS}\n", "end\n"])


_FOLLOWING: dict = {}  # the running real-time path's checkpoint folder, set by `start`


def publish_model(db, checkpoint, job: str, version: int | None = None) -> int:
    """Point the real-time path at the version `job` decides with (`model_use`; or `version`):
    the JVM reloads the serving file within a second, no restart. What it serves, and why when it
    is not that version, goes to `model_use` as the job `fraud-rt`. Returns the version served."""
    from pathlib import Path

    from controlplane import fencing

    if version is None:
        row = db.conn.execute("SELECT version FROM model_use WHERE job = ?", [job]).fetchone()
        version = int(row[0]) if row else 0
    model = db.conn.execute("SELECT threshold, path FROM models WHERE version = ?", [version]).fetchone()
    served, why, text = serving_lines(version, model[0] if model else None, model[1] if model else None, checkpoint)
    _replace_whole(Path(checkpoint) / SERVING_FILE, text)
    epoch = fencing.current_epoch(db, job)
    with fencing.fenced_write(db, job, epoch, f"real-time model {served} in use") as conn:
        conn.execute("INSERT INTO model_use (job, version, why, since, epoch) VALUES (?, ?, ?, ?, ?) "
                     "ON CONFLICT(job) DO UPDATE SET version = excluded.version, why = excluded.why, "
                     "since = excluded.since, epoch = excluded.epoch",
                     (RT_JOB, served, why, int(time.time() * 1000), epoch))
    return served


def follow_switch(db, job: str, version: int) -> None:
    """A use-model switch of the stateful path: the running real-time path follows it."""
    if "checkpoint" in _FOLLOWING:
        publish_model(db, _FOLLOWING["checkpoint"], job, version)


EVER = -(2 ** 63)  # "complete from the topic's start"


def empty_terminal(name: str) -> float:
    """A terminal feature's value for a terminal with no payment in its windows (History.java's)."""
    from pipelines.fraud.features import NO_FRAUD_DAYS

    return NO_FRAUD_DAYS if name.startswith("t_days_since_") else 0.0


class TerminalTable:
    """The terminal features the stateful companion computed, per terminal for its newest decided
    payment (with that payment's event time), published for the real-time path after each applied
    batch as a file LiveModel.java reloads. Terminal windows end the feedback delay before the
    payment, so a window of a payment minutes earlier differs only by the payments and labels at
    its two edges (docs/fraud.md).

    The table also says since when it holds every terminal the companion decided (`complete_from`:
    EVER when the companion started on the topic's start with it) and up to which event time the
    companion has decided (`decided_to`): a terminal absent from a complete table had no payment in
    any window ending `delay_ms` before a payment up to `decided_to` + delay, so its features are
    exactly the empty ones (written in the file) rather than unknown."""

    def __init__(self, path, delay_ms: int, complete_from: int | None = None):
        from pathlib import Path

        self.path, self.delay_ms = Path(path), int(delay_ms)
        self.names: tuple[str, ...] = ()
        self.rows: dict[str, tuple] = {}
        self.complete_from, self.decided_to = complete_from, None
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        if lines and lines[-1] == "end" and lines[0].startswith("names\t"):
            self.names = tuple(lines[0].split("\t")[1:])
            self.complete_from = None  # unless the file says since when it is complete
            for line in lines[1:-1]:
                kind, *rest = line.split("\t")
                if kind == "terminal":
                    merchant, t, *values = rest
                    self.rows[merchant] = (int(t), *[float(v) if v else None for v in values])
                elif kind == "complete_from":
                    self.complete_from = int(rest[0])
                elif kind == "decided_to":
                    self.decided_to = int(rest[0])

    def update(self, table) -> None:
        """Fold an applied decisions batch (Arrow) in and rewrite the file."""
        names = tuple(c for c in table.column_names if c.startswith("t_"))
        if not names:
            return
        if names != self.names:
            self.names, self.rows = names, {}
        columns = [table.column(c).to_pylist() for c in ("merchant_id", "event_time", *names)]
        for merchant, t, *values in zip(*columns):
            if merchant is None or t is None:
                continue
            if self.complete_from is None:
                self.complete_from = t  # a table begun mid-stream is complete from its first payment on
            self.decided_to = t if self.decided_to is None else max(self.decided_to, t)
            old = self.rows.get(merchant)
            if old is None or t >= old[0]:
                self.rows[merchant] = (t, *values)
        _replace_whole(self.path, "".join([
            "names\t" + "\t".join(self.names) + "\n",
            f"complete_from\t{self.complete_from}\n" if self.complete_from is not None else "",
            f"decided_to\t{self.decided_to}\n" if self.decided_to is not None else "",
            f"delay_ms\t{self.delay_ms}\n",
            "empty\t" + "\t".join(repr(empty_terminal(n)) for n in self.names) + "\n",
            *(f"terminal\t{m}\t{r[0]}\t" + "\t".join("" if v is None else repr(float(v)) for v in r[1:]) + "\n"
              for m, r in self.rows.items()),
            "end\n"]))
