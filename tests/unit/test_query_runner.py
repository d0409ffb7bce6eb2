"""The runner's deferred start: the dead-letter query waits for the decisions query's first batch."""
import threading
import time

from pipelines.engine.runner import QueryRunner


class Query:
    """What the runner reads of a StreamingQuery: whether it runs and its last progress."""

    def __init__(self):
        self.isActive = True
        self.lastProgress = None


def runner(deferred=("dlq",), defer_max_s=30.0):
    started = []

    def starter(name):
        def start(restart=False):
            started.append(name)
            return Query()
        return start

    r = QueryRunner("fraud", None, 1, {"main": starter("main"), "dlq": starter("dlq")}, threading.Event(),
                    deferred=deferred, defer_max_s=defer_max_s)
    return r, started


def test_deferred_query_waits_for_the_main_querys_first_batch():
    r, started = runner()
    r.start()
    assert started == ["main"]
    r.start_deferred()
    assert started == ["main"]
    r.queries["main"].lastProgress = {"batchId": 0}
    r.start_deferred()
    assert started == ["main", "dlq"] and set(r.queries) == {"main", "dlq"}
    r.start_deferred()
    assert started == ["main", "dlq"]


def test_deferred_query_starts_anyway_after_the_wait_or_when_the_main_query_stopped():
    r, started = runner(defer_max_s=0.05)
    r.start()
    time.sleep(0.06)
    r.start_deferred()
    assert started == ["main", "dlq"]
    r, started = runner()
    r.start()
    r.queries["main"].isActive = False
    r.start_deferred()
    assert started == ["main", "dlq"]


def test_without_deferred_queries_all_start_at_once():
    r, started = runner(deferred=())
    r.start()
    assert started == ["main", "dlq"]
