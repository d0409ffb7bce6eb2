"""The poison-batch rule's pure parts (pipelines/engine/poison.py): when a batch is poison, which of
its records fail on their own, and the source filter that keeps them out."""
from __future__ import annotations

import pytest

from pipelines.engine.poison import (Failure, Recorder, Streaks, exclusion_sql, isolate, reason, signature,
                                     still_ahead)
from pipelines.restarts import Backoff
from pipelines.engine.runner import _backoff

RANGE = ({"tx": {0: 10, 1: 4}}, {"tx": {0: 20, 1: 9}})


def failure(batch=7, error="ValueError: boom", query="fraud", rng=RANGE):
    return Failure(query, batch, rng[0], rng[1], error)


def test_signature_is_the_class_and_the_first_line_of_the_message():
    assert signature(ValueError("bad amount\n  at line 2")) == "ValueError: bad amount"
    assert signature(RuntimeError()) == "RuntimeError: "
    assert reason(KeyError("x")) == "poison batch: KeyError: 'x'"
    assert len(signature(ValueError("x" * 5000))) == 300


def test_three_identical_failures_in_a_row_make_a_batch_poison():
    rule = Streaks(3)
    counts = [rule.observe(failure()) for _ in range(4)]
    assert counts == [1, 2, 3, 4]
    assert [rule.poison(failure(), n) for n in counts] == [False, False, True, True]


@pytest.mark.parametrize("other", [failure(batch=8), failure(error="ValueError: other"),
                                   failure(rng=({"tx": {0: 10}}, {"tx": {0: 21}}))])
def test_a_different_failure_in_between_starts_a_new_streak(other):
    rule = Streaks(3)
    assert [rule.observe(f) for f in (failure(), failure(), other, failure())] == [1, 2, 1, 1]


def test_streaks_are_per_query_and_cleared_after_a_quarantine():
    rule = Streaks(2)
    assert [rule.observe(failure()), rule.observe(failure(query="fraud-dlq")), rule.observe(failure())] == [1, 1, 2]
    rule.clear("fraud")
    assert rule.observe(failure()) == 1


def test_a_failure_with_no_batch_or_no_records_is_never_poison():
    rule = Streaks(1)
    assert not rule.poison(failure(batch=None, rng=({}, {})), 5)
    assert not rule.poison(failure(rng=({}, {"tx": {0: 0}})), 5)
    with pytest.raises(ValueError):
        Streaks(0)


def test_isolate_finds_each_record_that_fails_alone_with_its_exception():
    calls = []

    def check(part):
        calls.append(len(part))
        for x in part:
            if x in (3, 700):
                raise ValueError(f"bad {x}")

    found = isolate(list(range(1000)), check)
    assert [(x, str(e)) for x, e in found] == [(3, "bad 3"), (700, "bad 700")]
    assert len(calls) <= 2 * 2 * 10 + 1  # halves: about 2·log2(n) calls per poison record


def test_isolate_of_a_batch_that_passes_or_fails_only_as_a_whole_blames_nothing():
    assert isolate([1, 2, 3], lambda part: None) == []

    def together(part):
        if {1, 2} <= set(part):
            raise RuntimeError("only together")
    assert isolate([1, 2, 3, 4], together) == []
    assert isolate([], lambda part: 1 / 0) == []


def test_exclusion_sql_keeps_everything_but_the_records():
    assert exclusion_sql([]) is None
    assert exclusion_sql([(1, 9), (0, 12), (1, 3), (1, 9)]) == \
        "NOT ((partition = 0 AND offset IN (12)) OR (partition = 1 AND offset IN (3, 9)))"


def test_still_ahead_drops_records_below_the_committed_offsets():
    assert still_ahead([(0, 4), (0, 5), (1, 2), (2, 0)], {0: 5, 1: 3}) == [(0, 5), (2, 0)]


def test_the_recorder_keeps_the_handler_s_own_exception_and_re_raises_it():
    rec = Recorder()

    def handler(df, batch_id):
        raise KeyError("card")
    with pytest.raises(KeyError):
        rec.guard("fraud", handler)(None, 4)
    batch, exc = rec.take("fraud")
    assert batch == 4 and signature(exc) == "KeyError: 'card'"
    assert rec.take("fraud") is None
    assert rec.guard("fraud", lambda df, b: b + 1)(None, 1) == 2


def test_a_query_that_retries_forever_never_gives_up():
    forever, once = _backoff(forever=True), _backoff()
    assert all(forever.failed() is not None for _ in range(50))
    assert [once.failed() is None for _ in range(6)] == [False] * 5 + [True]
    assert isinstance(forever, Backoff) and forever.cap == 30.0
