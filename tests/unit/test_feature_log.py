"""The feature log's records (pipelines/fraud/sinks.feature_records): what a model trains on."""
import json

import pytest

from pipelines.fraud.features import BASELINE_FEATURES, FEATURE_LOG_FIELDS
from pipelines.fraud.sinks import feature_records

pytestmark = pytest.mark.unit


def row(txn_id, **over):
    r = {name: 0.0 for name in FEATURE_LOG_FIELDS}
    r.update(txn_id=txn_id, card_id="hb-c1", merchant_id="hb-t2", amount_cents=1234, event_time=1_530_000_000_000,
             is_fraud=1, score=0.9, extra_column="not logged")
    r.update(over)
    return r


def test_each_decision_logs_its_features_and_verdict_keyed_by_txn_id():
    rows = [row("hb-1", t_risk_7d=0.25, c_count_30d=12.0), row("hb-2", is_fraud=0, score=0.1)]
    out = feature_records(rows, decided_at=42)
    assert [k for k, _ in out] == [b"hb-1", b"hb-2"]
    first = json.loads(out[0][1])
    assert set(BASELINE_FEATURES) <= set(first) and "extra_column" not in first
    assert (first["t_risk_7d"], first["c_count_30d"], first["is_fraud"], first["score"]) == (0.25, 12.0, True, 0.9)
    assert (first["model_version"], first["decided_at"]) == (0, 42)
    assert json.loads(out[1][1])["is_fraud"] is False


def test_a_missing_feature_is_logged_as_null_not_invented():
    r = row("hb-3")
    del r["t_risk_30d"]
    assert json.loads(feature_records([r], 1)[0][1])["t_risk_30d"] is None
