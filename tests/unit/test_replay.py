"""`python -m simulator replay` without a broker: the merged order of transactions and labels (a
label never before its time), the records of a few rows of the handbook's file, every bad input's
sentence with nothing sent, --from/--to, the column map, the producer's record bytes with headers,
and the contract's replay and place rules in its Python mirror (the same rules in Spark:
tests/spark/test_replay_validation_spark.py; on the real broker: tests/kafka/test_replay_kafka.py)."""
from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from infra.contracts import LABEL_FIELDS, LABEL_OPTIONAL_FIELDS, TRANSACTION_FIELDS, dead_letter_reason
from infra.histories import (DAY_MS, HANDBOOK, HANDBOOK_PATTERNS, HISTORY_MIN_EVENT_TIME_MS, REPLAY_HEADER,
                             ColumnMapError, parse_column_map)
from infra.history import load_history
from infra.history.checks import first_repeat
from simulator.replay.cli import main as replay_main
from simulator.replay.records import labels, transactions
from simulator.replay.replayer import SLICE, Pace, Replayer, Totals
from simulator.replay.schedule import schedule
from simulator.producer import TopicStats, fill, headers_bytes

T0 = int(dt.datetime(2018, 4, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
HOUR = 3_600_000


class Recorder:
    """A sender that keeps every record in the order it was handed over (the unit tests' Producer)."""

    def __init__(self):
        self.records: list[tuple[str, bytes, bytes, list | None]] = []
        self.calls = 0

    def send_many(self, topic, keys, values, stamp_ms, headers=None):
        self.calls += 1
        self.records += [(topic, k, v, headers) for k, v in zip(keys, values)]

    def totals(self, topic):
        n = sum(1 for r in self.records if r[0] == topic)
        return TopicStats(n, n, 0)

    outstanding = 0

    def wait_for_room(self, stop=lambda: False):
        pass

    def flush(self, timeout=None):
        return True

    def close(self, timeout=None):
        pass


def frame(times_ms, **overrides) -> pd.DataFrame:
    n = len(times_ms)
    df = pd.DataFrame({
        "TRANSACTION_ID": np.arange(n, dtype=np.int64),
        "TX_DATETIME": pd.to_datetime(np.asarray(times_ms, dtype=np.int64), unit="ms"),
        "CUSTOMER_ID": np.arange(n, dtype=np.int64) % 3,
        "TERMINAL_ID": np.arange(n, dtype=np.int64) % 5 + 100,
        "TX_AMOUNT": np.round(10 + np.arange(n) * 1.01, 2),
        "TX_FRAUD": (np.arange(n) % 4 == 3).astype(np.int64),
        "TX_FRAUD_SCENARIO": np.where(np.arange(n) % 4 == 3, 2, 0).astype(np.int64),
    })
    for k, v in overrides.items():
        df[k] = v
    return df


def write(tmp_path, df: pd.DataFrame, name="history.parquet"):
    path = tmp_path / name
    if name.endswith(".csv"):
        df.to_csv(path, index=False)
    else:
        df.to_parquet(path, index=False)
    return path


def replayed(history, delay_ms, slice_size=SLICE, pace=Pace()) -> tuple[list, Totals]:
    sender = Recorder()
    totals = Replayer(history, sender, "tx", "lb", run_id="run-1", delay_ms=delay_ms, pace=pace,
                        progress=False, slice_size=slice_size).run()
    return sender.records, totals


def order(records) -> list[tuple[str, int, dict]]:
    """(topic, the record's time: event_time or known_at, the JSON) in send order."""
    out = []
    for topic, _, value, _ in records:
        doc = json.loads(value)
        out.append((topic, doc["event_time"] if topic == "tx" else doc["known_at"], doc))
    return out


# ------------------------------------------------------------------ the merged order

def test_each_label_goes_after_every_transaction_at_or_before_its_time_and_before_the_rest(tmp_path):
    rng = np.random.default_rng(3)
    times = T0 + np.sort(rng.integers(0, 10 * DAY_MS, 400))
    times[50:53] = times[50]  # ties
    delay = 2 * DAY_MS
    history = load_history(write(tmp_path, frame(times)))
    records, totals = replayed(history, delay, slice_size=1)
    seq = order(records)
    txs = [t for topic, t, _ in seq if topic == "tx"]
    assert txs == sorted(times.tolist())
    sent_before = 0
    for topic, t, doc in seq:
        if topic == "tx":
            sent_before += 1
            continue
        assert doc["known_at"] == doc["event_time"] + delay
        # every transaction at or before its time was sent, none after it (an exact merge)
        assert sent_before == int(np.searchsorted(times, t, side="right"))
    expected = int((times + delay <= times[-1]).sum())
    assert totals.labels_sent == expected == sum(1 for s in seq if s[0] == "lb")
    assert totals.labels_pending == len(times) - expected > 0
    assert totals.sent == len(times)
    assert max(t for topic, t, _ in seq if topic == "lb") <= times[-1]  # none after the last transaction


def test_with_slices_a_label_is_never_early_and_at_most_one_slice_late(tmp_path):
    rng = np.random.default_rng(4)
    times = T0 + np.sort(rng.integers(0, 5 * DAY_MS, 3_000))
    delay = DAY_MS
    history = load_history(write(tmp_path, frame(times)))
    slice_size = 64
    records, totals = replayed(history, delay, slice_size=slice_size)
    sent_before = 0
    for topic, t, _ in order(records):
        if topic == "tx":
            sent_before += 1
            continue
        due = int(np.searchsorted(times, t, side="right"))
        assert due <= sent_before <= due + slice_size
    assert totals.labels_sent + totals.labels_pending == len(times)
    # labels come in the order of their times, transactions in the file's order
    lb = [t for topic, t, _ in order(records) if topic == "lb"]
    assert lb == sorted(lb)


def test_speed_and_rate_pacing_send_the_same_records_in_a_valid_merge(tmp_path):
    times = T0 + np.arange(200, dtype=np.int64) * 1_000   # 200 s of event time
    history = load_history(write(tmp_path, frame(times)))
    for pace in (Pace(speed=1_000_000.0), Pace(rate=1e9)):
        records, totals = replayed(history, 60_000, pace=pace)
        assert totals.sent == 200 and totals.labels_sent == 140 and totals.labels_pending == 60
        sent_before = 0
        for topic, t, _ in order(records):
            if topic == "tx":
                sent_before += 1
            else:
                assert sent_before >= int(np.searchsorted(times, t, side="right"))


def test_the_schedule_of_labels():
    times = np.array([0, 10, 10, 20, 30], dtype=np.int64) + T0
    s = schedule(times, 10)
    assert s.known_ms.tolist() == (times + 10).tolist()
    assert s.after.tolist() == [3, 4, 4, 5, 5]      # transactions at or before each label's time
    assert s.labels == 4 and s.pending == 1         # 40 is after the last transaction (30)
    assert schedule(times, 0).labels == 5         # no delay: every label right after its transaction


# ------------------------------------------------------------------ the records

@pytest.fixture(scope="module")
def handbook_rows():
    from infra.config import load

    path = load().handbook_data
    if not path.exists():
        pytest.fail(f"The handbook's dataset is not at {path} (HANDBOOK_DATA; by default "
                    f"../shared/datasets/handbook/transactions.parquet beside the repository).")
    ids = [0, 1, 3527, 129590]  # genuine, genuine, scenario 1, a zero amount
    return pq.read_table(path, filters=[("TRANSACTION_ID", "in", ids)])


def test_a_few_handbook_rows_become_the_live_contract_and_their_labels(tmp_path, handbook_rows):
    path = tmp_path / "slice.parquet"
    pq.write_table(handbook_rows, path)
    h = load_history(path)
    assert h.cmap is HANDBOOK and h.lat is None
    keys, values = transactions(h, 0, len(h))
    stamp = 1_764_000_000_000
    docs = [json.loads(v + b"%d}" % stamp) for v in values]
    rows = handbook_rows.to_pylist()
    s = schedule(h.event_ms, 7 * DAY_MS)
    lkeys, lvalues = labels(h, s, 0, len(h))
    for row, doc, key, lkey, lvalue in zip(rows, docs, keys, lkeys, lvalues):
        when = row["TX_DATETIME"].replace(tzinfo=dt.timezone.utc)  # no zone: UTC
        assert doc == {"txn_id": HANDBOOK.txn_id_of(row["TRANSACTION_ID"]),
                       "card_id": HANDBOOK.card_of(row["CUSTOMER_ID"]),
                       "merchant_id": HANDBOOK.merchant_of(row["TERMINAL_ID"]),
                       "amount_cents": round(row["TX_AMOUNT"] * 100), "currency": "EUR",
                       "event_time": int(when.timestamp() * 1000), "produced_at": stamp}
        assert set(doc) == set(TRANSACTION_FIELDS) - {"lat", "lon"}  # no place: no keys, not nulls
        assert key == doc["card_id"].encode()
        label = json.loads(lvalue)
        assert lkey == doc["txn_id"].encode()
        assert label == {"txn_id": doc["txn_id"], "is_fraud": row["TX_FRAUD"] == 1,
                         "pattern": HANDBOOK_PATTERNS[row["TX_FRAUD_SCENARIO"]], "is_late": False,
                         "card_id": doc["card_id"], "merchant_id": doc["merchant_id"],
                         "event_time": doc["event_time"], "known_at": doc["event_time"] + 7 * DAY_MS}
        assert set(label) == set(LABEL_FIELDS) | set(LABEL_OPTIONAL_FIELDS)
        payload = json.dumps(doc).encode()
        # 2018 is years old: valid as a replay (the header), too old as live traffic
        assert dead_letter_reason(payload, now_ms=stamp, replay=True) is None
        assert dead_letter_reason(payload, now_ms=stamp) == "event_time too far in the past" \
            or (doc["amount_cents"] == 0 and dead_letter_reason(payload, now_ms=stamp) == "amount_cents out of range")
    assert [d["txn_id"] for d in docs] == ["hb-0", "hb-1", "hb-3527", "hb-129590"]
    assert docs[2]["amount_cents"] == round(rows[2]["TX_AMOUNT"] * 100) and docs[3]["amount_cents"] == 0


def test_records_carry_the_run_id_header_on_both_topics(tmp_path):
    history = load_history(write(tmp_path, frame(T0 + np.arange(20) * HOUR)))
    records, totals = replayed(history, HOUR)
    assert {r[3][0] for r in records} == {(REPLAY_HEADER, b"run-1")} and totals.run_id == "run-1"
    assert {r[0] for r in records} == {"tx", "lb"}


def test_a_csv_with_places_and_string_ids_by_a_column_map(tmp_path):
    df = pd.DataFrame({"ID": ['a"1', "a2", "a3"], "TS": ["2018-05-01T10:00:00", "2018-05-01 10:00:01",
                                                        "2018-05-01T10:00:02"],
                       "CARD": ["k1", "k2", "k1"], "SHOP": [7, 8, 9], "AMT": [1.005, 12.5, 3],
                       "F": [True, False, False], "LAT": [48.85661, None, -90.0], "LON": [2.35222, None, 180.0]})
    path = write(tmp_path, df, "h.csv")
    h = load_history(path, column_map="txn_id=ID,event_time=TS,card_id=CARD,merchant_id=SHOP,amount=AMT,"
                                        "is_fraud=F,lat=LAT,lon=LON,currency=USD,id_prefix=x-")
    _, values = transactions(h, 0, 3)
    docs = [json.loads(v + b"1}") for v in values]
    assert docs[0]["txn_id"] == 'x-a"1' and docs[0]["card_id"] == "x-ck1" and docs[1]["merchant_id"] == "x-t8"
    assert (docs[0]["lat"], docs[0]["lon"]) == (48.85661, 2.35222) and (docs[2]["lat"], docs[2]["lon"]) == (-90, 180)
    assert "lat" not in docs[1] and "lon" not in docs[1]   # no place: the keys are absent
    assert [d["amount_cents"] for d in docs] == [round(1.005 * 100), 1250, 300] and docs[0]["currency"] == "USD"
    _, label_values = labels(h, schedule(h.event_ms, 0), 0, 3)
    assert [json.loads(v)["pattern"] for v in label_values] == ["fraud", "normal", "normal"]
    stamp = b"%d}" % NOW
    for v in values:  # the bytes as sent
        assert dead_letter_reason(v + stamp, now_ms=NOW, replay=True) is None


def test_from_and_to_keep_whole_utc_days_both_included(tmp_path):
    day = lambda d, h=0: int(dt.datetime(2018, 4, d, h, tzinfo=dt.timezone.utc).timestamp() * 1000)  # noqa: E731
    times = [day(1, 23), day(2, 0), day(2, 23) + 59 * 60_000, day(3, 0), day(3, 12), day(4, 0)]
    path = write(tmp_path, frame(times))
    h = load_history(path, start=dt.date(2018, 4, 2), end=dt.date(2018, 4, 3))
    assert h.event_ms.tolist() == times[1:5] and h.rows.tolist() == [2, 3, 4, 5]
    assert load_history(path, start=dt.date(2018, 4, 4)).event_ms.tolist() == times[5:]
    assert load_history(path, end=dt.date(2018, 4, 1)).event_ms.tolist() == times[:1]


# ------------------------------------------------------------------ bad input: one sentence, nothing sent

def _run_bad(capsys, argv) -> str:
    made = []
    try:
        code = replay_main(argv + ["--no-progress"], producer_factory=lambda *a: made.append(a) or Recorder())
    except SystemExit as exc:  # a bad option: argparse exits
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert made == [], "a producer was made before the history was validated"
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("replay: ") and lines[0].endswith("."), err
    return lines[0]


def test_bad_input_is_one_sentence_exit_2_and_nothing_sent(tmp_path, capsys):
    times = T0 + np.arange(10, dtype=np.int64) * HOUR
    good = frame(times)
    cases = {
        "unreadable": (lambda: (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really") and
                       tmp_path / "broken.parquet", [], "is not a readable Parquet file"),
        "no file": (lambda: tmp_path / "absent.parquet", [], "There is no file"),
        "unknown format": (lambda: (tmp_path / "h.txt").write_text("a,b\n1,2\n") and tmp_path / "h.txt", [],
                           "neither Parquet nor CSV"),
        "missing column": (lambda: write(tmp_path, good.drop(columns=["TX_FRAUD"]), "m.parquet"),
                           ["--columns", "handbook"], "has no column 'TX_FRAUD' (the handbook column map's is_fraud)"),
        "not the handbook's": (lambda: write(tmp_path, good.drop(columns=["TERMINAL_ID"]), "n.parquet"), [],
                               "no column TERMINAL_ID of the handbook's columns"),
        "unsorted": (lambda: write(tmp_path, frame(np.r_[times[:6], times[4], times[7:]]), "u.parquet"), [],
                     "The times are not in order: row 7 (2018-04-01 04:00:00) comes after row 6"),
        "duplicate id": (lambda: write(tmp_path, frame(times, TRANSACTION_ID=[0, 1, 2, 3, 4, 5, 6, 3, 8, 9]),
                                       "d.parquet"), [], "The txn id 3 (column TRANSACTION_ID) is in row 4 and again in row 8"),
        "empty window": (lambda: write(tmp_path, good, "w.parquet"), ["--from", "2019-01-01"],
                         "No row of w.parquet falls in 2019-01-01 .. the end"),
        "negative amount": (lambda: write(tmp_path, frame(times, TX_AMOUNT=[1.0] * 5 + [-2.5] + [1.0] * 4),
                                          "a.parquet"), [], "Row 6 (txn hb-5) has a negative amount (-2.5)"),
        "no amount": (lambda: write(tmp_path, frame(times, TX_AMOUNT=[1.0] * 9 + [float("nan")]), "na.parquet"),
                      [], "Row 10 has no amount (column TX_AMOUNT is empty there)"),
        "bad column map": (lambda: write(tmp_path, good, "c.parquet"), ["--column-map", "txn_id=TRANSACTION_ID"],
                           "The column map has no column for event_time, card_id, merchant_id, amount, is_fraud"),
        "unknown map field": (lambda: write(tmp_path, good, "c2.parquet"),
                              ["--column-map", "txn=TRANSACTION_ID"], "unknown field 'txn'"),
        "from after to": (lambda: write(tmp_path, good, "ft.parquet"), ["--from", "2018-05-02", "--to", "2018-05-01"],
                          "--from 2018-05-02 is after --to 2018-05-01"),
        "bad is_fraud": (lambda: write(tmp_path, frame(times, TX_FRAUD=[0] * 9 + [2]), "f.parquet"), [],
                         "Row 10 has is_fraud 2 in column TX_FRAUD"),
        "null card": (lambda: write(tmp_path, frame(times, CUSTOMER_ID=[1.0] * 3 + [None] + [1.0] * 6), "nc.parquet"),
                      [], "Row 4 has no card_id (column CUSTOMER_ID is empty there)"),
        "before 2000": (lambda: write(tmp_path, frame([0, 1]), "e.parquet"), [], "Row 1 is dated 1970-01-01 00:00:00"),
        "bad date": (lambda: write(tmp_path, good, "bd.parquet"), ["--from", "April"],
                     "Argument --from: must be a date as YYYY-MM-DD"),
    }
    for name, (make, extra, expected) in cases.items():
        line = _run_bad(capsys, [str(make())] + extra)
        assert expected in line, (name, line)


def test_one_coordinate_without_the_other_is_bad_input(tmp_path, capsys):
    df = frame(T0 + np.arange(4) * HOUR, LAT=[1.0, None, 2.0, None], LON=[1.0, None, None, None])
    path = write(tmp_path, df, "p.parquet")
    spec = ("txn_id=TRANSACTION_ID,event_time=TX_DATETIME,card_id=CUSTOMER_ID,merchant_id=TERMINAL_ID,"
            "amount=TX_AMOUNT,is_fraud=TX_FRAUD,lat=LAT,lon=LON")
    assert "Row 3 has a lat but no lon" in _run_bad(capsys, [str(path), "--column-map", spec])
    far = write(tmp_path, frame(T0 + np.arange(2) * HOUR, LAT=[1.0, 91.0], LON=[1.0, 1.0]), "far.parquet")
    assert "Row 2 has the place (91.0, 1.0), out of range" in _run_bad(capsys, [str(far), "--column-map", spec])


# ------------------------------------------------------------------ the column map

def test_the_column_map_parser():
    m = parse_column_map("txn_id=ID, event_time=TS,card_id=C,merchant_id=M,amount=A,is_fraud=F,pattern=P,"
                         "lat=LA,lon=LO,currency=USD,id_prefix=z-")
    assert (m.txn_id, m.event_time, m.card_id, m.merchant_id, m.amount, m.is_fraud, m.pattern, m.lat, m.lon,
            m.currency, m.id_prefix) == ("ID", "TS", "C", "M", "A", "F", "P", "LA", "LO", "USD", "z-")
    assert m.required() == ["ID", "TS", "C", "M", "A", "F", "P", "LA", "LO"]
    base = "txn_id=ID,event_time=TS,card_id=C,merchant_id=M,amount=A,is_fraud=F"
    assert parse_column_map(base).lat is None and parse_column_map(base).currency == "EUR"
    for text, words in [(base + ",lat=LA", "lat without lon"), (base + ",txn_id=X", "twice"),
                        (base + ",color=red", "unknown field 'color'"), (base + ",,", "empty entry"),
                        (base + ",amount", "is not FIELD=COLUMN"), (base.replace("=M", "="), "no column"),
                        ("txn_id=ID", "has no column for event_time")]:
        with pytest.raises(ColumnMapError, match=words):
            parse_column_map(text)


# ------------------------------------------------------------------ the producer's bytes

@pytest.mark.parametrize("headers", [None, [(REPLAY_HEADER, b"replay-20261125T141400Z-abc123")],
                                     [("a", b""), ("\u00e9t\u00e9", b"\x00\xff" * 200)]])
def test_the_bulk_append_writes_the_bytes_kafka_python_writes(headers):
    from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

    rng = np.random.default_rng(1)
    keys = [b"card-%d" % i for i in range(400)]
    values = [bytes(rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8)) for _ in range(400)]
    ours = MemoryRecordsBuilder(2, 0, 16_384)
    theirs = MemoryRecordsBuilder(2, 0, 16_384)
    end, biggest = fill(ours, keys, values, 0, 1_764_000_000_123, 16_384, headers_bytes(headers))
    assert 0 < end < len(keys)  # the batch filled up
    for k, v in zip(keys[:end], values[:end]):
        assert theirs.append(1_764_000_000_123, k, v, headers or []) is not None
    assert theirs.append(1_764_000_000_123, keys[end], values[end], headers or []) is None  # full for theirs too
    ours.close()
    theirs.close()
    assert ours.buffer() == theirs.buffer()
    batch = MemoryRecords(ours.buffer()).next_batch()
    read = list(batch)
    assert [r.key for r in read] == keys[:end] and [r.value for r in read] == values[:end]
    assert all(r.headers == (headers or []) for r in read)
    assert biggest > max(len(r.value) for r in read)  # the biggest record, its framing included


# ------------------------------------------------------------------ the contract's rules in Python

def _txn(**changes):
    doc = {"txn_id": "t-1", "card_id": "c-1", "merchant_id": "m-1", "amount_cents": 2_500, "currency": "EUR",
           "lat": 48.85, "lon": 2.35, "event_time": 1_522_540_831_000, "produced_at": 1_764_000_000_000}
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


NOW = 1_764_000_000_000


def test_the_replay_rule_for_event_time_in_the_python_mirror():
    assert dead_letter_reason(_txn(), NOW, replay=True) is None
    assert dead_letter_reason(_txn(), NOW) == "event_time too far in the past"
    assert dead_letter_reason(_txn(event_time=HISTORY_MIN_EVENT_TIME_MS), NOW, replay=True) is None
    assert dead_letter_reason(_txn(event_time=HISTORY_MIN_EVENT_TIME_MS - 1), NOW, replay=True) == \
        "event_time too far in the past"
    assert dead_letter_reason(_txn(event_time=1_522_540_831), NOW, replay=True) == "event_time in seconds"
    assert dead_letter_reason(_txn(event_time=1_522_540_831_000_000), NOW, replay=True) == "event_time in microseconds"
    assert dead_letter_reason(_txn(event_time=NOW + 300_001), NOW, replay=True) == "event_time too far in the future"
    assert dead_letter_reason(_txn(event_time=1_522_540_831_000.5), NOW, replay=True) == "event_time not integral"
    # produced_at keeps the live window
    assert dead_letter_reason(_txn(produced_at=1_522_540_831_000), NOW, replay=True) == \
        "produced_at too far in the past"
    # a replay's zero amount is a payment; live, it is out of range
    assert dead_letter_reason(_txn(amount_cents=0), NOW, replay=True) is None
    assert dead_letter_reason(_txn(amount_cents=0, event_time=NOW), NOW) == "amount_cents out of range"
    assert dead_letter_reason(_txn(amount_cents=-1), NOW, replay=True) == "amount_cents out of range"


def test_a_place_is_both_coordinates_or_neither():
    live = dict(event_time=NOW)
    assert dead_letter_reason(_txn(lat=..., lon=..., **live), NOW) is None
    assert dead_letter_reason(_txn(lat=None, lon=None, **live), NOW) is None
    assert dead_letter_reason(_txn(lat=..., **live), NOW) == "missing field lat"
    assert dead_letter_reason(_txn(lon=None, **live), NOW) == "missing field lon"
    assert dead_letter_reason(_txn(lat=..., lon="x", **live), NOW) == "missing field lat"
    assert dead_letter_reason(_txn(lat=91.0, **live), NOW) == "lat/lon out of range"


# ------------------------------------------------------------------ no place downstream

def test_proximity_has_no_opinion_without_a_place_and_keeps_the_cards_place():
    from pipelines.fraud.analyzers import ProximityState, proximity, score_transaction

    paris = ProximityState(48.85, 2.35, T0)
    for lat, lon in ((None, None), (math.nan, math.nan)):
        assert proximity(paris, {"lat": lat, "lon": lon, "event_time": T0 + 1}) == (0.0, paris)
        assert proximity(None, {"lat": lat, "lon": lon, "event_time": T0 + 1}) == (0.0, None)
    scores, profile = score_transaction(None, {"amount_cents": 100, "event_time": T0})
    assert scores["proximity"] == 0.0 and profile.place is None and profile.ticket.count == 1
    # the next transaction with a place is compared with nothing (no invented place)
    scores, profile = score_transaction(profile, {"amount_cents": 100, "lat": -33.9, "lon": 151.2, "event_time": T0 + 60_000})
    assert scores["proximity"] == 0.0 and profile.place == ProximityState(-33.9, 151.2, T0 + 60_000)


def test_the_stateful_scoring_takes_a_bucket_without_places():
    from pipelines.fraud.analyzers import DEFAULT_LIMITS
    from pipelines.fraud.state import score_cards

    batch = pd.DataFrame({"txn_id": ["a", "b", "c"], "card_id": ["k", "k", "k"], "merchant_id": ["m"] * 3,
                          "amount_cents": [100, 200, 0], "lat": [None, 10.0, None], "lon": [None, 10.0, None],
                          "event_time": [T0, T0 + 1000, T0 + 2000], "produced_at": [T0] * 3, "offset": [0, 1, 2]})
    batch["lat"] = batch["lat"].astype(float)
    batch["lon"] = batch["lon"].astype(float)
    out, updated = score_cards({}, batch, 0, T0, DEFAULT_LIMITS)
    assert out["score_proximity"] == [0.0, 0.0, 0.0]
    assert all(not math.isnan(x) for name in ("score_avg_ticket", "score_velocity") for x in out[name])
    assert out["p_lat"] == [None, 10.0, 10.0]  # the place of b, kept through c


def test_the_first_repeated_id_is_named_with_its_earlier_row():
    assert first_repeat(pa.array([5, 3, 9, 3, 5, 7])) == (1, 3)   # row 3 repeats row 1 (5 repeats later)
    assert first_repeat(pa.array(["b", "a", "c", "a", "b"])) == (1, 3)
    assert first_repeat(pa.array([1, 1, 1])) == (0, 1)
    assert first_repeat(pa.array([1, 2, 3])) is None and first_repeat(pa.array(["x"])) is None


def test_the_auditor_judges_a_replayed_record_by_the_replays_rules():
    from collections import namedtuple

    from infra.config import load
    from pipelines.audit import Auditor
    from pipelines.audit.topics import INVALID, TopicIndex

    Record = namedtuple("Record", "value timestamp partition offset headers")
    auditor = Auditor.__new__(Auditor)  # only its contract check, no Kafka
    auditor.s = load()
    index = TopicIndex(auditor.s, "transactions", reject=auditor._invalid)
    old = _txn(lat=..., lon=...)  # 2018, no place: a replayed handbook transaction
    index._add(Record(old, NOW, 0, 0, [(REPLAY_HEADER, b"run-1")]))
    index._add(Record(old, NOW, 0, 1, []))            # the same without the header: too old
    index._add(Record(old, NOW, 0, 2, [("other", b"x")]))
    index._flush()
    assert index.partitions()[0].codes.tolist()[0] != INVALID
    assert index.partitions()[0].codes.tolist()[1:] == [INVALID, INVALID]
