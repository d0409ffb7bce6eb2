"""The stateful processor Spark runs per card bucket (`transformWithStateInPandas`).

A thin adapter: it reads the map entries of the batch's cards (and no other), hands them and the
new rows to `pipelines.fraud.state.score_cards`, and writes the touched cards back. The TTL is
Spark's, per entry: an update sets a card's expiry to the batch's processing time (kept in the
offset log, so a replayed batch expires the same cards) plus STATE_TTL_MINUTES, and an expired
card reads as absent.
"""
from __future__ import annotations

from pipelines.fraud.analyzers import DEFAULT_LIMITS
from pipelines.fraud.state import CARD_KEY_DDL, PROFILE_DDL, score_cards


def make_processor(ttl_ms: int, limits=None):
    """The StatefulProcessor class instance (built lazily: pyspark is imported only in the job)."""
    from pyspark.sql.streaming import StatefulProcessor

    class BucketScorer(StatefulProcessor):
        """Keyed by card bucket: runs the analyzers over each card's new transactions in event order."""

        def __init__(self, ttl_ms: int, limits):
            self.ttl_ms, self.limits = ttl_ms, limits

        def init(self, handle) -> None:
            self.cards = handle.getMapState("cards", CARD_KEY_DDL, PROFILE_DDL, self.ttl_ms)

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            frames = list(rows)
            batch = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
            stored = {}
            for card in batch["card_id"].unique().tolist():
                row = self.cards.getValue((card,))
                if row is not None:
                    stored[card] = tuple(row)
            out, updated = score_cards(stored, batch, timerValues.getCurrentWatermarkInMs(),
                                       timerValues.getCurrentProcessingTimeInMs(), self.limits)
            for card, row in updated.items():
                self.cards.updateValue((card,), row)
            yield pd.DataFrame(out)

        def close(self) -> None:
            pass

    return BucketScorer(ttl_ms, limits or DEFAULT_LIMITS)
