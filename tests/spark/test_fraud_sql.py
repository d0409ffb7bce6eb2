"""The real-time path's JVM side agrees with the plain functions: the live profiles' analyzers
(LiveProfiles.java, called through SQL `reflect`) and the SQL aggregator.

The real-time query may not run Python (Spark 4.2's real-time allowlist), so it scores in the JVM;
here both are evaluated on the same transactions on the shared SparkSession.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import replace

import pytest

from infra.contracts import ANALYZERS
from pipelines.fraud import seed
from pipelines.fraud.aggregator import aggregate, aggregate_columns
from pipelines.fraud.analyzers import DEFAULT_LIMITS, score_transaction
from pipelines.fraud.state import profile_to_row

T0 = 1_700_000_000_000
PARIS, NEW_YORK, LYON = (48.8566, 2.3522), (40.7128, -74.0060), (45.764, 4.8357)


def txn(amount, where, t):
    return {"amount_cents": amount, "lat": where[0], "lon": where[1], "event_time": t}


ROW_DDL = ("card_id string, amount_cents long, lat double, lon double, event_time long, partition int, "
           "offset long, produced_at long")


def live(spark, rows, seed_path):
    """Score `rows` (in this order, one Spark task) through the Java live profiles."""
    # deferred: kafka-python loads only where Kafka is used
    from pipelines.fraud.realtime import live_scores

    from pyspark.sql import functions as F

    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), ROW_DDL).withColumn("merchant_id", F.lit("m"))
    out = df.select("offset", live_scores(str(seed_path)).alias("r")).collect()
    # an empty field: an unknown profile age
    return {r["offset"]: [float(x) if x else None for x in r["r"].split("\t")[0].split(",")] for r in out}


def seed_file(tmp_path, snapshot=None, folds=None, holes=None, partitions=1):
    scope = f"test-{uuid.uuid4().hex[:8]}"
    p = seed.Plan(starts=folds or {0: 0}, folds=folds or {0: 0}, holes=holes or {})
    return seed.write(tmp_path / f"{scope}.tsv",
                      seed.seed_lines(scope, snapshot or seed.Snapshot(), p, DEFAULT_LIMITS, 86_400_000, partitions,
                                      now=int(time.time() * 1000)))


def stream():
    """The cases' histories and next transactions as one stream of cards on partition 0, in order."""
    rows, now = [], int(time.time() * 1000)
    for k, (history_and_next) in enumerate(sequences()):
        for t in history_and_next:
            rows.append((f"card-{k}", t["amount_cents"], t["lat"], t["lon"], t["event_time"], 0, len(rows), now))
    return rows


def sequences():
    history = [txn(2_000 + 150 * i, PARIS, T0 + i * 600_000) for i in range(5)]
    burst = [txn(150, PARIS, T0 + 3_000_000 + i * 2_000) for i in range(4)]
    nexts = [txn(2_100, PARIS, T0 + 3_100_000), txn(9_000, PARIS, T0 + 3_100_000),
             txn(60_000, PARIS, T0 + 3_100_000), txn(2_000, NEW_YORK, T0 + 2_700_000 + 30 * 60_000),
             txn(2_000, LYON, T0 + 2_400_000 + 50 * 60_000), txn(2_000, LYON, T0 + 2_400_000 + 30 * 60_000),
             txn(150, PARIS, T0 + 3_009_000)]
    # an out-of-order one too (proximity keeps the newest place), and a long card for the ticket cap
    late = [txn(2_000, PARIS, T0), txn(2_000, NEW_YORK, T0 + 7_200_000), txn(2_000, LYON, T0 + 3_600_000),
            txn(2_000, LYON, T0 + 7_300_000)]
    steady = [txn(1_000 + (i % 7) * 300, PARIS, T0 + i * 20_000) for i in range(70)]
    return [past + [n] for past in (history, history + burst) for n in nexts] + [late, steady]


def python_scores(rows):
    """What the stateful path's analyzers say for each row, card by card in stream order."""
    profiles, out = {}, {}
    for card, amount, lat, lon, t, _, offset, _ in rows:
        scores, profiles[card] = score_transaction(profiles.get(card), {"amount_cents": amount, "lat": lat,
                                                                        "lon": lon, "event_time": t})
        out[offset] = [scores[n] for n in ANALYZERS]
    return out, profiles


def test_live_profiles_score_as_the_python_analyzers(spark, tmp_path):
    """The Java analyzers of the real-time path agree with pipelines.fraud.analyzers, transaction
    by transaction, as they fold each card's profile."""
    rows = stream()
    want, _ = python_scores(rows)
    got = live(spark, rows, seed_file(tmp_path))
    assert set(got) == set(want)
    for offset, scores in want.items():
        assert got[offset][:3] == pytest.approx(scores, abs=1e-9), offset
    flat = [x for s in want.values() for x in s]
    assert 1.0 in flat and any(0 < x < 1 for x in flat)  # the cases reach the ramps and their tops
    assert all(0 <= g[3] < 60_000 for g in got.values())  # every transaction produced just now, no hole


def test_a_replay_folds_nothing_twice(spark, tmp_path):
    """Records read again (a restart reading back) are scored but not folded: the next new record
    scores as if each transaction had been seen once."""
    rows = stream()
    path = seed_file(tmp_path)
    head, tail = rows[:-1], rows[-1:]
    first = live(spark, head, path)
    again = live(spark, head[-20:], path)  # a replay of the last 20
    got = live(spark, tail, path)
    want, _ = python_scores(rows)
    assert got[tail[0][6]][:3] == pytest.approx(want[tail[0][6]], abs=1e-9)
    # and a replay is not judged against its own future: the steady card's replayed decisions
    # (its profile already holds them and later ones) say what the first ones said
    for offset, scores in again.items():
        assert scores[:3] == pytest.approx(first[offset][:3], abs=1e-9), offset


def test_seeded_profiles_and_a_hole(spark, tmp_path):
    """A seed's profile is where a card starts (as the stateful path left it); a partition with a
    hole says how old the hole is in every decision's profile age."""
    rows = stream()
    cut = 40
    want, _ = python_scores(rows)
    _, before = python_scores(rows[:cut])
    profiles = [(card, *profile_to_row(p)[:6]) for card, p in before.items()]
    hole_at = int(time.time() * 1000) - 120_000
    snap = seed.Snapshot(as_of=hole_at, ends={0: cut}, profiles=profiles)
    got = live(spark, rows, seed_file(tmp_path, snap, folds={0: cut}, holes={0: hole_at}))
    for offset in range(cut, len(rows)):
        assert got[offset][:3] == pytest.approx(want[offset], abs=1e-9), offset
        assert got[offset][3] >= 120_000
    # the records before the seed's offsets are replays: scored, never folded


def test_at_most_once_folds_what_it_does_not_decide(spark, tmp_path):
    """At-most-once sends no decision for a transaction appended before its start, but its card's
    profile still folds it: the filter stays above the Java call in Spark's plan."""
    # deferred: pyspark and kafka-python load only where used
    from pyspark.sql import functions as F

    from pipelines.fraud.realtime import decisions

    rows = stream()
    start_at = 1_000_000
    stamped = [(f"t{r[6]}", "m", *r, start_at - 1 if r[6] < len(rows) - 1 else start_at) for r in rows]
    df = spark.createDataFrame(spark.sparkContext.parallelize(stamped, 1),
                               "txn_id string, merchant_id string, " + ROW_DDL + ", ts_ms long")
    df = df.select("*", F.timestamp_millis("ts_ms").alias("kafka_ts"))
    out = decisions(df, str(seed_file(tmp_path)), start_at, 0.7, 60_000).collect()
    assert [r["txn_id"] for r in out] == [f"t{len(rows) - 1}"]
    want, _ = python_scores(rows)
    got = out[0]
    assert [got[f"score_{n}"] for n in ANALYZERS] == pytest.approx(want[len(rows) - 1], abs=1e-9)
    assert got["profile_age_ms"] >= 0


def test_aggregator_sql_matches_python(spark):
    grid = [(a, b, c) for a in (0.0, 0.3, 0.69, 1.0) for b in (0.0, 0.5, 0.9) for c in (0.0, 0.4)]
    df = spark.createDataFrame(grid, ", ".join(f"score_{n} double" for n in ANALYZERS))
    score, is_fraud = aggregate_columns(0.7)
    for row in df.select("*", score.alias("score"), is_fraud.alias("is_fraud")).collect():
        want, flag = aggregate({n: row[f"score_{n}"] for n in ANALYZERS}, 0.7)
        assert row["score"] == pytest.approx(want) and row["is_fraud"] == flag


@pytest.mark.parametrize("processor", ["jvm", "python"])
def test_the_stateful_processor_scores_as_the_python_analyzers(spark, settings, tmp_path, processor):
    """The stateful path's per-card scoring (CardScoring.java by default, the pandas processor with
    FRAUD_PROCESSOR=python) agrees with pipelines.fraud.analyzers, the profiles carried from one
    micro-batch to the next in Spark's state; its p_* columns are the profile after each row."""
    # deferred: pyspark, kafka-python and the store (pandas) load only where used
    from pyspark.sql import functions as F

    from pipelines.fraud.job import per_card

    s = replace(settings, fraud_processor=processor)
    rows = stream()
    cols = ("txn_id string, card_id string, merchant_id string, amount_cents long, lat double, lon double, "
            "event_time long, produced_at long, offset long")
    as_txn = [(f"t{r[6]}", r[0], "m", r[1], r[2], r[3], r[4], r[7], r[6]) for r in rows]
    half = len(as_txn) // 2
    source = tmp_path / "in"
    got = {}

    def run():
        valid = (spark.readStream.schema(cols).parquet(str(source))
                 .withColumn("event_ts", F.timestamp_millis("event_time"))
                 .withWatermark("event_ts", "3600 seconds").drop("event_ts"))
        q = (per_card(valid, s).writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
             .foreachBatch(lambda df, _: got.update({r["txn_id"]: r for r in df.collect()}))
             .trigger(availableNow=True).start())
        finished = q.awaitTermination(180)
        if not finished:
            q.stop()
        assert finished and q.exception() is None

    # as the job sets it: with TTL'd state Spark would otherwise ask for an empty batch every
    # trigger, and an availableNow run would never end
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    spark.createDataFrame(as_txn[:half], cols).write.mode("append").parquet(str(source))
    run()
    spark.createDataFrame(as_txn[half:], cols).write.mode("append").parquet(str(source))
    run()  # the second half in another batch: the state carries the first half's profiles
    # a micro-batch takes each card's rows in event-time order (then offset): so does the reference
    in_batches = [r for part in (rows[:half], rows[half:]) for r in sorted(part, key=lambda r: (r[4], r[6]))]
    want, profiles = python_scores(in_batches)
    assert len(got) == len(rows)
    for offset, scores in want.items():
        r = got[f"t{offset}"]
        assert [r[f"score_{n}"] for n in ANALYZERS] == pytest.approx(scores, abs=1e-9), offset
    last = {}
    for r in sorted(got.values(), key=lambda r: (r["card_id"], r["event_time"])):
        last[r["card_id"]] = r
    for card, p in profiles.items():
        row = profile_to_row(p)
        assert (last[card]["p_count"], last[card]["p_times"]) == (row[0], row[5]), card
        assert last[card]["p_mean"] == pytest.approx(row[1])


def ages(spark, tmp_path, rows, **seed_args):
    """{offset: profile_age_ms} of `rows` scored in order (None: unknown)."""
    return {offset: r[3] for offset, r in live(spark, rows, seed_file(tmp_path, **seed_args)).items()}


def test_profile_age_is_the_age_of_the_newest_history_the_card_folded(spark, tmp_path):
    """Issue 36 item 2: a card's profile is as old as its previous transaction, or the seed's cut
    when it has folded none since; not the scored transaction's own age (fresh by definition)."""
    now = int(time.time() * 1000)
    cut = now - 600_000
    rows = [("card-a", 2_000, *PARIS, T0, 0, 0, now - 300_000),   # no history since the cut
            ("card-a", 2_000, *PARIS, T0 + 60_000, 0, 1, now - 1_000),  # its history: 300 s old
            ("card-b", 2_000, *PARIS, T0, 0, 2, now)]             # a card the seed did not hold
    got = ages(spark, tmp_path, rows, snapshot=seed.Snapshot(as_of=cut, ends={0: 0}))
    assert 600_000 <= got[0] < 660_000 and 600_000 <= got[2] < 660_000
    assert 300_000 <= got[1] < 360_000  # the scored transaction itself is 1 s old


def test_a_partition_rebuilt_past_its_seed_says_its_profiles_are_as_old_as_the_seed(spark, tmp_path):
    """Issue 36 item 2: a task that builds a partition's profiles from the seed but whose first
    record lies past the seed's offsets (rebuilt on another executor, a retried task) never folded
    the records between: every decision there is at least as old as the seed's cut."""
    now = int(time.time() * 1000)
    cut = now - 200_000
    rows = [(f"card-{i % 3}", 2_000, *PARIS, T0 + i * 60_000, 0, 50 + i, now) for i in range(6)]
    rebuilt = ages(spark, tmp_path, rows, snapshot=seed.Snapshot(as_of=cut, ends={0: 10}), folds={0: 10})
    assert all(age >= 200_000 for age in rebuilt.values()), rebuilt
    # the same records read from where the seed ends: the cards' second transactions are fresh
    whole = ages(spark, tmp_path, rows, snapshot=seed.Snapshot(as_of=cut, ends={0: 50}), folds={0: 50})
    assert all(whole[50 + i] < 60_000 for i in range(3, 6)), whole


def test_a_card_off_its_key_partition_has_an_unknown_profile_age(spark, tmp_path):
    """Issue 36 item 2: a producer that does not key by card spreads a card's transactions over
    partitions, and each partition's profile holds only its share: its age is unknown (null)."""
    now = int(time.time() * 1000)
    cards = [f"card-{i}" for i in range(8)]
    home = dict(zip(cards, seed.partition_of(cards, 4)))  # Kafka's murmur2, as the producers key them
    rows = [(c, 2_000, *PARIS, T0, (home[c] + k) % 4, i, now) for i, (c, k) in
            enumerate((c, k) for c in cards for k in (0, 1))]
    got = ages(spark, tmp_path, rows, partitions=4,
               folds={p: 0 for p in range(4)})
    for offset, (card, *_rest) in enumerate(rows):
        on_home = rows[offset][5] == home[card]
        assert (got[offset] is not None) == on_home, (card, rows[offset][5], home[card], got[offset])


def test_the_dead_letter_query_plans_the_parse_alone(spark, settings):
    """The fraud job's dead-letter query reads the transactions topic and keeps the records the
    contract refuses: its plan holds no labels source and no stateful operator, which planning the
    scoring beside it cost every job start about a second (bench/RESULTS.md#jvm-start)."""
    from pipelines.fraud.job import build_malformed, build_scored, parse_args

    o = parse_args(["--transactions-topic", f"tx-{uuid.uuid4().hex[:8]}"], settings)

    def operators(df) -> list[str]:
        tree = df._jdf.queryExecution().logical().treeString()
        return [line.strip(" +-:'~").split(" ")[0] for line in tree.splitlines()]

    bad, scored = operators(build_malformed(spark, o, settings)), operators(build_scored(spark, o, settings))
    assert bad.count("StreamingRelationV2") == 1, bad
    assert not {"TransformWithState", "EventTimeWatermark", "Union"} & set(bad), bad
    # the decisions query's plan, for contrast: two topics, the per-card state
    assert scored.count("StreamingRelationV2") == 2 and "TransformWithState" in scored, scored


def test_the_stateful_operators_take_the_rows_as_they_are_grouped_by_column(spark, settings):
    """Each transformWithState of the decisions plan (the card scoring, the card and terminal
    windows) groups its rows by a column: no AppendColumns step turning every row into an object
    for a key function, whose code every task generated again (bench/RESULTS.md#recovery-beside-a-core-kept-busy-2026-11-27-the-slower-machine)."""
    from pipelines.fraud.job import build_scored, parse_args

    o = parse_args(["--transactions-topic", f"tx-{uuid.uuid4().hex[:8]}"], settings)
    tree = build_scored(spark, o, settings)._jdf.queryExecution().analyzed().treeString()
    operators = [line.strip(" +-:'~").split(" ")[0] for line in tree.splitlines()]
    assert operators.count("TransformWithState") == 3, operators
    assert not [op for op in operators if op.startswith("AppendColumns")], operators
