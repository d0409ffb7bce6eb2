"""The consistent cut's arithmetic (pipelines.audit.cut): exact lost / replayed / upstream, lag apart."""
from __future__ import annotations

import numpy as np

from pipelines.audit.cut import Application, Partition, figures


def part(ids: list[str], offsets=None, fraud=None, times=None) -> Partition:
    codes = {t: i for i, t in enumerate(sorted(set(ids)))}
    n = len(ids)
    return Partition(np.asarray(offsets if offsets is not None else range(n), dtype=np.int64),
                     np.asarray([codes[t] for t in ids], dtype=np.int64),
                     np.asarray(fraud if fraud is not None else [False] * n, dtype=bool),
                     np.asarray(times if times is not None else [1_000] * n, dtype=np.int64))


def app(batch, start, end, processed, fraud=0, checkpoint="cp"):
    return Application((checkpoint, batch), processed, fraud, {0: (start, end)})


IDS = [f"t{i}" for i in range(10)]


def test_every_record_once_is_exact():
    got = figures({0: part(IDS)}, {0: 0}, {0: 10}, [app(0, 0, 5, 5), app(1, 5, 10, 5)], now_ms=2_000)
    assert (got["truth"], got["observed"], got["lost"], got["duplicated"]) == (10, 10, 0, 0)
    assert got["lag_records"] == 0 and got["lag_seconds"] == 0.0


def test_a_batch_applied_twice_is_replayed_not_upstream():
    apps = [app(0, 0, 5, 5), app(1, 5, 10, 5), app(1, 5, 10, 5)]
    got = figures({0: part(IDS)}, {0: 0}, {0: 10}, apps, now_ms=2_000)
    assert (got["observed"], got["duplicated"], got["replayed"], got["upstream"], got["lost"]) == (15, 5, 5, 0, 0)


def test_a_gap_between_runs_and_a_dropped_batch_are_lost():
    # at-most-once: read [0, 3), was down while 3..5 arrived, restarted at 6; its dropped batch
    # [8, 10) is not an application
    apps = [app(0, 0, 3, 3, checkpoint="run-1"), app(0, 6, 8, 2, checkpoint="run-2")]
    got = figures({0: part(IDS)}, {0: 0}, {0: 10}, apps, now_ms=2_000)
    assert (got["truth"], got["observed"], got["lost"], got["duplicated"]) == (10, 5, 5, 0)


def test_one_id_twice_in_the_input_is_upstream():
    ids = ["a", "b", "c", "a"]
    got = figures({0: part(ids)}, {0: 0}, {0: 4}, [app(0, 0, 4, 4)], now_ms=2_000)
    assert (got["truth"], got["duplicated"], got["upstream"], got["replayed"], got["lost"]) == (3, 1, 1, 0, 0)
    deduped = figures({0: part(ids)}, {0: 0}, {0: 4}, [app(0, 0, 4, 3)], now_ms=2_000)  # exactly-once
    assert (deduped["duplicated"], deduped["lost"]) == (0, 0)


def test_lag_is_reported_apart_and_never_as_lost():
    times = [1_000] * 6 + [5_000, 6_000, 7_000, 8_000]
    got = figures({0: part(IDS, times=times)}, {0: 0}, {0: 6}, [app(0, 0, 6, 6)], now_ms=10_000)
    assert (got["truth"], got["lost"], got["lag_records"], got["lag_seconds"]) == (6, 0, 4, 5.0)
    assert got["committed_offsets"] == {"0": 6}


def test_offsets_with_gaps_from_transaction_markers():
    p = part(["a", "b", "c", "d"], offsets=[0, 2, 4, 6])  # every odd offset is a commit marker
    got = figures({0: p}, {0: 0}, {0: 5}, [app(0, 0, 5, 3)], now_ms=2_000)
    assert (got["truth"], got["observed"], got["lost"], got["lag_records"]) == (3, 3, 0, 1)


def test_fraud_figures_ride_along():
    fraud = [i % 2 == 0 for i in range(10)]
    got = figures({0: part(IDS, fraud=fraud)}, {0: 0}, {0: 10}, [app(0, 0, 10, 10, fraud=5), app(0, 0, 10, 10, fraud=5)],
                  now_ms=2_000)
    assert (got["fraud_truth"], got["fraud_observed"], got["fraud_replayed"], got["fraud_lost"]) == (5, 10, 5, 0)
