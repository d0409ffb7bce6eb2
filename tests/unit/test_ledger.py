"""The sink ledger (`sink_batches`): applied once per checkpoint and batch id, skips recorded, and a
sink refused on a checkpoint its rows do not belong to. Plain SQLite, no Spark."""
from __future__ import annotations

import json

import pytest

from controlplane import ledger
from controlplane.store import transaction


def b(batch_id, checkpoint="cp-a", sink="usage-exactly-once", processed=5, fraud=1):
    return ledger.Batch(sink, checkpoint, batch_id, processed, fraud,
                        start_offsets={"decisions": {"0": 10 * batch_id, "1": 0}},
                        end_offsets={"decisions": {"0": 10 * batch_id + processed, "1": 0}})


def apply(store, batch, epoch=1):
    with transaction(store) as conn:
        return ledger.apply_once(conn, batch, epoch)


def test_apply_once_applies_a_batch_once_per_sink_and_checkpoint(store):
    assert apply(store, b(0)) is True
    assert apply(store, b(0)) is False                       # a replay
    assert apply(store, b(0, checkpoint="cp-b")) is True     # batch 0 of another checkpoint
    assert apply(store, b(0, sink="usage-windows")) is True  # the same batch at another sink
    rows = ledger.batches(store, "usage-exactly-once")
    assert [(r["checkpoint_id"], r["batch_id"], r["outcome"]) for r in rows] == \
           [("cp-a", 0, "applied"), ("cp-a", 0, "skipped"), ("cp-b", 0, "applied")]
    assert rows[1]["reason"] == "replay of a batch already applied" and rows[0]["reason"] is None


def test_a_dropped_or_skipped_batch_does_not_count_as_applied(store):
    with transaction(store) as conn:
        ledger.record(conn, b(4), ledger.DROPPED, 2, "the usage sink rejects writes")
        assert not ledger.was_applied(conn, b(4))
    assert apply(store, b(4)) is True


def test_a_record_keeps_offsets_counts_epoch_and_a_bounded_reason(store):
    with transaction(store) as conn:
        ledger.record(conn, b(2, processed=7, fraud=3), ledger.DROPPED, 9, "x" * 2000)
    [row] = ledger.batches(store, "usage-exactly-once")
    assert json.loads(row["start_offsets"]) == {"decisions": {"0": 20, "1": 0}}
    assert json.loads(row["end_offsets"]) == {"decisions": {"0": 27, "1": 0}}
    assert (row["processed"], row["fraud"], row["epoch"], len(row["reason"])) == (7, 3, 9, 500)
    assert row["ts"] > 0


def test_the_ledger_rolls_back_with_the_effect(store):
    with pytest.raises(RuntimeError):
        with transaction(store) as conn:
            ledger.apply_once(conn, b(0), 1)
            raise RuntimeError("the increment failed")
    assert ledger.batches(store, "usage-exactly-once") == []
    assert apply(store, b(0)) is True  # the batch was never marked applied


def test_check_bound_refuses_a_checkpoint_the_rows_do_not_belong_to(store):
    sink = "usage-exactly-once"
    ledger.check_bound(store, sink, None, "fix it")   # a fresh checkpoint, an empty sink
    apply(store, b(0))
    ledger.check_bound(store, sink, "cp-a", "fix it")  # its own checkpoint
    with pytest.raises(ledger.ForeignCheckpoint) as fresh:
        ledger.check_bound(store, sink, None, "run make clean")
    assert str(fresh.value) == (f"{sink}: the store holds batches of checkpoint cp-a, but the checkpoint "
                                f"is new; run make clean.")
    with pytest.raises(ledger.ForeignCheckpoint, match="holds batches of checkpoint cp-a, but this "
                                                       "checkpoint is cp-b; reset"):
        ledger.check_bound(store, sink, "cp-b", "reset")
    ledger.check_bound(store, "usage-at-least-once", None, "fix it")  # another sink is not bound
    assert ledger.foreign_checkpoints(store, sink, "cp-b") == ["cp-a"]
    assert ledger.foreign_checkpoints(store, sink, "cp-a") == []


def test_only_applied_batches_bind_a_sink_to_its_checkpoint(store):
    with transaction(store) as conn:
        ledger.record(conn, b(0, sink="usage-at-most-once"), ledger.DROPPED, 1, "down")
    ledger.check_bound(store, "usage-at-most-once", None, "fix it")
    ledger.check_bound(store, "usage-at-most-once", "cp-z", "fix it")
