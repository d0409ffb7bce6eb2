"""Plain-Python pieces of the fraud job (state codec, bucket scoring, sink records, CLI): no Spark, no Kafka."""
from __future__ import annotations

import pandas as pd
import pytest

from infra.config import load
from infra.contracts import DECISION_FIELDS
from pipelines.fraud.analyzers import (DEFAULT_LIMITS, CardProfile, ProximityState, TicketState, VelocityState,
                                       score_transaction)
from pipelines.fraud.job import parse_args
from pipelines.fraud.sinks import decision_records
from pipelines.fraud.state import TXN_COLUMNS, profile_from_row, profile_to_row, score_cards


def test_profile_round_trips_through_the_state_row():
    p = CardProfile(TicketState(4, 2_150.5), ProximityState(48.85, 2.35, 1_700_000_000_000),
                    VelocityState((1, 2, 3)), last_seen=42)
    assert profile_from_row(profile_to_row(p)) == p
    empty = CardProfile()
    assert profile_from_row(profile_to_row(empty)) == empty


def test_decision_records_follow_the_contract():
    row = {name: 1 for name in DECISION_FIELDS} | {"txn_id": "t1", "is_fraud": True, "is_late": False,
                                                   "p_count": 3, "decided_at": None}
    [d] = decision_records([row], decided_at=99, batch_id=7)
    assert set(d) == set(DECISION_FIELDS) | {"batch_id"}
    assert d["decided_at"] == 99 and d["batch_id"] == 7 and d["is_fraud"] is True


def test_bad_arguments_are_one_clear_error(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--threshold", "2"], load())
    assert exc.value.code == 2 and "--threshold" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--mode", "realtime", "--available-now"], load())
    assert parse_args([], load()).mode == "microbatch"


def test_a_bucket_scores_each_card_in_event_order_and_touches_only_its_cards():
    def txn(i, card, t, amount=1000, lat=48.85, lon=2.35):
        return {"txn_id": f"t{i}", "card_id": card, "merchant_id": "m", "amount_cents": amount, "lat": lat,
                "lon": lon, "event_time": t, "produced_at": t, "offset": i}

    first = [txn(0, "a", 1_000), txn(1, "b", 2_000), txn(2, "a", 600_000), txn(3, "a", 1_200_000)]
    # out of order in the batch, and card "b" flies to New York a minute later
    second = [txn(5, "a", 1_900_000, amount=20_000), txn(4, "b", 62_000, lat=40.71, lon=-74.0),
              txn(6, "a", 1_800_000)]
    state: dict = {}
    out1, touched = score_cards({}, pd.DataFrame(first), 0, 10_000, _limits())
    state.update(touched)
    out2, touched = score_cards(state, pd.DataFrame(second), 0, 20_000, _limits())
    state.update(touched)

    expected, profiles = {}, {}
    for t in sorted(first, key=lambda r: r["event_time"]) + sorted(second, key=lambda r: r["event_time"]):
        scores, profiles[t["card_id"]] = score_transaction(profiles.get(t["card_id"]), t, _limits())
        expected[t["txn_id"]] = scores
    got = {}
    for out in (out1, out2):
        for i, txn_id in enumerate(out["txn_id"]):
            got[txn_id] = {a: out[f"score_{a}"][i] for a in ("avg_ticket", "proximity", "velocity")}
    assert got == expected
    assert got["t4"]["proximity"] == 1.0 and got["t5"]["avg_ticket"] > 0.7
    assert set(state) == {"a", "b"} and state["a"][0] == 5 and state["a"][6] == 20_000  # count, last seen
    # a batch of card "c" reads and writes card "c" alone, whatever else the bucket holds
    _, touched = score_cards({"a": state["a"], "b": state["b"]}, pd.DataFrame([txn(7, "c", 2_000_000)]), 0,
                             30_000, _limits())
    assert set(touched) == {"c"}
    assert TXN_COLUMNS[1] == "card_id"


def _limits():
    return DEFAULT_LIMITS
