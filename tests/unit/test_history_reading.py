"""infra/history/'s plain steps, one by one (the whole of `load_history` and its sentences:
tests/unit/test_replay.py): the file's kind, the column picker, JSON escaping where a record is
written, and the handbook's frame of the same rows."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from infra.histories import HANDBOOK, parse_column_map
from infra.history import HistoryError, load_history
from infra.history.checks import cents, check_places, fraud_flags
from infra.history.mapping import ColumnPicker, field_of, json_escaped
from infra.history.reading import file_format
from pipelines.fraud.handbook import Window, history_frame


def test_a_file_s_kind_is_told_by_its_name_or_its_first_bytes(tmp_path):
    (tmp_path / "a.csv").write_text("x\n1\n")
    (tmp_path / "b.dat").write_bytes(b"PAR1....")
    (tmp_path / "c.txt").write_text("x")
    assert file_format(tmp_path / "a.csv") == "csv" and file_format(tmp_path / "b.dat") == "parquet"
    for name, said in (("c.txt", "neither Parquet nor CSV"), ("none.csv", "There is no file"), ("", "is a folder")):
        with pytest.raises(HistoryError, match=said):
            file_format(tmp_path / name)


def test_the_picker_chooses_the_handbook_s_map_and_names_a_missing_column(tmp_path):
    picker = ColumnPicker(tmp_path / "h.parquet", None, None, None)
    assert picker(HANDBOOK.required() + ["OTHER"]) == HANDBOOK.required() and picker.cmap is HANDBOOK
    custom = parse_column_map("txn_id=I,event_time=T,card_id=C,merchant_id=M,amount=A,is_fraud=F")
    with pytest.raises(HistoryError, match=r"h.parquet has no column 'M' \(the custom column map's merchant_id\)"):
        ColumnPicker(tmp_path / "h.parquet", custom, None, None)(["I", "T", "C", "A", "F"])
    assert field_of(custom, "A") == "amount" and field_of(custom, "nothing") == "column"


def test_only_strings_that_need_it_are_json_escaped():
    plain = pa.array(["a", "b-1"])
    assert json_escaped(plain) is plain
    assert json_escaped(pa.array(['a"1', "b\\2", "c\n", "d"])).to_pylist() == ['a\\"1', "b\\\\2", "c\\n", "d"]


def test_amounts_become_cents_and_refuse_what_the_contract_does():
    rows, txn = np.arange(1, 4), pa.array(["t1", "t2", "t3"])
    assert cents(np.array([1.005, 0.0, 12.5]), txn, rows, "AMT").tolist() == [round(1.005 * 100), 0, 1250]
    with pytest.raises(HistoryError, match=r"Row 2 \(txn t2\) has a negative amount \(-1\) in column AMT"):
        cents(np.array([1.0, -1.0, 2.0]), txn, rows, "AMT")


def test_labels_are_booleans_or_zero_and_one():
    rows = np.arange(1, 4)
    assert fraud_flags(pa.chunked_array([[0, 1, 0]]), "F", rows).tolist() == [False, True, False]
    assert fraud_flags(pa.chunked_array([[True, False, True]]), "F", rows).tolist() == [True, False, True]
    with pytest.raises(HistoryError, match="Row 3 has is_fraud 2 in column F"):
        fraud_flags(pa.chunked_array([[0, 1, 2]]), "F", rows)
    with pytest.raises(HistoryError, match="holds string"):
        fraud_flags(pa.chunked_array([["yes", "no", "no"]]), "F", rows)


def test_a_place_is_both_coordinates_or_neither():
    rows = np.arange(1, 3)
    check_places(np.array([1.0, np.nan]), np.array([2.0, np.nan]), rows)
    with pytest.raises(HistoryError, match="Row 2 has a lat but no lon"):
        check_places(np.array([1.0, 3.0]), np.array([2.0, np.nan]), rows)


def test_a_window_s_last_day_is_the_one_before_its_end():
    w = Window(dt.date(2018, 7, 25), dt.date(2018, 8, 1))
    assert w.last == dt.date(2018, 7, 31) and str(w) == "2018-07-25..2018-07-31"


def test_the_handbook_s_frame_holds_the_replay_s_ids_unescaped_and_the_file_s_amounts(tmp_path):
    raw = pd.DataFrame({"ID": ['a"1', "b2"], "TS": pd.to_datetime(["2018-04-01 00:00:31", "2018-04-02 10:00:00"]),
                        "CARD": ["k1", "k2"], "SHOP": ["s", "t"], "AMT": [57.163, 1.0], "F": [1, 0]})
    raw.to_parquet(tmp_path / "h.parquet")
    cmap = parse_column_map("txn_id=ID,event_time=TS,card_id=CARD,merchant_id=SHOP,amount=AMT,is_fraud=F,id_prefix=x-")
    got = history_frame(load_history(tmp_path / "h.parquet", cmap))
    assert got.to_dict("records") == [
        {"txn_id": 'x-a"1', "card_id": "x-ck1", "merchant_id": "x-ts", "event_time": pd.Timestamp("2018-04-01 00:00:31"),
         "amount": 57.163, "label": 1, "scenario": 0},
        {"txn_id": "x-b2", "card_id": "x-ck2", "merchant_id": "x-tt", "event_time": pd.Timestamp("2018-04-02 10:00:00"),
         "amount": 1.0, "label": 0, "scenario": 0}]
