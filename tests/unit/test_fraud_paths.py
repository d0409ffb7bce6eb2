"""The two fraud paths' arithmetic (pipelines.audit.paths) and the supervisor's argv for the
real-time guarantee: plain functions on hand-made stamps, each case what a real run produces."""
from __future__ import annotations

import numpy as np
import pytest

from controlplane import faults
from infra.config import load
from pipelines.audit.paths import AFTER_RECOVERY_MS, Stamps, buckets, episode, first
from pipelines.guarantees import RT_POLICIES
from pipelines.supervisor.faults import argv_guarantee, argv_mode, with_guarantee

T0 = 1_800_000_000_000
KILL = T0 + 10_000


def stream(n: int = 300, every: int = 100):
    """n transactions, one every `every` ms from T0 (codes 0..n-1)."""
    return Stamps.of((i, T0 + i * every) for i in range(n))


def at_most_once(tx: Stamps, down_ms: int = 6_000, latency: int = 8):
    """Decided 8 ms after arrival, except what arrived during the restart: skipped."""
    return Stamps.of((c, t + latency) for c, t in zip(tx.codes.tolist(), tx.times.tolist())
                     if not KILL <= t < KILL + down_ms)


def at_least_once(tx: Stamps, down_ms: int = 6_000, latency: int = 8):
    """Decided 8 ms after arrival; at the restart every transaction since T0 (the real-time batch's
    start) is sent again, at the recovery time."""
    back = KILL + down_ms
    out = [(c, t + latency) for c, t in zip(tx.codes.tolist(), tx.times.tolist()) if t < KILL or t >= back]
    out += [(c, back + i) for i, (c, t) in enumerate(zip(tx.codes.tolist(), tx.times.tolist())) if t < back]
    return Stamps.of(out)


def accurate(tx: Stamps, latency: int = 2_100):
    return Stamps.of((c, t + latency) for c, t in zip(tx.codes.tolist(), tx.times.tolist()))


def test_first_keeps_the_earliest_record_per_transaction_and_counts_the_rest():
    f = first(Stamps.of([(3, 50), (1, 10), (3, 20), (3, 90)]))
    assert f.codes.tolist() == [1, 3] and f.first.tolist() == [10, 20] and f.count.tolist() == [1, 3]


def test_at_most_once_skips_what_arrived_during_the_restart_and_the_accurate_path_fills_it():
    tx = stream()
    fig = episode(tx, at_most_once(tx), accurate(tx), KILL, T0, T0 + 300 * 100, KILL + 5_000)
    assert fig["undecided"] == 60 and fig["replayed"] == 0             # 6 s at 10 tx/s
    assert fig["recovered_at"] == KILL + 6_000 + 8 and fig["down_ms"] == 6_008
    assert fig["p99_after_recovery_ms"] == 8                            # no backlog: the fast path stays fast
    assert fig["filled_by_accurate"] == 60 and fig["accurate_max_ms"] == 2_100


def test_at_least_once_replays_and_pays_in_latency_after_recovery():
    tx = stream()
    fig = episode(tx, at_least_once(tx), accurate(tx), KILL, T0, T0 + 300 * 100, KILL + 5_000)
    assert fig["undecided"] == 0 and fig["filled_by_accurate"] == 0
    assert fig["replayed"] == 100                                       # decided before the kill, sent again
    assert fig["recovered_at"] == KILL + 6_000
    assert fig["p99_after_recovery_ms"] >= 15_000                       # the backlog from T0, decided at recovery


def test_a_gap_the_accurate_path_has_not_reached_is_not_filled():
    tx = stream()
    acc = Stamps.of((c, t + 2_000) for c, t in zip(tx.codes.tolist(), tx.times.tolist()) if t < KILL + 3_000)
    fig = episode(tx, at_most_once(tx), acc, KILL, T0, T0 + 300 * 100, KILL + 5_000)
    assert (fig["undecided"], fig["filled_by_accurate"]) == (60, 30)


def test_recovery_is_the_restarted_query_s_first_decision_not_the_dying_one_s_last():
    tx = stream()
    rt = Stamps.concat([at_most_once(tx), Stamps.of([(99, KILL + 9)])])   # the killed JVM's last append
    fig = episode(tx, rt, accurate(tx), KILL, T0, T0 + 300 * 100, KILL + 5_000)
    assert fig["recovered_at"] == KILL + 6_008 and fig["p99_after_recovery_ms"] == 8


def test_no_decision_after_the_kill_is_no_recovery_yet():
    tx = stream()
    rt = Stamps.of((c, t + 8) for c, t in zip(tx.codes.tolist(), tx.times.tolist()) if t < KILL)
    fig = episode(tx, rt, accurate(tx), KILL, KILL - 1_000, T0 + 300 * 100, None)
    assert fig["recovered_at"] is None and fig["down_ms"] is None and fig["p99_after_recovery_ms"] is None
    assert fig["undecided"] == 200 and fig["transactions"] == 210


def test_the_minute_after_recovery_ends_after_a_minute():
    tx = stream(2_000)
    rt = at_most_once(tx)
    late = Stamps.of([(0, KILL + 6_008 + AFTER_RECOVERY_MS + 5)])       # a record past the window
    both = Stamps.concat([rt, late])
    assert episode(tx, both, accurate(tx), KILL, T0, T0 + 200_000, KILL + 5_000)["p99_after_recovery_ms"] == 8


def test_buckets_per_path_with_undecided_only_once_settled():
    tx = stream()
    rows = buckets(tx, at_most_once(tx), accurate(tx), T0, settled_before=T0 + 20_000, bucket_ms=5_000)
    rt = {r["bucket"]: r for r in rows if r["path"] == "real-time"}
    st = {r["bucket"]: r for r in rows if r["path"] == "stateful"}
    assert sorted(rt) == sorted(st) == [T0 + k * 5_000 for k in range(6)]
    assert rt[T0 + 10_000]["decided"] == 0 and rt[T0 + 10_000]["undecided"] == 50
    assert rt[T0 + 10_000]["filled"] == 50 and rt[T0 + 15_000]["undecided"] == 10
    assert rt[T0]["p99_ms"] == 8 and st[T0]["p99_ms"] == 2_100 and st[T0]["undecided"] == 0
    assert rt[T0 + 20_000]["undecided"] is None and rt[T0 + 20_000]["filled"] is None   # not settled yet


def test_buckets_count_duplicates_and_judge_a_path_from_its_start_only():
    tx = stream()
    rows = buckets(tx, at_least_once(tx), accurate(tx), T0, T0 + 30_000, 5_000,
                   starts={"real-time": T0 + 15_000, "stateful": None})
    assert {r["path"] for r in rows} == {"real-time"} and min(r["bucket"] for r in rows) == T0 + 15_000
    rows = buckets(tx, at_least_once(tx), accurate(tx), T0, T0 + 30_000, 5_000)
    assert sum(r["duplicated"] for r in rows if r["path"] == "real-time") == 100


def test_fast_alerts_confirmed_by_the_stateful_path_only_once_it_has_decided_them():
    tx = stream(100)  # 10 s of arrivals, two 5 s slices
    rt = Stamps(tx.codes, tx.times + 8, np.isin(tx.codes, [1, 2, 3, 60, 61]))
    # the stateful path flags 2, 3 and 60, and has not decided 61 yet
    acc_codes = tx.codes[tx.codes != 61]
    acc = Stamps(acc_codes, acc_codes * 100 + T0 + 2_100, np.isin(acc_codes, [2, 3, 60, 70]))
    rows = {(r["path"], r["bucket"]): r for r in buckets(tx, rt, acc, T0, T0 + 20_000, 5_000)}
    first_slice, second = rows[("real-time", T0)], rows[("real-time", T0 + 5_000)]
    assert (first_slice["alerts"], first_slice["confirmed"]) == (3, 2)   # 1 not confirmed
    assert (second["alerts"], second["confirmed"]) == (1, 1)             # 61 not checked yet
    assert rows[("stateful", T0)]["alerts"] is None
    # without the flags (an older index) nothing is claimed
    plain = buckets(tx, Stamps(rt.codes, rt.times), acc, T0, T0 + 20_000, 5_000)
    assert all(r["alerts"] is None and r["confirmed"] is None for r in plain)


def test_the_supervisor_puts_the_guarantee_in_the_fraud_job_s_arguments():
    s = load({})
    argv = ["python", "-m", "pipelines.fraud", "--mode", "realtime", "--guarantee=at-least-once"]
    assert argv_mode(argv, s) == "realtime" and argv_guarantee(argv, s) is RT_POLICIES["at-least-once"]
    changed = with_guarantee(argv, RT_POLICIES["at-most-once"])
    assert changed == ["python", "-m", "pipelines.fraud", "--mode", "realtime", "--guarantee", "at-most-once"]
    assert with_guarantee(changed, RT_POLICIES["at-least-once"])[-2:] == ["--guarantee", "at-least-once"]
    assert argv_mode(["python"], s) == "microbatch" and argv_guarantee(["python"], s).name == "at-least-once"
    assert argv_mode(["python"], load({"FRAUD_MODE": "realtime"})) == "realtime"
    # resolved where the supervisor reads it: a name that is no real-time guarantee is refused there
    with pytest.raises(ValueError, match="no real-time guarantee 'exactly-once'"):
        argv_guarantee(["python", "--guarantee", "exactly-once"], s)


def test_the_guarantee_control_is_the_supervisor_s_and_checked_when_issued():
    f = faults.CATALOGUE["set-fraud-guarantee"]
    assert f.executor == faults.SUPERVISOR and f.jobs == ("fraud",) and not f.is_fault
    assert faults.resolve("set-fraud-guarantee", None, {"guarantee": "at-least-once"}) == (
        "fraud", {"guarantee": "at-least-once"})
    for params, said in (({"guarantee": "exactly-once"}, "must be one of at-most-once, at-least-once"),
                         ({}, "needs the parameter 'guarantee'")):
        try:
            faults.resolve("set-fraud-guarantee", None, params)
        except faults.Refused as exc:
            assert said in str(exc)
        else:
            raise AssertionError(params)
