"""A warm standby's dress rehearsal: its job's own query plans run once, to the end, over a few
scratch records, so a takeover's first batch finds the operators, their generated code, the state
store and the Python workers started instead of starting them itself.

The scratch records are shaped as Kafka's rows (key, value, topic, partition, offset, timestamp,
timestampType) and read from a scratch folder, each query with a scratch checkpoint; the
handlers given run the Spark work of the job's sinks and write nothing. The metrics listener is
installed after it, so no rehearsal batch is recorded as one of the job's.
"""
from __future__ import annotations

import logging
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterable

from infra.config import Settings

log = logging.getLogger(__name__)


def kafka_schema():
    # deferred: pyspark (and its JVM) loads only where Spark runs
    from pyspark.sql import types as T

    return T.StructType([T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
                         T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
                         T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
                         T.StructField("timestampType", T.IntegerType())])


def kafka_rows(records: Iterable[tuple[bytes | None, bytes]], appended_ms: int, partitions: int = 3) -> list[tuple]:
    """(key, value) pairs -> rows as Kafka's source gives them, appended at `appended_ms`."""
    stamp = datetime.fromtimestamp(appended_ms / 1000, timezone.utc)
    return [(key, value, "rehearsal", i % partitions, i, stamp, 1) for i, (key, value) in enumerate(records)]


@contextmanager
def scratch_stream(spark, s: Settings, rows: list[tuple], prefix: str):
    """A streaming frame over `rows` (kafka_rows) from a scratch folder, and the folder for the
    rehearsal's checkpoints; both gone afterwards."""
    with scratch_streams(spark, s, prefix, source=[rows]) as (frames, tmp):
        yield frames["source"], tmp


@contextmanager
def scratch_streams(spark, s: Settings, prefix: str, **batches: list[list[tuple]]):
    """Streaming frames, one per keyword, each over its batches of rows (kafka_rows) in order, one
    micro-batch each, from a scratch folder; and the folder for the rehearsal's checkpoints. All
    gone afterwards."""
    s.run_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-rehearsal-", dir=s.run_dir) as tmp:
        schema = kafka_schema()
        frames = {}
        for name, parts in batches.items():
            for rows in parts:
                # one file a batch: one micro-batch each
                spark.createDataFrame(rows, schema).coalesce(1).write.mode("append").parquet(f"{tmp}/{name}")
            frames[name] = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(f"{tmp}/{name}")
        yield frames, tmp


def run_to_end(queries: list, timeout_s: float, cancel: Callable[[], bool] = lambda: False) -> bool:
    """Wait for availableNow queries to finish; stop them all at once when `cancel()` says so (a
    takeover, promoted or on a lapsed lease, must not wait for a warm-up) or at the timeout. True
    when every one ran to its end."""
    deadline = time.monotonic() + timeout_s
    while any(q.isActive for q in queries):
        if cancel() or time.monotonic() > deadline:
            for q in queries:
                q.stop()
            log.warning("the standby's rehearsal stopped before its end (%s)",
                        "taking over or stopping" if cancel() else f"not done in {timeout_s:.0f} s")
            return False
        time.sleep(0.2)
    failed = [q.name for q in queries if q.exception() is not None]
    if failed:
        log.warning("the standby's rehearsal failed in %s", ", ".join(failed))
    return not failed
