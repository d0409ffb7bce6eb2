"""The pieces the benches and the supervisor now share, without a broker: backlog's summary, the supervisor's round threads, and
the audit's floor of the decisions it keeps."""
from __future__ import annotations

import threading
import time
import types


from bench import backlog
from pipelines.audit.auditor import Auditor
from pipelines.supervisor.rounds import RoundThread


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
