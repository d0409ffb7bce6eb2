"""The pieces the benches and the supervisor now share, without a broker: the LogAppendTime
reader (bench/common.py append_stamped), backlog's summary, the supervisor's round threads, and
the audit's floor of the decisions it keeps."""
from __future__ import annotations

import threading
import time
import types

import pytest

from bench import backlog, common
from pipelines.audit.auditor import Auditor
from pipelines.supervisor.rounds import RoundThread


class Consumer:
    """kafka-python's consumer as append_stamped uses it: iterated, then closed."""

    def __init__(self, records):
        self.records, self.closed = records, False

    def __iter__(self):
        return iter(self.records)

    def close(self):
        self.closed = True


def record(ts_type, ts=5):
    return types.SimpleNamespace(timestamp_type=ts_type, timestamp=ts, value=b"{}")


def fake_consumer(monkeypatch, records):
    made = []

    def consumer(s, topic, **kw):
        made.append((Consumer(records), kw))
        return made[-1][0]

    monkeypatch.setattr(common.kafka_client, "consumer", consumer)
    return made


def test_records_stamped_by_the_broker_are_read_and_the_consumer_closed(monkeypatch):
    made = fake_consumer(monkeypatch, [record(common.LOG_APPEND_TIME, t) for t in (1, 2, 3)])
    for m in common.append_stamped(None, "t", RuntimeError, 100, max_poll_records=7):
        if m.timestamp == 2:
            break
    consumer, kw = made[0]
    assert consumer.closed  # by the break too
    assert kw == {"auto_offset_reset": "earliest", "consumer_timeout_ms": 100, "max_poll_records": 7}


def test_a_record_the_producer_stamped_is_refused_as_the_caller_says(monkeypatch):
    made = fake_consumer(monkeypatch, [record(common.LOG_APPEND_TIME), record(0)])
    with pytest.raises(SystemExit, match="topic t is not stamped"):
        list(common.append_stamped(None, "t", lambda topic: SystemExit(f"topic {topic} is not stamped"), 100))
    assert made[0][0].closed


def test_the_backlog_s_memory_counts_from_the_first_batch(monkeypatch):
    monkeypatch.setattr(backlog, "log", lambda msg: None)
    args = types.SimpleNamespace(minutes=1.0, rate=10.0)
    s = types.SimpleNamespace(max_offsets_per_trigger=100)
    samples = [(1.0, 500, 900, 0), (3.0, 100, 400, 50), (5.0, 120, 500, 600), (7.0, 110, 450, 600)]
    got = backlog.summary(args, s, 600, samples, 1, (3, 300, 600))
    first, peak, last = 100 + 400, 120 + 500, 110 + 450
    assert got["driver_mb"] == {"first_batch": 100, "peak": 120, "last": 110}
    assert got["jvm_mb"] == {"first_batch": 400, "peak": 500, "last": 450}
    assert got["growth_pct"] == round((last - first) / first * 100, 1)
    assert got["peak_over_first_pct"] == round((peak - first) / first * 100, 1)
    assert (got["drain_s"], got["samples"], got["batches"], got["max_batch_rows"]) == (7.0, 4, 3, 300)


class Ticks(RoundThread):
    name = "ticks"

    def _loop(self):
        while not self.stopping():
            self.s.append(threading.current_thread())
            time.sleep(0.01)


def test_a_round_thread_starts_once_as_a_named_daemon():
    seen, stop = [], threading.Event()
    t = Ticks(seen, stop.is_set)
    t.start()
    first = t._thread
    t.start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    first.join(5)
    assert t._thread is first and first.daemon and first.name == "ticks" and seen and set(seen) == {first}


def test_the_decisions_kept_start_at_the_lowest_fold_of_the_usage_cuts():
    cut = lambda fold: types.SimpleNamespace(fold=fold)  # noqa: E731
    auditor = types.SimpleNamespace(cuts={"a": cut({0: 10, 1: 4}), "b": cut({0: 7}), "c": cut({})})
    assert Auditor._lowest_usage_fold(auditor) == {0: 7, 1: 4}
    assert Auditor._lowest_usage_fold(types.SimpleNamespace(cuts={"a": cut(None)})) == {}
