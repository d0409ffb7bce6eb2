"""Exactly-once's dedupe, in the stage that reads each Kafka partition (no shuffle).

The `decisions` topic is keyed by txn_id (the fraud job and every harness write it so), so all
copies of a decision sit in one partition. Each batch's Kafka rows are checked against the
decision contract (cardstream.parse.DecisionCheck) and counted, each valid txn_id once, in the task
that reads their partition (a record breaking the contract counted as rejected, never as a
decision), against that partition's ids (the JVM class cardstream.state.PartitionDedupe, in the
engine jar): a copy counts again only when its first
copy's Kafka append time is more than DEDUPE_SECONDS older than the newest record the partition
held before the batch. The ids live beside the query's checkpoint (`<checkpoint>/dedupe/<partition>/`),
a delta file a batch and a snapshot every DEDUPE_SNAPSHOT_DELTAS deltas; a replayed batch finds the
state the batch before it left. A record whose Kafka key is not its txn_id is counted and logged
(`unkeyed`): its copies could sit in another partition.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from infra.config import Settings

log = logging.getLogger("usage")


@dataclass(frozen=True)
class Counted:
    counted: int    # decisions counted (first copies)
    fraud: int      # of them fraud
    copies: int     # copies not counted again
    unkeyed: int    # records whose Kafka key is not their txn_id
    ids: int        # ids the partitions' tables hold after the batch (every partition seen)
    bytes: int      # the memory those tables take
    newest_us: int  # the newest Kafka append time they have seen (µs since the epoch)
    rejected: int = 0   # records breaking the contract: not counted

    def horizon_ms(self, s: Settings) -> int | None:
        """Ids first seen before this are forgotten by the next batch of the newest partition."""
        return None if self.newest_us < 0 else self.newest_us // 1000 - s.dedupe_seconds * 1000


def state_dir(checkpoint: Path) -> Path:
    return Path(checkpoint) / "dedupe"


def count(df, check, checkpoint: Path, batch_id: int, s: Settings, plan=None) -> Counted:
    """One batch of `df` (Kafka rows of `decisions`), each valid txn_id counted once and each record
    breaking the contract (`check`: sources.decision_check) counted as rejected, in the same pass:
    runs a Spark job on `df`'s session. `plan`: the batch's streaming plan (job.stream_plan), or None."""
    jvm = df.sparkSession._jvm
    figures = jvm.cardstream.state.PartitionDedupe.count(df._jdf, check, str(state_dir(checkpoint)), int(batch_id),
                                                         s.dedupe_seconds * 1000, s.dedupe_snapshot_deltas, plan)
    counted = Counted(*(int(x) for x in figures))
    if counted.unkeyed:
        log.warning("%d decisions of batch %d are not keyed by their txn_id: a copy of one in another "
                    "Kafka partition would be counted again", counted.unkeyed, batch_id)
    return counted


def unload_all(spark) -> None:
    """Forget the loaded tables (the files stay): a bench between runs, a test between restarts."""
    spark._jvm.cardstream.state.PartitionDedupe.unloadAll()
