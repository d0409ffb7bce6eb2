"""The benchmark runner's plain parts: figures summarised and rendered, latencies from commits, the
latency bench's percentiles and detection quality, and the command line's answers to bad
arguments. No Kafka, no Spark: the scenarios themselves are benchmarks, run with `python -m
bench`, not tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.all import flatten, render_markdown, summarize
from bench.common import commit_latencies, fraud_in, pct, record
from bench.latency import percentile, quality, realtime_figures
from bench.throughput import figures, median_interval, rates
from infra.config import ROOT


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)


def test_flatten_keeps_numeric_leaves_only():
    got = flatten({"a": 1, "b": {"c": 2.5, "d": "x", "e": None, "f": True}, "g": [3, 4]})
    assert got == {"a": 1.0, "b.c": 2.5, "g.0": 3.0, "g.1": 4.0}


def test_summarize_median_spread_and_leaves_out_run_parameters():
    runs = {"peer": [{"ours_eps": 30_000, "quix_eps": 10_000, "events": 300_000},
                     {"ours_eps": 20_000, "quix_eps": 10_000, "events": 300_000},
                     {"ours_eps": 40_000, "quix_eps": 12_000, "events": 300_000}]}
    s = summarize(runs)
    assert s["peer.ours_eps"] == {"median": 30_000, "min": 20_000, "max": 40_000, "n": 3, "spread": 20_000 / 30_000}
    assert "peer.events" not in s


def test_markdown_has_machine_ratios_and_spread():
    runs = {"limit": [{"spark_noop_eps": 100_000}, {"spark_noop_eps": 120_000}, {"spark_noop_eps": 110_000}],
            "peer": [{"ours_eps": 33_000, "quix_eps": 11_000}] * 3}
    md = render_markdown(summarize(runs), {"cores": 2, "Java": "17"},
                         {"command": "python -m bench all --markdown", "date": "today", "minutes": 1.0,
                          "repeat": 3, "quick": True, "failed": ["recovery run 2: timed out"]})
    assert "| cores | 2 |" in md
    assert "| ours_eps | 33,000 | 33,000–33,000 | 0% | 0.30 of spark_noop_eps | 3.00 × quix_eps | 3 |" in md
    assert "| spark_noop_eps | 110,000 | 100,000–120,000 | 18% |" in md
    assert "recovery run 2: timed out" in md and "--quick preset" in md


def test_throughput_wall_clock_counts_the_gaps_between_batches_and_busy_time_does_not():
    # two batches of 300 rows: 1.0 s and 0.5 s of work, the second starting 2.0 s after the first
    progress = [{"numInputRows": 300, "timestamp": "2026-11-25T10:00:00.000Z", "durationMs": {"triggerExecution": 1000}},
                {"numInputRows": 300, "timestamp": "2026-11-25T10:00:02.000Z", "durationMs": {"triggerExecution": 500}}]
    wall, busy = rates(progress)
    assert (round(wall), round(busy)) == (240, 400)  # 600 rows over 2.5 s of clock, over 1.5 s of work
    assert rates([]) == (0.0, 0.0)


def test_throughput_figures_are_medians_with_ratios_in_both_clocks():
    runs = {"noop": [(100.0, 200.0), (120.0, 220.0), (110.0, 210.0)], "at-most-once": [(90.0, 95.0)] * 3,
            "at-least-once": [(80.0, 100.0)] * 3, "exactly-once": [(40.0, 80.0), (60.0, 90.0), (50.0, 85.0)]}
    out = figures(runs)
    assert out["wall_clock"] is True and (out["exactly-once"], out["noop"]) == (50, 110)
    assert (out["eo_over_alo"], out["eo_over_noop"], out["alo_over_noop"]) == (0.625, 0.455, 0.727)
    assert out["busy"] == {"noop": 210, "at-most-once": 95, "at-least-once": 100, "exactly-once": 85,
                           "eo_over_alo": 0.85, "eo_over_noop": 0.405, "alo_over_noop": 0.476}
    assert "cpu_us_per_event" not in out  # not measured (a cluster's executors): not reported
    # each round's own ratios, paired by round: the spread the medians hide
    assert out["rounds"] == {"eo_over_alo": [0.5, 0.75, 0.625], "eo_over_noop": [0.4, 0.5, 0.455],
                             "alo_over_noop": [0.8, 0.667, 0.727]}
    # three rounds: the interval of the median is their extremes, which cover it three times in four
    assert out["median_interval"] == {"eo_over_alo": [0.5, 0.75], "eo_over_noop": [0.4, 0.5],
                                      "alo_over_noop": [0.667, 0.8], "coverage": 0.75}
    one = figures({q: rs[:1] for q, rs in runs.items()})
    assert "rounds" not in one and "median_interval" not in one  # one round: nothing to spread


def test_the_median_s_interval_is_the_narrowest_pair_of_ranks_covering_95_percent():
    assert median_interval([0.9, 0.7, 0.8, 1.0, 0.6]) == (0.6, 1.0, 0.938)  # five: only the extremes, at 15/16
    assert median_interval([float(i) for i in range(6)]) == (0.0, 5.0, 0.969)
    # 32 rounds: ranks 10 and 23 (ranks 11 and 22 cover 1 - 2 P(Binomial(32, 1/2) <= 10) = 0.9499)
    low, high, cover = median_interval([float(i) for i in range(32, 0, -1)])
    assert (low, high, cover) == (10.0, 23.0, 0.98)
    assert median_interval([0.81] * 7) == (0.81, 0.81, 0.984)


def test_throughput_reports_the_jvm_s_cpu_per_event_as_the_median_of_the_rounds():
    runs = {q: [(1.0, 1.0, us), (1.0, 1.0, us * 3), (1.0, 1.0, us * 2)]
            for q, us in (("noop", 1.0), ("at-most-once", 4.0), ("at-least-once", 4.0), ("exactly-once", 5.0))}
    assert figures(runs)["cpu_us_per_event"] == {"noop": 2.0, "at-most-once": 8.0, "at-least-once": 8.0,
                                                 "exactly-once": 10.0}


def test_commit_latencies_pick_the_first_commit_covering_each_record():
    # partition 0: offsets 0..3 stamped at 1000..1003; commit at 1500 covers 0-1, at 2500 covers 2-3
    stamps = [(0, i, 1000 + i) for i in range(4)] + [(1, 0, 1000)]
    commits = [(2500, {0: 4, 1: 1}), (1500, {0: 2})]
    assert sorted(commit_latencies(stamps, commits)) == [499, 500, 1497, 1498, 1500]
    assert commit_latencies(stamps, commits, since_ms=1002) == [1498, 1497]
    assert commit_latencies([(0, 9, 1000)], commits) == []  # never committed: left out
    assert pct([5, 1, 3, 2, 4], 50) == 3 and pct(list(range(1, 101)), 99) == 99 and pct([], 99) is None


def test_generated_records_have_the_truth_the_peer_checks():
    rows = [json.loads(record("decisions", "tx", i, 0)) for i in range(101)]
    assert sum(r["is_fraud"] for r in rows) == fraud_in(101) == 3
    assert json.loads(record("transactions", "tx", 7, 5))["produced_at"] == 5


def test_bench_without_a_scenario_or_with_an_unknown_one_exits_non_zero():
    for args in ((), ("no-such-scenario",)):
        r = run_bench(*args)
        assert r.returncode != 0
        assert "usage: python -m bench SCENARIO" in r.stderr and "limit" in r.stderr and "peer" in r.stderr


def test_bench_all_refuses_bad_arguments_in_one_sentence():
    r = run_bench("all", "--only", "limit,nope")
    assert r.returncode != 0 and "unknown scenario(s) in --only: nope; known:" in r.stderr
    r = run_bench("all", "--repeat", "0")
    assert r.returncode != 0 and "--repeat must be 1 or more" in r.stderr


def test_bench_throughput_refuses_a_negative_warm_up_before_starting_anything():
    r = run_bench("throughput", "--warmup", "-1")
    assert r.returncode != 0 and "--warmup not negative" in r.stderr, r.stderr[-500:]


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([], 50) is None


def test_quality_counts_precision_and_recall_against_labels():
    labels = [{"txn_id": "1", "is_fraud": True, "pattern": "spend-spike"},
              {"txn_id": "2", "is_fraud": True, "pattern": "card-testing"},
              {"txn_id": "3", "is_fraud": False, "pattern": "normal"},
              {"txn_id": "4", "is_fraud": False, "pattern": "bad:bad-json"}]
    decisions = [{"txn_id": "1", "is_fraud": True}, {"txn_id": "2", "is_fraud": False},
                 {"txn_id": "3", "is_fraud": True}]
    q = quality(decisions, labels)
    assert q["precision"] == 0.5 and q["recall"] == 0.5 and q["labelled"] == 3


def test_realtime_figures_use_each_measured_transaction_s_first_decision():
    appended = {"a": 1_000, "b": 2_000, "c": 2_500, "warm": 10}
    records = [({"txn_id": "warm", "decided_at": 20, "profile_age_ms": 9_999}, 30),       # before since
               ({"txn_id": "a", "decided_at": 1_004, "profile_age_ms": 4}, 1_006),
               ({"txn_id": "a", "decided_at": 5_000, "profile_age_ms": 4_000}, 5_010),    # a resend
               ({"txn_id": "b", "decided_at": 2_030, "profile_age_ms": 30}, 2_031),
               ({"txn_id": "c", "decided_at": 2_530}, 2_531),                             # age unknown
               ({"txn_id": "stranger", "decided_at": 1, "profile_age_ms": 1}, 2)]         # not expected
    got = realtime_figures(records, appended, {"a", "b", "c", "warm"}, since_ms=500)
    assert got["profile_age_p99_ms"] == 30 and got["profile_age_unknown"] == 1
    assert got["split_ms"] == {"read_and_score_p50": 30, "read_and_score_p99": 30, "write_p50": 1, "write_p99": 2}


def test_realtime_figures_say_who_decided_and_the_model_s_own_latency():
    """Issue 35 item 3: the model's decisions and the rules' fallbacks counted apart, the model's
    latency apart, the fallbacks per reason with the per-payment details folded."""
    appended = {"a": 1_000, "b": 1_000, "c": 1_000, "d": 1_000, "e": 1_000}
    no_table = "terminal {} has no features from the stateful path yet: decided with the rules (model 0)"
    records = [({"txn_id": "a", "model_version": 2}, 1_005),
               ({"txn_id": "b", "model_version": 2}, 1_009),
               ({"txn_id": "c", "model_version": 0, "model_why": no_table.format("m-17")}, 1_300),
               ({"txn_id": "d", "model_version": 0, "model_why": no_table.format("m-4")}, 1_200),
               ({"txn_id": "e", "model_version": 0}, 1_100),
               ({"txn_id": "a", "model_version": 0, "model_why": no_table.format("m-1")}, 1_900)]  # a resend
    got = realtime_figures(records, appended, set(appended), since_ms=0)
    assert (got["model_decisions"], got["rules_decisions"]) == (2, 3)
    assert (got["model_p50_ms"], got["model_p99_ms"], got["rules_p99_ms"]) == (5, 9, 300)
    assert got["model_why"] == {no_table.format("…"): 2, "no model in use": 1}
    assert got["decided_by_model"] == {"2": 2, "0": 3}


def test_every_scenario_has_a_smoke_size():
    """`bench all --smoke` runs every scenario (issue 37 item 8); one without a SMOKE entry is
    reported as failed there, so a new bench must say its smallest size (`soak` and `all` run alone)."""
    from bench.__main__ import scenarios
    from bench.all import ALONE, SMOKE

    missing = [name for name in scenarios() if name not in ALONE and name not in SMOKE]
    assert missing == [], f"no smoke size in bench/all.py SMOKE for {missing}"


def test_the_dashboard_bench_draws_every_page_the_app_declares():
    from bench.dashboard import APP, pages

    found = pages()
    assert len(found) == 8 and found[0] == "views/overview.py"
    assert all((APP.parent / page).is_file() for page in found)
