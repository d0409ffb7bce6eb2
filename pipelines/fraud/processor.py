"""The stateful processor Spark runs per card bucket (`transformWithStateInPandas`).

A thin adapter: it reads the bucket's state, hands it and the new rows to
`pipelines.fraud.state.score_bucket`, and writes the new state back. The TTL on the state value
is Spark's; cards idle longer than it are dropped inside the bucket by `score_bucket`, against
the batch's processing time (kept in the offset log, so a replayed batch expires the same cards),
never the worker's wall clock.
"""
from __future__ import annotations

from pipelines.fraud.analyzers import DEFAULT_LIMITS
from pipelines.fraud.state import BUCKET_DDL, score_bucket


def make_processor(ttl_ms: int, limits=None):
    """The StatefulProcessor class instance (built lazily: pyspark is imported only in the job)."""
    from pyspark.sql.streaming import StatefulProcessor

    class BucketScorer(StatefulProcessor):
        """Keyed by card bucket: runs the analyzers over each card's new transactions in event order."""

        def __init__(self, ttl_ms: int, limits):
            self.ttl_ms, self.limits = ttl_ms, limits

        def init(self, handle) -> None:
            self.profiles = handle.getValueState("profiles", BUCKET_DDL, self.ttl_ms)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            frames = list(rows)
            batch = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            stored = self.profiles.get()
            out, state = score_bucket(stored[0] if stored is not None else None, batch,
                                      timerValues.getCurrentWatermarkInMs(),
                                      timerValues.getCurrentProcessingTimeInMs(), self.ttl_ms, self.limits)
            self.profiles.update((state,))
            yield pd.DataFrame(out)

        def close(self) -> None:
            pass

    return BucketScorer(ttl_ms, limits or DEFAULT_LIMITS)
