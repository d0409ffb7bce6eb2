"""The sink rules of each guarantee, on a real SQLite store, without Spark."""
from __future__ import annotations

import pytest

from controlplane import fencing
from pipelines import guarantees as g
from pipelines.guarantees import BatchResult, SinkDown, SinkGate


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def epoch(store):
    return fencing.take_lease(store, "usage")


def test_exactly_once_skips_a_replayed_batch(store, epoch):
    assert g.write_exactly_once(store, BatchResult(0, 10, 2), epoch) is True
    assert g.write_exactly_once(store, BatchResult(1, 5, 1), epoch) is True
    assert g.write_exactly_once(store, BatchResult(1, 5, 1), epoch) is False  # replay after a crash
    assert g.counts(store)["exactly-once"] == {"processed": 15, "fraud": 3}
    assert [r["batch_id"] for r in store["usage_applied_batches"].rows] == [0, 1]


def test_at_least_once_applies_a_replay_twice(store, epoch):
    g.write_at_least_once(store, BatchResult(0, 10, 2), epoch)
    g.write_at_least_once(store, BatchResult(0, 10, 2), epoch)
    assert g.counts(store)["at-least-once"] == {"processed": 20, "fraud": 4}


def test_sink_down_drops_at_most_once_and_fails_the_others(store, epoch):
    clock = Clock()
    gate = SinkGate(clock=clock)
    gate.take_down(5)
    assert g.write_at_most_once(store, BatchResult(3, 7, 1), epoch, gate) is False
    with pytest.raises(SinkDown):
        g.write_at_least_once(store, BatchResult(3, 7, 1), epoch, gate)
    with pytest.raises(SinkDown):
        g.write_exactly_once(store, BatchResult(3, 7, 1), epoch, gate)
    assert g.counts(store) == {}
    assert g.dropped(store) == {"batches": 1, "processed": 7, "fraud": 1}
    assert store["usage_applied_batches"].count == 0  # a failed exactly-once write leaves no batch id
    clock.t += 5
    assert g.write_at_most_once(store, BatchResult(4, 2, 0), epoch, gate) is True
    assert g.write_exactly_once(store, BatchResult(3, 7, 1), epoch, gate) is True
    assert g.counts(store) == {"at-most-once": {"processed": 2, "fraud": 0},
                               "exactly-once": {"processed": 7, "fraud": 1}}


def test_at_most_once_drops_a_batch_that_failed_upstream(store, epoch):
    assert g.write_at_most_once(store, BatchResult(0, 4, 0), epoch, reason="task failed") is False
    assert g.dropped(store)["processed"] == 4 and g.counts(store) == {}


def test_a_stale_epoch_is_fenced_for_every_guarantee(store, epoch):
    newer = fencing.take_lease(store, "usage")
    assert newer > epoch
    for writer in g.WRITERS.values():
        with pytest.raises(fencing.FencedError):
            writer(store, BatchResult(0, 1, 0), epoch)
    assert g.counts(store) == {} and store["usage_applied_batches"].count == 0
    g.write_exactly_once(store, BatchResult(0, 1, 0), newer)
    assert g.counts(store)["exactly-once"]["processed"] == 1


def test_retry_until_written_waits_out_the_outage():
    attempts, sleeps = [], []

    def write():
        attempts.append(1)
        if len(attempts) < 4:
            raise SinkDown("down")
        return "ok"

    assert g.retry_until_written(write, sleep=sleeps.append, first_delay=0.1, max_delay=0.3) == "ok"
    assert sleeps == [0.1, 0.2, 0.3]
    with pytest.raises(SinkDown):
        g.retry_until_written(lambda: (_ for _ in ()).throw(SinkDown("x")), stop=lambda: True)


def test_other_errors_are_not_retried():
    def write():
        raise ValueError("disk full")

    with pytest.raises(ValueError):
        g.retry_until_written(write, sleep=lambda _: None)
