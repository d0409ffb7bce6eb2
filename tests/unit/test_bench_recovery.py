"""bench recovery's figures from batch_progress rows (issue 36 item 3): the promise's query's first
committed batch after the kill, what one batch is, and when its lag is back under one batch."""
from __future__ import annotations

import json
import os
import time

from bench import all as bench_all
from bench.recovery import caught_up, first_committed, lag_at, one_batch

KILL = 100_000
TOPIC = "bench-tx"


def batch(ts: int, rows: int, ends: dict[int, int]) -> dict:
    # as pipelines.engine.metrics records it: a JSON list of Spark's endOffset strings, one per source
    return {"ts": ts, "num_input_rows": rows, "end_offsets": json.dumps([json.dumps({TOPIC: ends})])}


def test_first_committed_batch_with_rows_after_the_kill():
    batches = [batch(KILL - 500, 200, {0: 100}), batch(KILL + 800, 0, {0: 100}), batch(KILL + 4_000, 900, {0: 1000})]
    assert first_committed(batches, KILL)["ts"] == KILL + 4_000
    assert first_committed(batches[:2], KILL) is None


def test_one_batch_is_the_median_of_the_minute_before_the_kill():
    batches = [batch(KILL - 90_000, 5_000, {}), batch(KILL - 3_000, 180, {}), batch(KILL - 2_000, 0, {}),
               batch(KILL - 1_000, 220, {}), batch(KILL - 500, 200, {}), batch(KILL + 10, 9_000, {})]
    assert one_batch(batches, KILL) == 200  # the minute's batches with rows only, none after the kill
    assert one_batch(batches[:1], KILL) is None


def test_caught_up_when_the_lag_at_commit_is_at_most_one_batch():
    # Kafka's head when each batch committed: 200 records a second on two partitions
    def head(ts: int) -> dict[int, int]:
        n = (ts - KILL) // 10 + 1000
        return {0: n // 2, 1: n - n // 2}

    late = batch(KILL + 5_000, 900, {0: 600, 1: 600})    # head 1500: 300 behind
    close = batch(KILL + 7_000, 500, {0: 750, 1: 750})   # head 1700: 200 behind
    assert lag_at(late, TOPIC, head) == 300 and lag_at(close, TOPIC, head) == 200
    assert caught_up([late, close], KILL, TOPIC, head, 200) is close
    assert caught_up([late, close], KILL, TOPIC, head, 199) is None
    assert caught_up([late], KILL + 6_000, TOPIC, head, 10_000) is None  # committed before that kill


def test_the_run_settings_are_not_figures():
    figures = bench_all.flatten({"recovery": {"fraud_s": 4.1, "fraud_caught_up_s": 6.0, "fraud_one_batch_rows": [200],
                                              "settings": {"trigger_seconds": 1.0, "rate": 200}}})
    kept = {k for k in figures if not bench_all.NOT_FIGURES.search(k)}
    assert kept == {"recovery.fraud_s", "recovery.fraud_caught_up_s"}


def test_busy_cores_keeps_its_loops_running_for_the_block_and_stops_them_after():
    """`--busy N`'s load is real (the loops used CPU over the block) and gone once the block ends."""
    from bench.common import busy_cores, cpu_seconds

    with busy_cores(1) as busy:
        deadline = time.monotonic() + 30  # on a loaded machine the loop gets what the others leave
        # right after Popen returns the child's command line can still read empty (261 times in 300 here,
        # two loops beside it): a CI run of 2026-11-30 found no loop
        while not (loops := [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_loop(int(p))]):
            assert time.monotonic() < deadline, "the busy loop never started"
            time.sleep(0.05)
        (pid,) = loops
        while (cpu_seconds(pid) or 0) < 0.2 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert busy["cores"] == 1 and busy["cpu_s"] >= 0.2, busy
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped


def _is_loop(pid: int) -> bool:
    try:  # a process of the machine's may end while it is read
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return cmd[-2:] == [b"while True: pass", b""] and parent == os.getpid()
