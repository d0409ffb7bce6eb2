"""Exactly-once's dedupe: Spark's own `dropDuplicatesWithinWatermark` on txn_id, its keys in the
session's state store (RocksDB, changelog checkpointing), versioned with the query's commit log.

Why Spark's operator and not one of our own: its state is loaded and committed with the batch it
belongs to (a replayed batch finds the version the batch before it left, on any Hadoop file
system the checkpoint lives on: local, HDFS, an object store), the state store coordinator places
each partition's state and refuses a second active instance in one application, and the state
data source reads it for inspection (`spark.read.format("statestore")`).

The event time is the record's Kafka append time (`kafka_ts`; every topic is created with
LogAppendTime), with a watermark delay of DEDUPE_SECONDS / 2: Spark keeps a txn_id until the
watermark (the newest append time of the batches before, less the delay) passes its first copy's
append time plus the delay, so a copy counts again only when its first copy was appended
DEDUPE_SECONDS or more before the newest record of the batches before it: the horizon the audit
assumes (AUDIT_HORIZON_MINUTES). A record appended more than DEDUPE_SECONDS / 2 behind that
newest record (a Kafka partition read that far behind the others) is late to Spark's operator and
not counted: its progress reports it (`numRowsDroppedByWatermark`, the dashboard's rows dropped
late) and the audit counts it lost.

A checkpoint written by the engine this replaced (its ids in `<checkpoint>/dedupe/`, or a state
store class of ours named in the offset log) is refused at start (`private_state`): Spark would
start it without the ids it remembered, or fail to load the store class on every restart.
"""
from __future__ import annotations

from infra import storage
from infra.config import Settings
from pipelines.engine import checkpoints

# what the engine before Spark's state left in a checkpoint
PRIVATE_STATE_DIR = "dedupe"
PRIVATE_PROVIDER_PREFIX = "cardstream.state."


def watermark_delay_ms(s: Settings) -> int:
    """Half the horizon: Spark remembers a key for twice its watermark delay (see the docstring)."""
    return s.dedupe_seconds * 500


def deduplicated(decisions, s: Settings):
    """Parsed decisions (with `kafka_ts`) -> each txn_id once within the horizon, by Spark's
    stateful operator."""
    return (decisions.withWatermark("kafka_ts", f"{watermark_delay_ms(s)} milliseconds")
            .dropDuplicatesWithinWatermark(["txn_id"]))


def private_state(checkpoint) -> str | None:
    """Why `checkpoint` (a Path or an infra.storage Location) cannot be resumed on Spark's state
    (one sentence's middle), or None."""
    ids = checkpoints.resolve(checkpoint) / PRIVATE_STATE_DIR
    found = storage.stat(ids)
    if found is not None and found.is_dir:
        return f"it holds the ids of CardStream's former dedupe engine ({ids})"
    provider = checkpoints.state_provider(checkpoint)
    if provider and provider.startswith(PRIVATE_PROVIDER_PREFIX):
        return f"its state is kept by {provider}, a store class CardStream no longer has"
    return None
