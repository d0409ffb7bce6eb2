"""A decisions batch's payloads on the driver (pipelines/fraud/sinks.batch_payloads): the decision
and its feature-log record, as JSON built in the plan, stamped with decided_at; the store's rows."""
import json

import pyarrow as pa
import pytest

from infra.contracts import DECISION_FIELDS
from pipelines.fraud.features import BASELINE_FEATURES, FEATURE_LOG_FIELDS
from pipelines.fraud.sinks import DECISION_COLUMNS, DECISION_JSON, FEATURES_JSON, batch_payloads

pytestmark = pytest.mark.unit


def batch(rows: list[dict]) -> pa.Table:
    """As the plan gives it: the columns, and the two JSON values to_json built (no decided_at)."""
    cols = {c: [r.get(c) for r in rows] for c in DECISION_FIELDS if c != "decided_at"}
    cols[DECISION_JSON] = [json.dumps({c: r.get(c) for c in DECISION_FIELDS if c != "decided_at"}) for r in rows]
    cols[FEATURES_JSON] = [json.dumps({c: r.get(c) for c in (*FEATURE_LOG_FIELDS, "model_version")}) for r in rows]
    return pa.table(cols)


def row(txn_id, **over):
    r = {name: 0.0 for name in (*DECISION_FIELDS, *FEATURE_LOG_FIELDS)}
    r.update(txn_id=txn_id, card_id="hb-c1", merchant_id="hb-t2", amount_cents=1234, event_time=1_530_000_000_000,
             produced_at=1, is_fraud=True, is_late=False, score=0.9, model_version=2)
    r.update(over)
    return r


def test_each_decision_and_its_features_are_stamped_and_keyed_by_txn_id():
    ids, store_rows, decisions, features = batch_payloads(
        batch([row("hb-1", t_risk_7d=0.25, c_count_30d=12.0), row("hb-2", is_fraud=False, score=0.1)]),
        decided_at=42, batch_id=7)
    assert ids == ["hb-1", "hb-2"]
    assert [k for k, _ in decisions] == [k for k, _ in features] == [b"hb-1", b"hb-2"]
    first = json.loads(features[0][1])
    assert set(BASELINE_FEATURES) <= set(first)
    assert (first["t_risk_7d"], first["c_count_30d"], first["is_fraud"], first["model_version"], first["decided_at"]) \
        == (0.25, 12.0, True, 2, 42)
    decision = json.loads(decisions[1][1])
    assert set(decision) == set(DECISION_FIELDS) and decision["decided_at"] == 42 and decision["is_fraud"] is False
    stored = dict(zip(DECISION_COLUMNS, store_rows[0]))
    assert (stored["txn_id"], stored["decided_at"], stored["batch_id"], stored["model_version"]) == ("hb-1", 42, 7, 2)
