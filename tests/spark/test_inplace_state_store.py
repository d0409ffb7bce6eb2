"""The in-place state store (pipelines/engine/jvm/cardstream/state): the usage windows' state
(USAGE_STATE_STORE), and the table exactly-once's dedupe keeps its ids in.

Driven through Spark's own StateStoreProvider API on the session's JVM, with real files in a
scratch checkpoint folder: what each version holds must be what a fresh provider rebuilds from
the files (deltas, snapshots), an aborted batch must leave nothing behind in memory or on disk,
and a watermark's eviction (removing while iterating) must remove exactly the expired keys.
The same rows as Spark's dedupe operator keeps: a txn_id key, an expiresAtMicros value.
"""
from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest


KEY = '{"type":"struct","fields":[{"name":"txn_id","type":"string","nullable":true,"metadata":{}}]}'
VALUE = '{"type":"struct","fields":[{"name":"expiresAtMicros","type":"long","nullable":false,"metadata":{}}]}'


def key_bytes(txn_id: str) -> bytes:
    """An UnsafeRow of one string field: null bits, (offset << 32 | size), the bytes padded to 8."""
    data = txn_id.encode()
    return struct.pack("<qq", 0, (16 << 32) | len(data)) + data + b"\0" * (-len(data) % 8)


def value_bytes(expires: int) -> bytes:
    return struct.pack("<qq", 0, expires)


class Stores:
    """Providers of one state partition (operator 0, partition 0) under `root`, as Spark makes them."""

    def __init__(self, spark, root: Path, min_deltas: int = 10, retain: int = 100, compact_above: int | None = None,
                 open_wait_ms: int | None = None):
        self.spark, self.root = spark, root
        jvm = spark._jvm
        self.jvm, self.state = jvm, jvm.org.apache.spark.sql.execution.streaming.state
        conf = spark._jsparkSession.sessionState().conf().clone()
        conf.setConfString("spark.sql.streaming.stateStore.minDeltasForSnapshot", str(min_deltas))
        conf.setConfString("spark.sql.streaming.minBatchesToRetain", str(retain))
        empty = getattr(jvm.scala.collection.immutable, "Map$").__getattr__("MODULE$").empty()
        self.conf = self.state.StateStoreConf(conf, empty)
        types = jvm.org.apache.spark.sql.types.DataType
        self.key_schema, self.value_schema = types.fromJson(KEY), types.fromJson(VALUE)
        self.hadoop = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
        if compact_above is not None:
            self.hadoop.setLong(jvm.cardstream.state.InPlaceStateStoreProvider.COMPACT_ABOVE, compact_above)
        if open_wait_ms is not None:
            self.hadoop.setLong(jvm.cardstream.state.InPlaceStateStoreProvider.OPEN_WAIT_MS, open_wait_ms)

    def provider(self):
        p = self.jvm.cardstream.state.InPlaceStateStoreProvider()
        sid = self.state.StateStoreId(str(self.root), 0, 0, "default")
        p.init(sid, self.key_schema, self.value_schema, self.state.NoPrefixKeyStateEncoderSpec(self.key_schema),
               False, self.conf, self.hadoop, False, self.jvm.scala.Option.empty())
        return p

    def row(self, data: bytes, fields: int = 1):
        row = self.jvm.org.apache.spark.sql.catalyst.expressions.UnsafeRow(fields)
        row.pointTo(bytearray(data), len(data))
        return row


def open_store(stores: Stores, provider, version: int):
    return provider.getStore(version, stores.jvm.scala.Option.empty(), False, False)


def put(stores, store, txn_id: str, expires: int) -> None:
    store.put(stores.row(key_bytes(txn_id)), stores.row(value_bytes(expires)), "default")


def remove(stores, store, txn_id: str) -> None:
    store.remove(stores.row(key_bytes(txn_id)), "default")


def contents(store) -> dict[str, int]:
    """{txn_id: expiresAtMicros} of every entry, by the store's iterator."""
    out, it = {}, store.iterator("default")
    while it.hasNext():
        pair = it.next()
        out[pair.key().getUTF8String(0).toString()] = pair.value().getLong(0)
    return out


def files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "0" / "0").iterdir() if not p.name.startswith("."))


def filled(stores: Stores, n: int):
    """A provider whose version 1 holds tx-0 .. tx-(n-1), each expiring at its number."""
    p = stores.provider()
    s = open_store(stores, p, 0)
    for i in range(n):
        put(stores, s, f"tx-{i}", i)
    assert s.commit() == 1
    return p


@pytest.fixture
def stores(spark, tmp_path):
    return Stores(spark, tmp_path / "state")


def test_each_committed_version_is_what_a_fresh_provider_rebuilds_from_the_files(stores):
    p = filled(stores, 1_200)  # past several resizes of the table
    s = open_store(stores, p, 1)
    put(stores, s, "tx-5", 500)  # replaced
    for i in range(0, 1_200, 3):
        remove(stores, s, f"tx-{i}")
    remove(stores, s, "never-there")
    assert s.commit() == 2
    expected = {f"tx-{i}": (500 if i == 5 else i) for i in range(1_200) if i % 3}
    s = open_store(stores, p, 2)
    assert contents(s) == expected and s.metrics().numKeys() == len(expected)
    assert s.get(stores.row(key_bytes("tx-5")), "default").getLong(0) == 500
    assert s.get(stores.row(key_bytes("tx-3")), "default") is None
    s.abort()

    fresh = stores.provider()  # another executor, or the job restarted: only the files
    assert contents(open_store(stores, fresh, 2)) == expected
    assert len(contents(open_store(stores, stores.provider(), 1))) == 1_200
    assert files(stores.root) == ["1.delta", "2.delta"]


def test_an_aborted_batch_leaves_nothing_behind(stores):
    p = stores.provider()
    s = open_store(stores, p, 0)
    for t in ("a", "b", "c"):
        put(stores, s, t, 1)
    s.commit()
    s = open_store(stores, p, 1)
    put(stores, s, "a", 99)      # replaced
    remove(stores, s, "b")       # removed
    put(stores, s, "d", 1)       # added
    put(stores, s, "d", 2)       # and replaced again
    remove(stores, s, "c")
    put(stores, s, "c", 7)       # removed, then put back
    s.abort()
    assert not s.hasCommitted()

    s = open_store(stores, p, 1)  # the same version again, from memory
    assert contents(s) == {"a": 1, "b": 1, "c": 1}
    put(stores, s, "e", 1)
    s.commit()
    assert contents(open_store(stores, stores.provider(), 2)) == {"a": 1, "b": 1, "c": 1, "e": 1}


def test_a_store_never_committed_nor_aborted_is_rolled_back_at_the_next_batch(stores):
    p = stores.provider()
    s = open_store(stores, p, 0)
    put(stores, s, "a", 1)
    s.commit()
    dead = open_store(stores, p, 1)
    put(stores, dead, "lost", 1)  # a task that died without its store's abort
    s = open_store(stores, p, 1)
    assert contents(s) == {"a": 1}
    with pytest.raises(Exception, match="cannot be updated"):
        put(stores, dead, "x", 1)


def test_a_retried_batch_rebuilds_the_version_before_from_the_files(stores):
    p = stores.provider()
    for v, t in enumerate(("a", "b", "c")):
        s = open_store(stores, p, v)
        put(stores, s, t, v)
        s.commit()
    # batch 2 is run again (its output lost): the store must hold version 2, not 3
    s = open_store(stores, p, 2)
    assert contents(s) == {"a": 0, "b": 1}
    put(stores, s, "c2", 2)
    s.commit()
    assert contents(open_store(stores, stores.provider(), 3)) == {"a": 0, "b": 1, "c2": 2}


def test_maintenance_snapshots_then_drops_files_no_retained_version_needs(spark, tmp_path):
    stores = Stores(spark, tmp_path / "state", min_deltas=3, retain=2)
    p = stores.provider()
    for v in range(8):
        s = open_store(stores, p, v)
        put(stores, s, f"tx-{v}", v)
        if v:
            remove(stores, s, f"tx-{v - 1}")
        s.commit()
        p.doMaintenance()  # between batches, as Spark's maintenance thread
    names = files(stores.root)
    assert any(n.endswith(".snapshot") for n in names)
    assert "1.delta" not in names  # older than the newest snapshot the retained versions need
    fresh = stores.provider()
    assert contents(open_store(stores, fresh, 8)) == {"tx-7": 7}
    assert contents(open_store(stores, stores.provider(), 7)) == {"tx-6": 6}


def test_eviction_removes_while_iterating_exactly_the_expired_keys(stores):
    p = filled(stores, 1_000)
    s = open_store(stores, p, 1)
    it = s.iterator("default")
    while it.hasNext():  # StreamingDeduplicateWithinWatermarkExec.evictDupInfoFromState
        pair = it.next()
        if pair.value().getLong(0) < 600:
            s.remove(pair.key(), "default")
    s.commit()
    assert contents(open_store(stores, stores.provider(), 2)) == {f"tx-{i}": i for i in range(600, 1_000)}


def test_a_torn_delta_file_is_a_clear_error_not_an_empty_state(stores):
    p = filled(stores, 100)
    delta = stores.root / "0" / "0" / "1.delta"
    delta.write_bytes(delta.read_bytes()[: len(delta.read_bytes()) // 2])
    with pytest.raises(Exception, match="cannot load version 1"):
        open_store(stores, stores.provider(), 1)
    delta.unlink()
    with pytest.raises(Exception, match="the delta of 1 is missing"):
        open_store(stores, stores.provider(), 1)


def test_a_table_mostly_dead_is_compacted_between_batches_and_rows_handed_out_stay_valid(spark, tmp_path):
    stores = Stores(spark, tmp_path / "state", compact_above=1)
    p = filled(stores, 100)
    s = open_store(stores, p, 1)
    kept = s.get(stores.row(key_bytes("tx-95")), "default")  # a row pointed into the old slab
    for i in range(90):
        remove(stores, s, f"tx-{i}")
    put(stores, s, "tx-99", 990)
    s.commit()
    before = s.metrics().memoryUsedBytes()
    s = open_store(stores, p, 2)  # compacted here: more dead bytes than live ones
    assert s.metrics().memoryUsedBytes() < before
    assert contents(s) == {**{f"tx-{i}": i for i in range(90, 99)}, "tx-99": 990}
    assert kept.getLong(0) == 95
    put(stores, s, "new", 1)
    s.abort()  # rolled back over the compacted table
    s = open_store(stores, p, 2)
    put(stores, s, "tx-90", 900)
    s.commit()
    assert contents(open_store(stores, stores.provider(), 3)) == {
        **{f"tx-{i}": i for i in range(91, 99)}, "tx-90": 900, "tx-99": 990}


class Task:
    """A Spark task's context on a thread of its own (PySpark pins a JVM thread to each Python
    thread): `run(f)` calls f there, as code inside that task."""

    def __init__(self, stores: Stores):
        self.tasks = getattr(stores.jvm.org.apache.spark, "TaskContext$").__getattr__("MODULE$")
        self.context = self.tasks.empty()

    def run(self, f):
        out = {}

        def body():
            self.tasks.setTaskContext(self.context)
            try:
                out["value"] = f()
            except Exception as exc:  # noqa: BLE001 - handed to the caller
                out["error"] = exc
            finally:
                self.tasks.unset()

        thread = threading.Thread(target=body)
        thread.start()
        thread.join(60)
        if "error" in out:
            raise out["error"]
        return out.get("value")


def opened_by_a_task(stores, p, version: int):
    """A store of `version` opened and updated ("task-put") by a task that is still running."""
    task = Task(stores)

    def work():
        s = open_store(stores, p, version)
        put(stores, s, "task-put", 1)
        return s

    return task, task.run(work)


def test_a_second_batch_waits_for_a_running_task_s_store_then_sees_its_commit(spark, tmp_path):
    stores = Stores(spark, tmp_path / "state")
    p = filled(stores, 3)
    _, running = opened_by_a_task(stores, p, 1)
    threading.Timer(1.0, running.commit).start()  # the task commits a second later
    t0 = time.monotonic()
    s = open_store(stores, p, 2)  # no task here: waits for the running one
    assert time.monotonic() - t0 >= 0.8
    assert contents(s) == {"tx-0": 0, "tx-1": 1, "tx-2": 2, "task-put": 1}


def test_a_task_that_ends_without_committing_leaves_nothing_and_frees_the_store(spark, tmp_path):
    stores = Stores(spark, tmp_path / "state")
    p = filled(stores, 3)
    task, running = opened_by_a_task(stores, p, 1)
    threading.Timer(1.0, lambda: task.context.markTaskCompleted(stores.jvm.scala.Option.empty())).start()
    s = open_store(stores, p, 1)  # waits for the task to end; its completion listener aborts its store
    assert contents(s) == {"tx-0": 0, "tx-1": 1, "tx-2": 2}
    assert not running.hasCommitted()


def test_a_store_a_task_keeps_open_too_long_is_a_clear_error(spark, tmp_path):
    stores = Stores(spark, tmp_path / "state", open_wait_ms=300)
    p = filled(stores, 3)
    task, running = opened_by_a_task(stores, p, 1)
    with pytest.raises(Exception, match="version 1 is still being updated by task"):
        open_store(stores, p, 1)
    running.commit()  # the running task was never disturbed
    assert contents(open_store(stores, stores.provider(), 2))["task-put"] == 1
