"""Exactly-once's dedupe per Kafka partition (pipelines.usage.dedupe, the JVM class
cardstream.state.PartitionDedupe) on the real session: batches shaped as the Kafka source hands
them (key, value, partition, timestamp), checked against the decision contract and counted against
the ids kept in files beside a checkpoint folder; "a restart" forgets the loaded tables so the next
batch reads the files."""
from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone

import pytest
from py4j.protocol import Py4JJavaError

from pipelines.engine.sources import decision_check
from pipelines.usage import dedupe

T0 = 1_790_000_000_000  # ms


@pytest.fixture
def count(spark, settings, tmp_path):
    """count(batch_id, rows, **settings) -> Counted; rows: (txn_id, fraud, ms after T0[, partition[, key[,
    payload]]]): a decision of that txn_id and fraud flag, appended (and made) at T0 + ms, unless a
    payload is given."""
    check = decision_check(spark, settings)

    def run(batch_id: int, rows: list[tuple], tasks: int = 1, **over):
        data = []
        for r in rows:
            txn, fraud, ms = r[:3]
            partition = r[3] if len(r) > 3 else 0
            key = r[4] if len(r) > 4 else (txn.encode() if txn is not None else None)
            payload = r[5] if len(r) > 5 else json.dumps(
                {"txn_id": txn, "card_id": "c-1", "event_time": T0 + ms, "is_fraud": fraud}).encode()
            data.append((key, payload, partition, datetime.fromtimestamp((T0 + ms) / 1000, timezone.utc)))
        df = spark.createDataFrame(data, "key binary, value binary, partition int, timestamp timestamp")
        df = df.repartition(tasks) if tasks > 1 else df.coalesce(1)
        return dedupe.count(df, check, tmp_path / "checkpoint", batch_id, dataclasses.replace(settings, **over))

    yield run
    dedupe.unload_all(spark)


def files(tmp_path, partition: int = 0) -> list[str]:
    return sorted(p.name for p in (dedupe.state_dir(tmp_path / "checkpoint") / str(partition)).iterdir())


def test_each_txn_id_counts_once_across_batches_and_restarts(spark, count, settings):
    c = count(0, [("a", False, 0), ("bf", True, 1), ("a", False, 2)])
    assert (c.counted, c.fraud, c.copies, c.ids) == (2, 1, 1, 2)
    c = count(1, [("bf", True, 3), ("c", False, 4)])
    assert (c.counted, c.fraud, c.copies) == (1, 0, 1)
    dedupe.unload_all(spark)  # a restart: the ids come back from the files
    c = count(2, [("a", False, 5), ("c", False, 6), ("df", True, 7)])
    assert (c.counted, c.fraud, c.copies, c.ids) == (1, 1, 2, 4)
    # the state's figures for the batch's progress row: every partition's ids, their memory, the newest time
    c = count(3, [("e", False, 8, 1)])
    assert (c.ids, c.newest_us) == (5, (T0 + 8) * 1000) and c.bytes > 0
    assert c.horizon_ms(dataclasses.replace(settings, dedupe_seconds=60)) == T0 + 8 - 60_000


def test_a_replayed_batch_gives_the_answer_it_gave_first(spark, count):
    count(0, [("a", False, 0), ("b", False, 1)])
    first = count(1, [("b", False, 2), ("c", True, 3)])
    assert (first.counted, first.fraud) == (1, 1)
    # batch 1 again (its commit never made it): the state before it, not after it
    assert count(1, [("b", False, 2), ("c", True, 3)]) == first
    dedupe.unload_all(spark)
    assert count(1, [("b", False, 2), ("c", True, 3)]) == first
    assert count(2, [("c", True, 4)]).counted == 0


def test_a_copy_counts_again_only_past_the_retention(count):
    minute = 60_000
    count(0, [("a", False, 0), ("b", False, 0)], dedupe_seconds=60)
    # the newest record before batch 1 is at 0: both first copies are within 60 s of it
    c = count(1, [("a", False, 2 * minute), ("z", False, 2 * minute)], dedupe_seconds=60)
    assert (c.counted, c.copies) == (1, 1)
    # now the newest is 2 min: "b" and "a" (first copies at 0) are past the retention, "z" is not
    c = count(2, [("b", False, 2 * minute + 1), ("a", False, 2 * minute + 2), ("z", False, 2 * minute + 3)],
              dedupe_seconds=60)
    assert (c.counted, c.copies) == (2, 1)


def test_many_records_with_copies_near_and_far_count_as_a_reference_does(spark, count):
    """The dedupe reads ahead a few records (their slots' cache lines) and counts them in order: a
    copy right behind its first, a few records on, far on, in the next batch and after a restart."""
    import random

    rng = random.Random(7)
    seen, batches = set(), []
    for b in range(3):
        rows, ids = [], []
        for i in range(3000):
            r = rng.random()
            if ids and r < 0.1:
                txn = ids[-1]  # right behind
            elif ids and r < 0.2:
                txn = ids[max(0, len(ids) - rng.randint(2, 40))]  # a few records on, within a read-ahead or past it
            elif seen and r < 0.25:
                txn = rng.choice(sorted(seen))  # an earlier batch's
            else:
                txn = f"id-{b}-{i}-" + "x" * rng.randint(0, 70)  # ids of many lengths
            ids.append(txn)
            rows.append((txn, hash(txn) % 7 == 0, b * 10_000 + i, hash(txn) % 2))  # keyed: one partition an id
        batches.append(rows)
        want_new = [t for t in dict.fromkeys(r[0] for r in rows) if t not in seen]
        c = count(b, rows, tasks=1)
        assert (c.counted, c.copies) == (len(want_new), len(rows) - len(want_new))
        assert c.fraud == sum(hash(t) % 7 == 0 for t in want_new)
        seen |= set(want_new)
        if b == 1:
            dedupe.unload_all(spark)


def test_a_record_breaking_the_contract_is_rejected_never_counted(spark, count):
    """The rejects are counted in the dedupe's own pass (no filter, no observed metric): not counted,
    no id kept, no time taken from them (their reasons come from the contract's expressions: see
    tests/kafka/test_usage_rejects_kafka.py)."""
    def bad(**d):
        return json.dumps({"txn_id": "x", "card_id": "c-1", "event_time": T0, "is_fraud": False, **d}).encode()

    no_id = json.dumps({"card_id": "c-1", "event_time": T0, "is_fraud": False}).encode()
    c = count(0, [("a", True, 0), (None, None, 500_000, 0, None, no_id),
                  ("b", False, 600_000, 1, b"b", bad(txn_id="b", card_id="")), ("a", False, 2),
                  (None, None, 3, 1, None, b'{"txn_id": "c",'), ("", True, 4, 0, b"", bad(txn_id="  ")),
                  ("d", False, 5, 0, b"d", bad(txn_id="d", event_time=(T0 + 5) * 1000))])
    assert (c.counted, c.fraud, c.copies, c.rejected) == (1, 1, 1, 5)
    assert c.ids == 1 and c.newest_us == (T0 + 2) * 1000  # the rejects' times are not the partition's
    c = count(1, [("b", False, 5, 1)])  # "b" was rejected before: counted now, as a first copy
    assert (c.counted, c.rejected) == (1, 0)


def test_copies_are_found_per_partition_and_a_record_keyed_otherwise_is_reported(count):
    c = count(0, [("a", False, 0, 0), ("a", False, 1, 1), ("b", False, 2, 1, b"other"), ("b", False, 3, 1)])
    # "a" sits in two partitions (its key would never put it there): counted in each, and the
    # record of "b" keyed "other" is reported
    assert (c.counted, c.copies, c.unkeyed) == (3, 1, 1)


def test_snapshots_bound_the_files_and_rebuild_the_same_ids(spark, count, tmp_path):
    for b in range(7):
        c = count(b, [(f"id-{b}-{i}", i == 0, b * 10 + i) for i in range(3)], dedupe_snapshot_deltas=2)
        assert c.counted == 3
    # a snapshot every two deltas; what came before the previous snapshot is gone
    assert files(tmp_path) == ["3.delta", "3.snapshot", "4.delta", "5.delta", "5.snapshot", "6.delta"]
    dedupe.unload_all(spark)
    c = count(7, [(f"id-{b}-{i}", False, 100 + b) for b in range(7) for i in range(3)], dedupe_snapshot_deltas=2)
    assert (c.counted, c.copies, c.ids) == (0, 21, 21)


def test_a_partition_split_over_two_tasks_is_refused_and_its_batch_can_run_again(count, tmp_path):
    rows = [(f"id-{i}", False, i) for i in range(40)]
    with pytest.raises(Py4JJavaError, match="came in more than one task of batch 0"):
        count(0, rows, tasks=2)
    assert files(tmp_path) == []
    assert count(0, rows).counted == 40
    assert files(tmp_path) == ["0.delta"]


def test_a_cut_short_file_is_named_and_never_leaves_its_partition_locked(spark, count, tmp_path):
    count(0, [("a", False, 0), ("b", False, 1)])
    delta = dedupe.state_dir(tmp_path / "checkpoint") / "0" / "0.delta"
    delta.write_bytes(delta.read_bytes()[:-5])
    dedupe.unload_all(spark)  # a restart: the ids must come back from the files
    for _ in range(2):  # the second attempt meets the same file, not a partition still held by the first
        with pytest.raises(Py4JJavaError, match="0.delta is cut short"):
            count(1, [("c", False, 2)])


def test_a_snapshot_drops_the_expired_ids_and_a_restart_holds_the_rest(spark, count):
    minute = 60_000
    c = count(0, [("a", False, 0), ("b", True, 0)], dedupe_seconds=60, dedupe_snapshot_deltas=1)
    assert (c.counted, c.ids) == (2, 2)
    # batch 1 still holds "a" and "b" (their first copies are within 60 s of the newest before it);
    # its snapshot, at a newest of 2 min, keeps only what the next batch can still match
    c = count(1, [("a", False, 2 * minute), ("c", False, 2 * minute)], dedupe_seconds=60, dedupe_snapshot_deltas=1)
    assert (c.counted, c.copies, c.ids) == (1, 1, 1)  # "a" a copy (its time stays 0); "a" and "b" gone, "c" held
    dedupe.unload_all(spark)
    c = count(2, [("b", True, 2 * minute + 1), ("a", False, 2 * minute + 2), ("c", False, 2 * minute + 3)],
              dedupe_seconds=60, dedupe_snapshot_deltas=1)
    assert (c.counted, c.fraud, c.copies) == (2, 1, 1)  # "b" and "a" count again, "c" is a copy


def test_many_ids_of_every_length_each_count_once(spark, count):
    """Enough ids that some likely share their 32-bit hash (1.7 pairs expected among 120,000): the table then
    tells them apart by their bytes; lengths from 1 to MAX_ID_BYTES, non-ASCII ones among them."""
    from infra.contracts import MAX_ID_BYTES

    ids = [f"{i:x}" + "é" * (i % 5) + "x" * (i % (MAX_ID_BYTES - 20)) for i in range(120_000)]
    assert max(len(t.encode()) for t in ids) <= MAX_ID_BYTES and min(len(t) for t in ids) == 1
    rows = [(t, i % 9 == 0, i % 1000) for i, t in enumerate(ids)]
    c = count(0, rows)
    assert (c.counted, c.fraud, c.copies, c.ids) == (120_000, sum(i % 9 == 0 for i in range(120_000)), 0, 120_000)
    c = count(1, rows[::7] + [("new", False, 1001)])
    assert (c.counted, c.copies) == (1, len(rows[::7]))
