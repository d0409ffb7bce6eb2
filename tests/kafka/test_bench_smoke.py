"""Every bench runs: the scenarios that run in a process of their own, at their smallest size
(bench/all.py SMOKE), on the session's broker and Spark session, each JSON's keys checked, so a
bench cannot break unseen (`python -m bench produce` once crashed on main and nothing noticed).

`parse` has its own Spark test (tests/spark/test_bench_parse.py), `jvm-start` too
(tests/spark/test_class_archives.py). The scenarios that start job
processes (latency, state, backlog, quality, guarantees, fraud-guarantees, recovery, soak) and peer
(a Quix child beside our query, whose Spark settings it changes) cost minutes even at their
smallest; `python -m bench all --smoke` runs them all (docs/testing.md)."""
from __future__ import annotations

from bench import all as bench_all
from bench import limit, produce, throughput
from infra.config import ROCKSDB_PROVIDER
from bench.all import SMOKE

PRODUCE = {"target_rate", "achieved_rate", "p50_send_ms", "p99_send_ms", "timed", "count", "sent", "labels_sent",
           "failed", "in_topics", "seconds", "cpu_us_per_tx", "path", "load_average_1m", "cpus"}
LIMIT = {"kafka_python_consume_eps", "spark_noop_eps", "produce_eps", "events", "partitions", "producers", "cpus",
         "load_average_1m"}
RATIOS = {"eo_over_alo", "eo_over_noop", "alo_over_noop"}
BUSY = {"at-most-once", "at-least-once", "exactly-once", "noop", *RATIOS}
THROUGHPUT = {*BUSY, "wall_clock", "busy", "cpu_us_per_event"}


def test_produce_and_all_run_and_print_their_figures(kafka):
    out = produce.main(SMOKE["produce"])
    assert set(out) == PRODUCE, set(out) ^ PRODUCE
    assert (out["sent"], out["labels_sent"], out["failed"], out["timed"]) == (2000, 2000, 0, 2000)
    assert sorted(out["in_topics"].values()) == [2000, 2000]
    assert 0 <= out["p50_send_ms"] <= out["p99_send_ms"] and out["achieved_rate"] > 0

    # `bench all` runs a scenario as a child `python -m bench NAME --json` and gathers its figures
    summary = bench_all.main(["--smoke", "--only", "produce"])
    assert set(summary) == {"figures", "failed", "minutes"} and summary["failed"] == []
    assert {"produce.achieved_rate", "produce.p50_send_ms", "produce.p99_send_ms"} <= set(summary["figures"])


def test_limit_and_throughput_run_on_the_shared_spark_session(kafka, spark):
    out = limit.main(SMOKE["limit"])
    assert set(out) == LIMIT, set(out) ^ LIMIT
    assert out["events"] == 2000 and min(out["kafka_python_consume_eps"], out["spark_noop_eps"], out["produce_eps"]) > 0

    out = throughput.main(SMOKE["throughput"])
    assert set(out) == THROUGHPUT, set(out) ^ THROUGHPUT
    assert set(out["busy"]) == BUSY, set(out["busy"]) ^ BUSY
    assert out["wall_clock"] is True
    # local mode: the JVM's CPU per event of every query
    assert set(out["cpu_us_per_event"]) == BUSY - RATIOS
    assert min(out["cpu_us_per_event"].values()) > 0
    for figures in (out, out["busy"]):
        assert min(figures[q] for q in ("at-most-once", "at-least-once", "exactly-once", "noop")) > 0
        assert abs(figures["eo_over_alo"] - figures["exactly-once"] / figures["at-least-once"]) < 0.01
        assert abs(figures["eo_over_noop"] - figures["exactly-once"] / figures["noop"]) < 0.01
        assert abs(figures["alo_over_noop"] - figures["at-least-once"] / figures["noop"]) < 0.01
    # busy time leaves out the time between batches: never a lower rate than the wall clock's
    assert out["busy"]["exactly-once"] >= out["exactly-once"] * 0.999
    # the benches leave a session they did not start running, with its own state store
    assert spark.range(3).count() == 3
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass") == ROCKSDB_PROVIDER
