"""The features a fraud decision is made on, by name: what the fraud job computes per transaction
in event time (per card and per terminal, in Spark state) and writes to the feature log, and what a
model is trained on. One list, so training and serving use the same features in the same order.

Windows follow the fraud-detection handbook's baseline (Le Borgne et al., ch. 3):
- per card, over the last 1, 7 and 30 days of event time, the current payment included: the number
  of payments and their mean amount (currency units);
- per terminal, over 1, 7 and 30 days ending `delay` days before the payment (only labels the
  feedback delay has let through are known): the number of payments and the share of them labelled
  fraud (0 when there were none);
- the payment's own calendar: weekend (Saturday, Sunday) and night (hour <= 6), in UTC.

Beyond the baseline (HISTORY_FEATURES, issue 35), in the same state and the same event time:
- per card, the payment against the card's own past (its earlier payments of the last 30 or 60
  days, the payment itself excluded): its amount over their mean (1 when there is none) and its
  z-score (0 with fewer than two or no spread); and the number of the card's payments over 2.5x
  their own past 30-day mean in the last 1, 7 and 14 days, the payment included;
- per terminal, ending `delay` days before the payment: the share of frauds over 14, 21 and 28
  days, the number of known frauds over 28 days, the days since the last known fraud (capped
  at NO_FRAUD_DAYS, which also says "none known"), and the days since the first known fraud of
  those 28 days (NO_FRAUD_DAYS when none): how long the terminal's current run of frauds has
  lasted (chosen on the handbook's validation week, bench/RESULTS.md#handbook).
"""
from __future__ import annotations

WINDOW_DAYS = (1, 7, 30)

CARD_FEATURES = tuple(f"c_{kind}_{d}d" for d in WINDOW_DAYS for kind in ("count", "mean"))
TERMINAL_FEATURES = tuple(f"t_{kind}_{d}d" for d in WINDOW_DAYS for kind in ("count", "risk"))
CALENDAR_FEATURES = ("is_weekend", "is_night")
BASELINE_FEATURES = CALENDAR_FEATURES + CARD_FEATURES + TERMINAL_FEATURES

PAST_DAYS = (30, 60)            # the card's past the payment is compared with
OVER_MEAN_DAYS = (1, 7, 14)     # windows of the card's count of payments over OVER_MEAN x its past mean
OVER_MEAN = 2.5                 # (its 30-day past mean: exact as 2 x amount x count > 5 x sum)
RISK_DAYS = (14, 21, 28)        # further terminal risk windows, ending at the delay
NO_FRAUD_DAYS = 90.0            # days since the terminal's last known fraud: the cap, and "none"
CARD_PAST_FEATURES = (tuple(f"c_amount_ratio_{d}d" for d in PAST_DAYS) + tuple(f"c_amount_z_{d}d" for d in PAST_DAYS)
                      + tuple(f"c_over_mean_{d}d" for d in OVER_MEAN_DAYS))
TERMINAL_FRAUD_FEATURES = (tuple(f"t_risk_{d}d" for d in RISK_DAYS)
                           + ("t_frauds_28d", "t_days_since_fraud", "t_days_since_first_fraud"))
HISTORY_FEATURES = CARD_PAST_FEATURES + TERMINAL_FRAUD_FEATURES
# everything the job computes per payment, in the order History.java appends them
STREAM_FEATURES = BASELINE_FEATURES + HISTORY_FEATURES
CARD_STATE_DAYS = max(PAST_DAYS)
ANALYZER_SCORES = ("score_avg_ticket", "score_proximity", "score_velocity")
# What a model is fed, in order (training, the job's MLlib plan and the real-time JVM scorer): the
# payment's amount, the event-time features, the analyzers' scores. The feature log holds every one.
MODEL_FEATURES = ("amount",) + STREAM_FEATURES + ANALYZER_SCORES
NIGHT_LAST_HOUR = 6
# a record of the feature log (topic `features`): the transaction, its features, the decision
FEATURE_LOG_FIELDS = ("txn_id", "card_id", "merchant_id", "amount_cents", "event_time",
                      *STREAM_FEATURES, "score_avg_ticket", "score_proximity", "score_velocity", "score",
                      "is_fraud")

# the card's event-time state after a batch, on the card's last row of it ("times;amounts;over",
# History.historyText), which the real-time path's seed carries (pipelines/fraud/seed.py)
CARD_HISTORY = "c_history"

# ------------------------------------------------------------------ the wiring in the fraud job

LABEL_SCHEMA = "txn_id string, merchant_id string, event_time bigint, is_fraud boolean"


def output_ddl(input_ddl: str, names) -> str:
    return ", ".join([input_ddl, *(f"{n} double" for n in names)])


def labels_frame(kafka_df):
    """Kafka rows of `labels` -> (txn_id, merchant_id, event_time, is_fraud) of the labels that can
    feed a terminal's risk: those naming the labelled payment's terminal and time (a replayed
    history's do; a label without them is ground truth for the audit only, not feedback)."""
    from pyspark.sql import functions as F

    parsed = F.from_json(F.col("value").cast("string"), LABEL_SCHEMA)
    return (kafka_df.select(parsed.alias("l")).select("l.*")
            .where(F.col("txn_id").isNotNull() & F.col("merchant_id").isNotNull()
                   & F.col("event_time").isNotNull() & F.col("is_fraud").isNotNull()))


def history_ttl_ms(ttl_ms: int, delay_days: int) -> int:
    """The history state's TTL: at least its longest window (and the delay), so a card or
    terminal quiet for less than that keeps what its windows need."""
    return max(int(ttl_ms), (max(CARD_STATE_DAYS, max(WINDOW_DAYS) + delay_days) + 1) * 86_400_000)


def with_history(scored, labels, scored_ddl: str, ttl_ms: int, delay_days: int, card_history: bool = False):
    """Scored transactions (+ the labels stream, or None) -> the same rows + CARD_HISTORY +
    STREAM_FEATURES, in event time: card windows keyed by card, then terminal windows keyed by
    terminal with the labels joined in (pipelines/fraud/jvm/cardstream/fraud/History.java), then
    the calendar. The state's TTL is `ttl_ms` or, when longer, what the windows need
    (history_ttl_ms). `card_history`: fill CARD_HISTORY (null otherwise)."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    spark = scored.sparkSession
    jvm = spark._jvm.cardstream.fraud.History
    ttl_ms = history_ttl_ms(ttl_ms, delay_days)
    card_ddl = output_ddl(scored_ddl, CARD_FEATURES + CARD_PAST_FEATURES) + f", {CARD_HISTORY} string"
    with_card = DataFrame(jvm.cardWindows(scored._jdf, card_ddl, ttl_ms, bool(card_history)), spark)
    txns = with_card.withColumn("label_fraud", F.lit(None).cast("boolean"))
    if labels is not None:
        cols = {"txn_id": F.col("txn_id"), "merchant_id": F.col("merchant_id"), "event_time": F.col("event_time"),
                "label_fraud": F.col("is_fraud")}
        fields = {f.name: f.dataType for f in txns.schema.fields}
        txns = txns.unionByName(labels.select(*[(cols[n] if n in cols else F.lit(None)).cast(t).alias(n)
                                                for n, t in fields.items()]))
    terminal_ddl = output_ddl(card_ddl, TERMINAL_FEATURES + TERMINAL_FRAUD_FEATURES)
    with_terminal = DataFrame(jvm.terminalWindows(txns._jdf, terminal_ddl, ttl_ms, delay_days * 86_400_000), spark)
    ts = F.timestamp_millis("event_time")
    return with_terminal.select("*", (F.dayofweek(ts).isin(1, 7)).cast("double").alias("is_weekend"),
                                (F.hour(ts) <= NIGHT_LAST_HOUR).cast("double").alias("is_night"))
