"""The windows sink's store side (`pipelines.usage.windows`): panes to windows, a replayed batch
skipped through the sink ledger, sessions merged, the watermark kept. Plain SQLite, no Spark."""
from __future__ import annotations

import pytest

from controlplane import fencing, ledger
from controlplane.store import transaction
from pipelines.usage import windows

BASE = 1_700_000_040_000  # a whole minute
MIN = 60_000


def batch(batch_id: int, checkpoint: str = "windows-query-id") -> ledger.Batch:
    return ledger.Batch(windows.QUERY, checkpoint, batch_id, start_offsets={"decisions": {"0": batch_id}},
                        end_offsets={"decisions": {"0": batch_id + 1}})


def apply(store, epoch, batch_id, fixed=(), sessions=(), late=(), max_event=None, checkpoint="windows-query-id"):
    with fencing.fenced_write(store, windows.JOB, epoch, f"windows batch {batch_id}") as conn:
        return windows.apply_batch(conn, batch(batch_id, checkpoint), list(fixed), list(sessions), list(late),
                                   max_event, 30, epoch)


def test_panes_become_tumbling_and_five_sliding_windows():
    fixed, late = windows.panes_to_windows([(BASE, 3, 1, 0), (BASE + MIN, 2, 0, 4)])
    got = {(w.kind, w.start, w.end): (w.processed, w.fraud) for w in fixed}
    assert got[("tumbling", BASE, BASE + MIN)] == (3, 1)
    assert got[("tumbling", BASE + MIN, BASE + 2 * MIN)] == (2, 0)
    sliding = {k: v for k, v in got.items() if k[0] == "sliding"}
    assert len(sliding) == 6 and all(e - s == 5 * MIN for _, s, e in sliding)
    assert sliding[("sliding", BASE, BASE + 5 * MIN)] == (5, 1)          # holds both panes
    assert sliding[("sliding", BASE - 4 * MIN, BASE + MIN)] == (3, 1)    # the first pane only
    assert sliding[("sliding", BASE + MIN, BASE + 6 * MIN)] == (2, 0)    # the second pane only
    assert {w.key for w in fixed} == {"all"}
    # the 4 late events of the second pane count for its tumbling window, its 5 sliding ones and
    # the session pane; the first pane had none
    assert sorted(late) == sorted([("tumbling", BASE + MIN, 4), ("session", BASE + MIN, 4)]
                                  + [("sliding", BASE + MIN - k * MIN, 4) for k in range(5)])


def test_a_replayed_batch_changes_no_window_and_the_ledger_says_skipped(store):
    epoch = fencing.take_lease(store, windows.JOB)
    row = windows.WindowRow("tumbling", "all", BASE, BASE + MIN, 3, 1)
    sess = windows.WindowRow("session", "card-1", BASE, BASE + 61_000, 2, 0)
    assert apply(store, epoch, 7, [row], [sess], [("tumbling", BASE, 1)], BASE + 1000) is True
    assert apply(store, epoch, 7, [row], [sess], [("tumbling", BASE, 1)], BASE + 1000) is False
    assert [(r["processed"], r["fraud"]) for r in store["windows"].rows] == [(3, 1), (2, 0)]
    assert [r["count"] for r in store["late_events"].rows] == [1]
    rows = ledger.batches(store, windows.QUERY)
    assert [(r["batch_id"], r["outcome"], r["processed"], r["fraud"]) for r in rows] == \
           [(7, "applied", 3, 1), (7, "skipped", 3, 1)]  # the tumbling totals of the batch


def test_a_batch_id_reused_over_another_range_is_refused_and_changes_no_window(store):
    epoch = fencing.take_lease(store, windows.JOB)
    row = windows.WindowRow("tumbling", "all", BASE, BASE + MIN, 3, 1)
    assert apply(store, epoch, 7, [row]) is True
    other = ledger.Batch(windows.QUERY, "windows-query-id", 7, start_offsets={"decisions": {"0": 7}},
                         end_offsets={"decisions": {"0": 19}})
    with pytest.raises(ledger.ReusedBatch, match="usage-windows: batch 7 .*--reset-sink"):
        with fencing.fenced_write(store, windows.JOB, epoch, "windows batch 7") as conn:
            windows.apply_batch(conn, other, [row], [], [], None, 30, epoch)
    assert [(r["processed"], r["fraud"]) for r in store["windows"].rows] == [(3, 1)]
    assert [r["outcome"] for r in ledger.batches(store, windows.QUERY)] == ["applied"]


def test_the_watermark_only_moves_forward_with_the_batches(store):
    epoch = fencing.take_lease(store, windows.JOB)
    apply(store, epoch, 0, max_event=BASE + 90_000)
    with transaction(store) as conn:
        assert windows.current_watermark(conn) == (BASE + 90_000, BASE + 60_000)
    apply(store, epoch, 1, max_event=BASE + 10_000)  # an older batch maximum moves nothing back
    apply(store, epoch, 2)                            # a batch without event times leaves it
    with transaction(store) as conn:
        assert windows.current_watermark(conn) == (BASE + 90_000, BASE + 60_000)


def test_a_fenced_windows_write_changes_nothing(store):
    stale = fencing.take_lease(store, windows.JOB)
    fencing.take_lease(store, windows.JOB)
    with pytest.raises(fencing.FencedError):
        apply(store, stale, 0, [windows.WindowRow("tumbling", "all", BASE, BASE + MIN, 1, 0)])
    assert store["windows"].count == 0 and store["sink_batches"].count == 0


def test_overlapping_sessions_of_a_card_merge(store):
    epoch = fencing.take_lease(store, windows.JOB)
    a = windows.WindowRow("session", "c", BASE, BASE + 70_000, 2, 0)            # events at 0 s, 10 s
    b = windows.WindowRow("session", "c", BASE + 200_000, BASE + 260_000, 1, 1)  # event at 200 s
    other = windows.WindowRow("session", "d", BASE + 65_000, BASE + 125_000, 1, 0)  # another card
    bridge = windows.WindowRow("session", "c", BASE + 65_000, BASE + 205_000, 3, 0)  # 65 s .. 145 s
    apply(store, epoch, 0, sessions=[a, b, other])
    apply(store, epoch, 1, sessions=[bridge])
    rows = sorted((r["key"], r["window_start"], r["window_end"], r["processed"], r["fraud"])
                  for r in store["windows"].rows)
    assert rows == [("c", BASE, BASE + 260_000, 6, 1), ("d", BASE + 65_000, BASE + 125_000, 1, 0)]
