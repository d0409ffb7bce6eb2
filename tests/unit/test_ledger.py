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


def test_a_batch_id_reused_over_another_range_is_refused_not_skipped(store):
    """A checkpoint restored from a backup (or with offsets/commits partly deleted) plans batch 3
    again over another range: skipping it as a replay would lose its records silently."""
    assert apply(store, b(2)) and apply(store, b(3))
    assert apply(store, b(3)) is False, "the same batch over the same range is a replay: skipped"
    later = ledger.Batch("usage-exactly-once", "cp-a", 3, 9, 0, start_offsets={"decisions": {"0": 25, "1": 0}},
                         end_offsets={"decisions": {"0": 41, "1": 4}})
    with pytest.raises(ledger.ReusedBatch) as refused:
        apply(store, later)
    said = str(refused.value)
    assert said == ("usage-exactly-once: batch 3 of checkpoint cp-a now covers decisions 0:25-41, 1:0-4, but the "
                    "store applied batch 3 of that checkpoint over decisions 0:30-35, 1:0-0, so the checkpoint was "
                    "restored from a backup or lost part of its offset and commit logs and its batch ids no longer "
                    "name what the store holds; run `make clean` to clear the store and the checkpoints together.")
    assert said.count(". ") == 0 and said.endswith("."), "one sentence"
    # the refusal wrote nothing: the ledger still says batch 3 once applied and once skipped
    assert [(r["batch_id"], r["outcome"]) for r in ledger.batches(store, "usage-exactly-once")] == \
           [(2, "applied"), (3, "applied"), (3, "skipped")]
    # the same end offsets from another start are another range too (the start is compared as well)
    with pytest.raises(ledger.ReusedBatch):
        apply(store, ledger.Batch("usage-exactly-once", "cp-a", 3, 5, 0, start_offsets={"decisions": {"0": 29, "1": 0}},
                                  end_offsets={"decisions": {"0": 35, "1": 0}}))


def test_a_replay_read_back_from_the_store_matches_its_own_offsets(store):
    """The stored JSON has string partitions; the checkpoint's log gives ints: the same range."""
    stored = ledger.Batch("usage-windows", "cp-w", 0, 5, 0, start_offsets={"decisions": {0: 0, 1: 7}},
                          end_offsets={"decisions": {0: 5, 1: 9}})
    assert apply(store, stored) is True
    again = ledger.Batch("usage-windows", "cp-w", 0, 5, 0, start_offsets={"decisions": {"0": 0, "1": 7}},
                         end_offsets={"decisions": {"1": 9, "0": 5}})
    assert apply(store, again) is False
    # a range that is not known on one side (no offset log to read) proves nothing: skipped as before
    assert apply(store, ledger.Batch("usage-windows", "cp-w", 0, 5, 0)) is False


def test_a_new_batch_id_below_one_already_applied_is_refused(store):
    """Batch 4 was never applied (it had no rows), but the store holds batches up to 6 of this
    checkpoint: a restored checkpoint handing batch 4 over records that batches 5 and 6 applied
    would count them twice."""
    for i in (2, 3, 5, 6):
        assert apply(store, b(i))
    with pytest.raises(ledger.ReusedBatch, match=r"^usage-exactly-once: checkpoint cp-a hands batch 4 \(decisions "
                                                 r"0:40-45, 1:0-0\), but the store applied its batches up to 6 "
                                                 r"already, .*; run `make clean`"):
        apply(store, b(4))
    assert apply(store, b(7)) is True and apply(store, b(0, checkpoint="cp-b")) is True
