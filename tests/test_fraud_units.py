"""Plain-Python pieces of the fraud job and its latency bench: no Spark, no Kafka."""
from __future__ import annotations

import pytest

from bench.latency import latency_figures, percentile, quality
from infra.config import load
from infra.contracts import DECISION_FIELDS
from pipelines.analyzers import CardProfile, ProximityState, TicketState, VelocityState
from pipelines.fraud import decision_records, parse_args, profile_from_row, profile_to_row


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


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([], 50) is None


def test_latency_figures_use_the_first_decision_and_the_measured_window():
    decisions = [{"txn_id": "a", "produced_at": 100, "decided_at": 110},
                 {"txn_id": "a", "produced_at": 100, "decided_at": 500},   # a replayed duplicate
                 {"txn_id": "b", "produced_at": 10, "decided_at": 20}]     # warm-up: not measured
    f = latency_figures(decisions, since_ms=50)
    assert f["measured"] == 1 and f["p99_ms"] == 10 and f["max_ms"] == 10


def test_quality_counts_precision_and_recall_against_labels():
    labels = [{"txn_id": "1", "is_fraud": True, "pattern": "spend-spike"},
              {"txn_id": "2", "is_fraud": True, "pattern": "card-testing"},
              {"txn_id": "3", "is_fraud": False, "pattern": "normal"},
              {"txn_id": "4", "is_fraud": False, "pattern": "bad:bad-json"}]
    decisions = [{"txn_id": "1", "is_fraud": True}, {"txn_id": "2", "is_fraud": False},
                 {"txn_id": "3", "is_fraud": True}]
    q = quality(decisions, labels)
    assert q["precision"] == 0.5 and q["recall"] == 0.5 and q["labelled"] == 3
