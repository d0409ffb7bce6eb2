"""What the driver tells the real-time path to serve (pipelines/fraud/realtime.py): the serving
file for a version, and the terminal table the stateful companion publishes (LiveModel.java reads
both; tests/spark/test_realtime_model.py runs them through the JVM)."""
from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa

from pipelines.fraud import realtime
from pipelines.fraud.features import CARD_FEATURES, CARD_PAST_FEATURES
from pipelines.fraud.models import MODEL_JSON


def lines(text: str) -> dict:
    return dict(line.split("\t", 1) if "\t" in line else (line, "") for line in text.splitlines())


def test_the_serving_file_for_the_rules_a_version_without_export_and_an_exported_one(tmp_path):
    assert realtime.serving_lines(0, None, None, tmp_path) == (0, None, "version\t0\nend\n")
    folder = tmp_path / "v3"
    folder.mkdir()
    served, why, text = realtime.serving_lines(3, 0.4, str(folder), tmp_path)
    assert served == 0 and "model 3 has no export for the JVM" in why and "rules (model 0)" in why
    assert lines(text)["why"] == why and "end" in lines(text)
    (folder / MODEL_JSON).write_text(json.dumps({"format": 1}))
    served, why, text = realtime.serving_lines(3, 0.4, str(folder), tmp_path)
    got = lines(text)
    assert (served, why) == (3, None)
    assert (got["version"], float(got["threshold"]), got["model"]) == ("3", 0.4, str(folder / MODEL_JSON))
    assert got["card_features"].split(",") == list(CARD_FEATURES + CARD_PAST_FEATURES)
    assert got["terminals"] == str(tmp_path / realtime.TERMINALS_FILE)
    assert int(got["terminal_max_gap_ms"]) == realtime.TERMINAL_MAX_GAP_MS and "end" in got


def batch(rows):
    merchants, times, counts, risks = zip(*rows)
    return pa.table({"merchant_id": list(merchants), "event_time": list(times), "card_id": ["c"] * len(rows),
                     "t_count_1d": list(counts), "t_risk_1d": list(risks)})


def test_the_terminal_table_keeps_each_terminals_newest_payment_and_survives_a_restart(tmp_path):
    path = tmp_path / realtime.TERMINALS_FILE
    table = realtime.TerminalTable(path, 7_000)  # begun mid-stream: complete from its first payment
    table.update(batch([("m1", 1_000, 3.0, 0.25), ("m2", 2_000, 1.0, None), ("m1", 900, 9.0, 0.9)]))
    table.update(batch([("m1", 1_500, 4.0, 0.5), ("m2", 1_999, 7.0, 0.7)]))  # m2's is older: kept as was
    text = path.read_text().splitlines()
    assert text[0] == "names\tt_count_1d\tt_risk_1d" and text[-1] == "end"
    assert text[1:5] == ["complete_from\t1000", "decided_to\t2000", "delay_ms\t7000", "empty\t0.0\t0.0"]
    assert sorted(text[5:-1]) == ["terminal\tm1\t1500\t4.0\t0.5", "terminal\tm2\t2000\t1.0\t"]
    again = realtime.TerminalTable(path, 7_000, realtime.EVER)  # a restart starts from what it published
    assert again.names == ("t_count_1d", "t_risk_1d") and (again.complete_from, again.decided_to) == (1_000, 2_000)
    assert again.rows == {"m1": (1_500, 4.0, 0.5), "m2": (2_000, 1.0, None)}
    fresh = realtime.TerminalTable(tmp_path / "fresh.tsv", 7_000, realtime.EVER)
    fresh.update(batch([("m1", 5, 0.0, 0.0)]))
    assert f"complete_from\t{realtime.EVER}" in (tmp_path / "fresh.tsv").read_text()
    assert realtime.empty_terminal("t_days_since_fraud") == 90.0 and realtime.empty_terminal("t_risk_7d") == 0.0
    # every terminal feature's empty value is what the features give a terminal with no payment before
    from pipelines.fraud.features import TERMINAL_FEATURES, TERMINAL_FRAUD_FEATURES
    from pipelines.fraud.handbook import with_features
    lone = with_features(pd.DataFrame({"event_time": [pd.Timestamp("2020-01-01")], "card_id": ["c"], "merchant_id": ["t"],
                                       "amount": [1.0], "label": [0]}))
    assert {n: lone.loc[0, n] for n in TERMINAL_FEATURES + TERMINAL_FRAUD_FEATURES} == {
        n: realtime.empty_terminal(n) for n in TERMINAL_FEATURES + TERMINAL_FRAUD_FEATURES}
    assert not list(tmp_path.glob("*.tmp"))  # written by rename, never half a file
