"""The usage job's count reads a batch's rows from under the Project Spark puts over the Kafka scan
(a copy of every row and nothing else) — only when the batch's plan is that copy alone and this
batch's — on a real Kafka stream: the same counts, the query's numInputRows still counted."""
from __future__ import annotations

import dataclasses
import json

from bench.harness.jobs import decision, producer


def parent_name(rdd) -> str:
    return rdd.dependencies().head().rdd().getClass().getSimpleName()


def same_rows(DC, jdf, plan) -> bool:
    """The rows read with `plan` are the batch's rows as planned."""
    return DC.rows(jdf, plan).id() == DC.rows(jdf).id()


def test_a_count_reads_the_scans_rows_only_under_a_copy_of_this_batch(kafka, spark, topic, settings, tmp_path):
    from pyspark.sql import functions as F

    from pipelines.engine.sources import decision_check, read_kafka
    from pipelines.usage import dedupe
    from pipelines.usage.job import again, rejected_reasons, stream_plan, tally

    name = topic("decisions-scan", partitions=3)
    s = dataclasses.replace(settings, topics=dataclasses.replace(settings.topics, decisions=name))
    prod = producer(s)
    for i in range(60):
        value = b"{not json" if i % 7 == 0 else json.dumps(decision(i, i % 5 == 0)).encode()
        prod.send(name, key=f"tx-{i}".encode(), value=value, partition=i % 3)
    prod.flush()
    prod.close()
    check = decision_check(spark, s)
    DC = spark._jvm.cardstream.parse.DecisionCheck
    seen, plans = [], []

    def batch(df, batch_id):
        plan = stream_plan(spark, "scan-rows")
        direct = DC.rows(df._jdf, plan)
        stale = DC.rows(df._jdf, plans[-1]) if plans else None
        plans.append(plan)
        seen.append({
            "direct_over": parent_name(direct),
            "stale_is_planned": stale is None or stale.id() == DC.rows(df._jdf).id(),
            "counts": (tally(df, check, plan), tally(df, check)),
            "deduped": [(c.counted, c.fraud, c.copies, c.rejected) for c in
                        (dedupe.count(df, check, tmp_path / "a", batch_id, s, plan),
                         dedupe.count(df, check, tmp_path / "b", batch_id, s))],
            # a step added to the batch: its own plan, run as planned
            "stepped_is_planned": same_rows(DC, df.where("partition >= 0")._jdf, plan),
        })

    stream = read_kafka(spark, name, s, starting_offsets="earliest", max_offsets_per_trigger=25, headers=False)
    q = (stream.writeStream.queryName("scan-rows").foreachBatch(batch).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert len(seen) >= 3, seen  # 60 records, at most 25 a batch
    for b in seen:
        assert b["direct_over"] == "DataSourceRDD", b  # the scan's own step, over the source
        assert b["counts"][0] == b["counts"][1] and b["deduped"][0] == b["deduped"][1], b
        assert b["stale_is_planned"] and b["stepped_is_planned"], b
    valid = sum(b["counts"][0][0] for b in seen)
    assert valid == 60 - len(range(0, 60, 7)) and sum(b["counts"][0][2] for b in seen) == len(range(0, 60, 7))
    assert sum(b["counts"][0][1] for b in seen) == sum(1 for i in range(60) if i % 5 == 0 and i % 7)

    # counted once, by the scan's own step: the query's numInputRows are the records, the second
    # pass for the rejected records' reasons included (it reads the source again, not the step)
    reasons = {"again": [], "df": []}

    def reasons_of(how):
        def batch(df, _):
            plan = stream_plan(spark, f"scan-rows-{how}")
            rejected = tally(df, check, plan)[2]
            if rejected:
                reasons[how].append(rejected_reasons(again(df, plan) if how == "again" else df, s, rejected, how))
        return batch

    for how in reasons:
        q = (stream.writeStream.queryName(f"scan-rows-{how}").foreachBatch(reasons_of(how))
             .option("checkpointLocation", str(tmp_path / f"cp-{how}")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        if how == "again":
            assert sum(p["numInputRows"] for p in q.recentProgress) == 60
    assert reasons["again"] == reasons["df"] and all(reasons["again"]) and len(reasons["again"]) >= 3, reasons

    # a query that adds a step to the source: its plan is not the copy alone, the batch runs as planned
    steps = []  # (as the injected task failure adds one to a batch)
    stepped = stream.withColumn("value", F.concat(F.col("value"), F.lit(b" ")))
    q2 = (stepped.writeStream.queryName("scan-rows-stepped")
          .foreachBatch(lambda df, _: steps.append(same_rows(DC, df._jdf, stream_plan(spark, "scan-rows-stepped"))))
          .option("checkpointLocation", str(tmp_path / "cp2")).trigger(availableNow=True).start())
    q2.awaitTermination(120)
    assert q2.exception() is None and steps and all(steps), steps
