"""The fraud job's stateful processor through PySpark's own TwsTester: the same `handleInputRows`
Spark calls per card bucket, with in-memory state instead of RocksDB (no SparkSession)."""
from __future__ import annotations

import pandas as pd
from pyspark.sql.streaming import TwsTester

from pipelines.fraud.processor import make_processor
from pipelines.fraud.state import TXN_COLUMNS

T0 = 1_700_000_000_000
MINUTE = 60_000


def rows(card: str, amounts: list[int], start: int, step: int = 10 * MINUTE, prefix: str = "t") -> pd.DataFrame:
    return pd.DataFrame([{"txn_id": f"{prefix}-{card}-{i}", "card_id": card, "merchant_id": "m",
                          "amount_cents": a, "lat": 48.85, "lon": 2.35, "event_time": start + i * step,
                          "produced_at": start + i * step, "offset": i} for i, a in enumerate(amounts)],
                        columns=[*TXN_COLUMNS, "offset"])


def test_profiles_persist_in_the_bucket_state_between_batches_one_map_entry_per_card():
    tester = TwsTester(make_processor(ttl_ms=24 * 60 * MINUTE), timeMode="ProcessingTime")
    first = tester.testInPandas(7, pd.concat([rows("a", [2_000, 2_100, 1_900, 2_000], T0),
                                              rows("b", [5_000], T0)]))
    assert sorted(first["txn_id"]) == sorted([f"t-a-{i}" for i in range(4)] + ["t-b-0"])
    assert (first["score_avg_ticket"] == 0).all()
    stored = tester.peekMapState("cards", 7)
    assert set(stored) == {("a",), ("b",)} and stored[("a",)][0] == 4  # four payments in card a's profile

    spike = tester.testInPandas(7, rows("a", [60_000], T0 + 60 * MINUTE, prefix="s"))
    assert spike["score_avg_ticket"].iloc[0] >= 0.9  # 30x the running average kept in state
    other_bucket = tester.testInPandas(8, rows("a", [60_000], T0 + 60 * MINUTE, prefix="o"))
    assert other_bucket["score_avg_ticket"].iloc[0] == 0  # another key has no history
