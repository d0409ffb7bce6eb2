"""`python -m simulator replay FILE`: a labelled transaction history, sent again in event time.

    python -m simulator replay FILE [--columns handbook | --column-map FIELD=COLUMN,...]
                                    [--speed S | --rate R | --max] [--from DATE] [--to DATE]
                                    [--label-delay-days D] [--run-id ID] ...

FILE is Parquet or CSV. Its columns are mapped onto the transaction contract by a ColumnMap
(infra/histories.py): the handbook's (`--columns handbook`, the default when the file has its
columns) or one written out (`--column-map txn_id=ID,event_time=TS,card_id=...`). Rows are sent in
the file's order, which must be event-time order, onto `transactions` (key: the card, header
REPLAY_HEADER: the run id, so the jobs judge its old times by the replay rule of
infra/contracts.py), each transaction's label onto `labels` (key: the txn id) only once its
feedback delay has passed in event time: the two streams are merged by time, a label's time being
its transaction's event time + the delay. A label is appended only after every transaction at or
before its time, at the first slice boundary after it (at most SLICE transactions late, never
early); labels whose time falls after the last replayed transaction are not sent (`labels_pending`
in the totals).

Pacing: `--speed S` runs event time S times as fast as the wall clock (labels paced the same
way), `--rate R` sends R transactions a second, `--max` (the default) as fast as the producer
takes them (the benchmark's). `--from`/`--to` keep whole days, UTC, both included.

Before the first record is sent, the selected rows are validated entirely: a file that cannot be
read, a missing column, times out of order, a duplicate txn id, an empty selection, a negative
amount and the like are one sentence on stderr and exit 2, with nothing sent. (An amount of 0 is
a payment of the history, a card check: the handbook has 42; the replay contract accepts it.)

Progress: a bar on stderr (event date, tx/s, ETA); the totals, counted from the broker's
acknowledgements, are one JSON line, the last on stdout. Memory: the selected rows' columns
(about 60 bytes a row: 100 MB for the handbook's 1.75 M), and the records of a slice at a time.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import re
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infra.contracts import CURRENCY_FORM, MAX_AMOUNT_CENTS, MAX_ID_BYTES
from infra.histories import (COLUMN_MAPS, DAY_MS, HANDBOOK, HISTORY_MIN_EVENT_TIME_MS, REPLAY_HEADER, ColumnMap,
                             ColumnMapError, parse_column_map)

log = logging.getLogger("simulator")

SLICE = 1024              # transactions (and labels) per append: produced_at within a few ms of the send
TICK_S = 0.02             # paced: what is due is sent every 20 ms
FLUSH_TIMEOUT_S = 90.0
PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".tsv")
_JSON_UNSAFE = r'["\\\x00-\x1f]'  # what a string needs escaped in JSON


class HistoryError(ValueError):
    """Bad input to the replay, in one sentence: exit 2, nothing sent."""


# ------------------------------------------------------------------ reading and validating

@dataclass
class History:
    """The selected rows of a history, validated, as arrays in event-time order."""
    path: Path
    cmap: ColumnMap
    rows: np.ndarray          # each row's number in the file (1 = the first data row)
    event_ms: np.ndarray      # int64
    txn: object               # pyarrow string arrays: the contract's ids (prefix included)
    card: object
    merchant: object
    amount_cents: np.ndarray  # int64
    is_fraud: np.ndarray      # bool
    pattern: object           # pyarrow string array (JSON-safe)
    lat: np.ndarray | None    # float64, NaN where the row has no place; None: no coordinates at all
    lon: np.ndarray | None
    currency: str

    def __len__(self) -> int:
        return len(self.event_ms)


def _fmt_ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _row(n: int) -> str:
    return f"row {n:,}"


def _format(path: Path) -> str:
    """"parquet" or "csv", by the file's name and first bytes (HistoryError: neither, or unreadable)."""
    if not path.exists():
        raise HistoryError(f"There is no file {path}.")
    if path.is_dir():
        raise HistoryError(f"{path} is a folder, not a Parquet or CSV file.")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise HistoryError(f"Cannot read {path} ({exc.strerror or exc}).") from None
    name = path.name.lower()
    is_parquet = name.endswith(PARQUET_SUFFIXES) or magic == b"PAR1"
    if is_parquet:
        return "parquet"
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    raise HistoryError(f"{path} is neither Parquet nor CSV (by its name and first bytes): give a .parquet "
                       f"or .csv file.")


def read_table(path: Path, columns=None):
    """The file as a pyarrow Table. `columns(names)` picks the columns to read from the file's
    column names (a Parquet file reads only those)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    kind = _format(path)
    try:
        if kind == "parquet":
            names = pq.read_schema(path).names
            wanted = columns(names) if columns else names
            return pq.read_table(path, columns=[c for c in wanted if c in names])
        delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
        table = pcsv.read_csv(path, parse_options=pcsv.ParseOptions(delimiter=delimiter))
        if columns:
            columns(table.column_names)
        return table
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        kind = "Parquet" if kind == "parquet" else "CSV"
        raise HistoryError(f"{path} is not a readable {kind} file ({first.rstrip('.')}).") from None


def choose_map(names: list[str], columns: str | None, column_map: str | None) -> ColumnMap:
    """The column map: --column-map, else --columns NAME, else the handbook's if the file has its columns."""
    if column_map is not None:
        try:
            return parse_column_map(column_map)
        except ColumnMapError as exc:
            raise HistoryError(str(exc)) from None
    if columns is not None:
        return COLUMN_MAPS[columns]
    if all(c in names for c in HANDBOOK.required()):
        return HANDBOOK
    missing = next(c for c in HANDBOOK.required() if c not in names)
    raise HistoryError(f"The file has no column {missing} of the handbook's columns: name its columns with "
                       f"--column-map txn_id=...,event_time=...,card_id=...,merchant_id=...,amount=...,is_fraud=....")


def _times_ms(col, name: str):
    """A time column -> int64 ms since the epoch (naive times read as UTC)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:
            col = pc.cast(col, pa.timestamp("ns"))
        except pa.ArrowException:
            bad = next((v for v in col.to_pylist() if v is not None and _not_a_time(v)), "?")
            raise HistoryError(f"The column {name} (event_time) holds text that is not a time, such as {bad!r}.") \
                from None
        t = col.type
    if pa.types.is_date(t):
        col = pc.cast(col, pa.timestamp("ms"))
        t = col.type
    if not pa.types.is_timestamp(t):
        raise HistoryError(f"The column {name} (event_time) holds {t}, not times: give it as timestamps or as "
                           f"ISO-8601 text.")
    return pc.cast(pc.cast(col, pa.timestamp("ms", t.tz), safe=False), pa.int64())


def _not_a_time(value: str) -> bool:
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        pc.cast(pa.array([value]), pa.timestamp("ns"))
        return False
    except pa.ArrowException:
        return True


def _day_ms(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp() * 1000)


def _first(mask: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if len(idx) else None


def _ids(col, name: str, field: str, make, rows: np.ndarray):
    """An id column -> the contract's ids (pyarrow strings, JSON-escaped where needed): no nulls,
    none empty, none longer than MAX_ID_BYTES."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    _no_nulls(col, name, field, rows)
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise HistoryError(f"The column {name} ({field}) holds {t}: ids are whole numbers or text.")
    text = pc.cast(col, pa.string())
    ids = pc.binary_join_element_wise(pa.scalar(make("")), text, "")
    if not pa.types.is_integer(t):
        blank = pc.equal(pc.utf8_trim_whitespace(text), "").to_numpy(zero_copy_only=False)
        at = _first(blank)
        if at is not None:
            raise HistoryError(f"{_row(rows[at]).capitalize()} has an empty {field} in column {name}.")
    long = pc.greater(pc.binary_length(ids), MAX_ID_BYTES).to_numpy(zero_copy_only=False)
    at = _first(long)
    if at is not None:
        raise HistoryError(f"{_row(rows[at]).capitalize()} has a {field} longer than {MAX_ID_BYTES} bytes "
                           f"in column {name}.")
    if not pa.types.is_integer(t) and pc.any(pc.match_substring_regex(ids, _JSON_UNSAFE)).as_py():
        ids = pa.array([json.dumps(v, ensure_ascii=False)[1:-1] for v in ids.to_pylist()], pa.string())
    return ids, col


def _no_nulls(col, name: str, field: str, rows: np.ndarray) -> None:
    if col.null_count:
        at = _first(col.is_null().to_numpy(zero_copy_only=False))
        raise HistoryError(f"{_row(rows[at]).capitalize()} has no {field} (column {name} is empty there).")


def _numbers(col, name: str, field: str, rows: np.ndarray, nulls: bool = False) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not nulls:
        _no_nulls(col, name, field, rows)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_decimal(col.type)):
        raise HistoryError(f"The column {name} ({field}) holds {col.type}, not numbers.")
    return pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)


def load_history(path: Path, cmap: ColumnMap | None = None, *, columns: str | None = None,
                 column_map: str | None = None, start: dt.date | None = None, end: dt.date | None = None
                 ) -> History:
    """Read FILE, map its columns, keep the rows of the days [start, end] (UTC, both included) and
    validate them all (HistoryError: the first problem, in one sentence)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    path = Path(path)
    if start and end and start > end:
        raise HistoryError(f"--from {start} is after --to {end}.")
    chosen: list[ColumnMap] = [cmap] if cmap else []

    def pick(names: list[str]) -> list[str]:
        if not chosen:
            chosen.append(choose_map(names, columns, column_map))
        for c in chosen[0].required():
            if c not in names:
                raise HistoryError(f"{path.name} has no column {c!r} (the {chosen[0].name} column map's "
                                   f"{_field_of(chosen[0], c)}).")
        return chosen[0].required()

    table = read_table(path, pick)
    cmap = chosen[0]
    if not re.fullmatch(CURRENCY_FORM, cmap.currency, re.ASCII):
        raise HistoryError(f"The currency {cmap.currency!r} of the {cmap.name} column map is not ISO 4217's "
                           f"form (three capital letters, such as EUR).")
    if len(cmap.id_prefix.encode()) > MAX_ID_BYTES // 2 or re.search(_JSON_UNSAFE, cmap.id_prefix):
        raise HistoryError(f"The id prefix {cmap.id_prefix!r} is too long or holds quotes, backslashes or "
                           f"control characters.")
    table = table.select(list(dict.fromkeys(cmap.required())))
    if table.num_rows == 0:
        raise HistoryError(f"{path.name} has no rows.")
    rows = np.arange(1, table.num_rows + 1)
    tcol = table.column(cmap.event_time)
    _no_nulls(tcol.combine_chunks(), cmap.event_time, "event_time", rows)
    event_ms = _times_ms(tcol, cmap.event_time).to_numpy(zero_copy_only=False).astype(np.int64)

    keep = np.ones(len(event_ms), dtype=bool)
    if start:
        keep &= event_ms >= _day_ms(start)
    if end:
        keep &= event_ms < _day_ms(end + dt.timedelta(days=1))
    if not keep.any():
        span = f"{_fmt_ms(int(event_ms.min()))} .. {_fmt_ms(int(event_ms.max()))}"
        raise HistoryError(f"No row of {path.name} falls in {start or 'the start'} .. {end or 'the end'} "
                           f"(its times run {span} UTC).")
    if not keep.all():
        idx = np.flatnonzero(keep)
        table, rows, event_ms = table.take(pa.array(idx)), rows[idx], event_ms[idx]

    back = _first(np.diff(event_ms) < 0)
    if back is not None:
        raise HistoryError(f"The times are not in order: {_row(rows[back + 1])} ({_fmt_ms(event_ms[back + 1])}) "
                           f"comes after {_row(rows[back])} ({_fmt_ms(event_ms[back])}); sort the file by "
                           f"{cmap.event_time} first.")
    early = _first(event_ms < HISTORY_MIN_EVENT_TIME_MS)
    if early is not None:
        raise HistoryError(f"{_row(rows[early]).capitalize()} is dated {_fmt_ms(event_ms[early])}, before 2000: "
                           f"not a time this replay sends.")
    late = _first(event_ms > int(time.time() * 1000))
    if late is not None:
        raise HistoryError(f"{_row(rows[late]).capitalize()} is dated {_fmt_ms(event_ms[late])}, in the future.")

    txn, raw_txn = _ids(table.column(cmap.txn_id), cmap.txn_id, "txn_id", cmap.txn_id_of, rows)
    card, _ = _ids(table.column(cmap.card_id), cmap.card_id, "card_id", cmap.card_of, rows)
    merchant, _ = _ids(table.column(cmap.merchant_id), cmap.merchant_id, "merchant_id", cmap.merchant_of, rows)
    twice = _first_repeat(raw_txn)
    if twice is not None:
        earlier, again = twice
        raise HistoryError(f"The txn id {raw_txn[again].as_py()} (column {cmap.txn_id}) is in {_row(rows[earlier])} "
                           f"and again in {_row(rows[again])}: each transaction is sent once.")

    amount = _numbers(table.column(cmap.amount), cmap.amount, "amount", rows)
    bad = _first(~np.isfinite(amount) | (amount < 0))
    if bad is not None:
        what = "a negative amount" if amount[bad] < 0 else "an amount that is not a number"
        raise HistoryError(f"{_row(rows[bad]).capitalize()} (txn {txn[bad].as_py()}) has {what} "
                           f"({amount[bad]:g}) in column {cmap.amount}.")
    cents = np.rint(amount * 100).astype(np.int64)
    big = _first(cents > MAX_AMOUNT_CENTS)
    if big is not None:
        raise HistoryError(f"{_row(rows[big]).capitalize()} (txn {txn[big].as_py()}) has an amount of "
                           f"{amount[big]:,.2f}, over the contract's {MAX_AMOUNT_CENTS / 100:,.0f}.")

    fraud_col = table.column(cmap.is_fraud).combine_chunks()
    _no_nulls(fraud_col, cmap.is_fraud, "is_fraud", rows)
    if pa.types.is_boolean(fraud_col.type):
        is_fraud = fraud_col.to_numpy(zero_copy_only=False).astype(bool)
    elif pa.types.is_integer(fraud_col.type):
        values = fraud_col.to_numpy(zero_copy_only=False)
        odd = _first((values != 0) & (values != 1))
        if odd is not None:
            raise HistoryError(f"{_row(rows[odd]).capitalize()} has is_fraud {values[odd]} in column "
                               f"{cmap.is_fraud}: 0 or 1 (or true/false) expected.")
        is_fraud = values == 1
    else:
        raise HistoryError(f"The column {cmap.is_fraud} (is_fraud) holds {fraud_col.type}: 0/1 or true/false "
                           f"expected.")

    pattern = _patterns(table, cmap, is_fraud)
    lat = lon = None
    if cmap.lat:
        lat = _numbers(table.column(cmap.lat), cmap.lat, "lat", rows, nulls=True)
        lon = _numbers(table.column(cmap.lon), cmap.lon, "lon", rows, nulls=True)
        one = _first(np.isnan(lat) != np.isnan(lon))
        if one is not None:
            has, lacks = ("lat", "lon") if np.isnan(lon[one]) else ("lon", "lat")
            raise HistoryError(f"{_row(rows[one]).capitalize()} has a {has} but no {lacks}: a place is both or "
                               f"neither.")
        out = _first(~np.isnan(lat) & ((np.abs(lat) > 90) | (np.abs(lon) > 180) | ~np.isfinite(lat)
                                       | ~np.isfinite(lon)))
        if out is not None:
            raise HistoryError(f"{_row(rows[out]).capitalize()} has the place ({lat[out]}, {lon[out]}), out of "
                               f"range (|lat| <= 90, |lon| <= 180).")
    return History(path, cmap, rows, event_ms, txn, card, merchant, cents, is_fraud, pattern, lat, lon,
                   cmap.currency)


def _first_repeat(ids) -> tuple[int, int] | None:
    """(the first position of an id, the first position that repeats an earlier id), or None when
    all ids differ. By sorting (a stable sort of positions, then neighbours compared): a hash set
    of 1.75 M ids costs Arrow ~370 MB at its peak, the sort ~30 MB."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(ids) < 2:
        return None
    if pa.types.is_integer(ids.type):
        values = ids.to_numpy(zero_copy_only=False)
        order = np.argsort(values, kind="stable")
        same = values[order[1:]] == values[order[:-1]]
    else:
        order = pc.sort_indices(ids).to_numpy(zero_copy_only=False)  # stable
        ranked = ids.take(pa.array(order))
        same = pc.equal(ranked.slice(1), ranked.slice(0, len(ranked) - 1)).to_numpy(zero_copy_only=False)
    pairs = np.flatnonzero(same)
    if not len(pairs):
        return None
    again = int(order[pairs + 1].min())  # the first row whose id an earlier row has
    k = int(np.flatnonzero(order == again)[0])
    while k > 0 and same[k - 1]:  # back to its group's first (the earliest: the sort is stable)
        k -= 1
    return int(order[k]), again


def _field_of(cmap: ColumnMap, column: str) -> str:
    for field in ("txn_id", "event_time", "card_id", "merchant_id", "amount", "is_fraud", "pattern", "lat", "lon"):
        if getattr(cmap, field) == column:
            return field
    return "column"


def _patterns(table, cmap: ColumnMap, is_fraud: np.ndarray):
    """Each row's label pattern: the pattern column's value (named by the map's pattern_names),
    or "fraud" / "normal" where there is none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    default = pa.array(np.where(is_fraud, "fraud", "normal"), pa.string())
    if not cmap.pattern:
        return default
    col = table.column(cmap.pattern).combine_chunks()
    names = dict(cmap.pattern_names)
    if names:
        values = pc.cast(col, pa.string()) if not pa.types.is_integer(col.type) else col
        keys = list(names)
        key_type = values.type
        try:
            index = pc.index_in(values, value_set=pa.array(keys, key_type))
        except (pa.ArrowException, TypeError):
            index = pa.nulls(len(col), pa.int32())
        named = pc.take(pa.array(list(names.values()), pa.string()), index)
        text = pc.coalesce(named, pc.cast(col, pa.string()))
    else:
        text = pc.cast(col, pa.string())
    text = pc.coalesce(text, default)
    if pc.any(pc.match_substring_regex(text, _JSON_UNSAFE)).as_py():
        text = pa.array([json.dumps(v, ensure_ascii=False)[1:-1] for v in text.to_pylist()], pa.string())
    return text


# ------------------------------------------------------------------ the merged schedule

@dataclass(frozen=True)
class Schedule:
    """When each label may be sent: `known_ms` (its time: its transaction's event time + the delay,
    in transaction order, so ascending), `after` (how many transactions must be sent before it:
    all those at or before its time), `labels` (how many are sent at all: those whose time is not
    after the last transaction)."""
    known_ms: np.ndarray
    after: np.ndarray
    labels: int

    @property
    def pending(self) -> int:
        return len(self.known_ms) - self.labels


def schedule(event_ms: np.ndarray, delay_ms: int) -> Schedule:
    known = event_ms + np.int64(delay_ms)
    after = np.searchsorted(event_ms, known, side="right")
    labels = int(np.searchsorted(known, event_ms[-1], side="right")) if len(event_ms) else 0
    return Schedule(known, after, labels)


# ------------------------------------------------------------------ records

def _join(*parts):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(*[pa.scalar(p) if isinstance(p, str) else p for p in parts], "")


def _binary_list(arr) -> list[bytes]:
    import pyarrow as pa

    return arr.cast(pa.binary()).to_pylist()


def transactions(h: History, i: int, j: int) -> tuple[list[bytes], list[bytes]]:
    """(keys, values without produced_at's value and the closing brace) of transactions [i, j)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    card = h.card.slice(i, j - i)
    fields = ['{"txn_id":"', h.txn.slice(i, j - i), '","card_id":"', card, '","merchant_id":"',
              h.merchant.slice(i, j - i), '","amount_cents":', pc.cast(pa.array(h.amount_cents[i:j]), pa.string()),
              f',"currency":"{h.currency}"']
    if h.lat is not None:
        lat, lon = pa.array(h.lat[i:j], from_pandas=True), pa.array(h.lon[i:j], from_pandas=True)
        place = _join(',"lat":', pc.cast(lat, pa.string()), ',"lon":', pc.cast(lon, pa.string()))
        fields.append(pc.fill_null(place, ""))
    fields += [',"event_time":', pc.cast(pa.array(h.event_ms[i:j]), pa.string()), ',"produced_at":']
    return _binary_list(card), _binary_list(_join(*fields))


def labels(h: History, s: Schedule, i: int, j: int) -> tuple[list[bytes], list[bytes]]:
    """(keys, values) of the labels of transactions [i, j)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    txn = h.txn.slice(i, j - i)
    fraud = pa.array(np.where(h.is_fraud[i:j], "true", "false"), pa.string())
    value = _join('{"txn_id":"', txn, '","is_fraud":', fraud, ',"pattern":"', h.pattern.slice(i, j - i),
                  '","is_late":false,"card_id":"', h.card.slice(i, j - i), '","merchant_id":"',
                  h.merchant.slice(i, j - i), '","event_time":', pc.cast(pa.array(h.event_ms[i:j]), pa.string()),
                  ',"known_at":', pc.cast(pa.array(s.known_ms[i:j]), pa.string()), "}")
    return _binary_list(txn), _binary_list(value)


# ------------------------------------------------------------------ pacing and sending

@dataclass(frozen=True)
class Pace:
    """How fast: `speed` event seconds per wall second, or `rate` transactions a second, or neither
    (as fast as the producer takes them)."""
    speed: float | None = None
    rate: float | None = None

    def describe(self) -> str:
        if self.speed:
            return f"{self.speed:g}x event time"
        if self.rate:
            return f"{self.rate:,.0f} tx/s"
        return "as fast as possible"


@dataclass
class Totals:
    sent: int
    failed: int
    labels_sent: int
    labels_failed: int
    labels_pending: int
    unacknowledged: int
    run_id: str
    first_event_time: int | None
    last_event_time: int | None
    first_event_utc: str | None
    last_event_utc: str | None
    tx_per_s: float
    wall_s: float
    interrupted: bool
    topic: str
    labels_topic: str

    def line(self) -> str:
        return json.dumps(self.__dict__)


class Replayer:
    """One replay: a validated history, a sender (simulator.producer.Producer), `run()` -> Totals."""

    def __init__(self, history: History, sender, topic: str, labels_topic: str, *, run_id: str,
                 delay_ms: int, pace: Pace = Pace(), progress: bool = True, err=sys.stderr, slice_size: int = SLICE):
        self.h = history
        self.sender = sender
        self.topic, self.labels_topic = topic, labels_topic
        self.run_id = run_id
        self.headers = [(REPLAY_HEADER, run_id.encode())]
        self.schedule = schedule(history.event_ms, delay_ms)
        self.pace = pace
        self.progress = progress
        self.err = err
        self.slice = slice_size
        self.stopping = False
        self.sent_tx = 0      # appended (not yet acknowledged) transactions and labels
        self.sent_labels = 0

    def _on_signal(self, _signum, _frame) -> None:
        self.stopping = True

    def _due(self, now: float, started: float, i: int) -> tuple[int, float | None]:
        """(how many transactions are due, the event clock in ms under --speed)."""
        n, t = len(self.h), self.h.event_ms
        if self.pace.speed:
            clock = t[0] + (now - started) * self.pace.speed * 1000
            return int(np.searchsorted(t, clock, side="right")), clock
        if self.pace.rate:
            return min(n, int((now - started) * self.pace.rate) + 1), None
        return n, None

    def run(self) -> Totals:
        from tqdm import tqdm

        h, s, sender = self.h, self.schedule, self.sender
        n, total_labels = len(h), s.labels
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)} \
            if _main_thread() else {}
        bar = tqdm(total=n, unit="tx", unit_scale=True, file=self.err, disable=not self.progress,
                   mininterval=0.5, smoothing=0.1, dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]")
        started = time.monotonic()
        i = l = 0
        try:
            while (i < n or l < total_labels) and not self.stopping:
                now = time.monotonic()
                due, clock = self._due(now, started, i)
                # first the labels due before transaction i: every transaction at or before their
                # time is sent (and under --speed the event clock has reached it)
                m = int(np.searchsorted(s.after[:total_labels], i, side="right"))
                if clock is not None:
                    m = min(m, int(np.searchsorted(s.known_ms[:total_labels], clock, side="right")))
                if m > l:
                    m = min(m, l + self.slice)
                    sender.wait_for_room(lambda: self.stopping)
                    keys, values = labels(h, s, l, m)
                    sender.send_many(self.labels_topic, keys, values, int(time.time() * 1000), headers=self.headers)
                    self.sent_labels += m - l
                    l = m
                    continue
                j = min(max(due, i), i + self.slice, n)
                if j == i:
                    time.sleep(self._wait(i, l, clock))
                    continue
                sender.wait_for_room(lambda: self.stopping)
                keys, values = transactions(h, i, j)
                stamp = int(time.time() * 1000)
                tail = b"%d}" % stamp
                sender.send_many(self.topic, keys, [v + tail for v in values], stamp, headers=self.headers)
                self.sent_tx += j - i
                bar.update(j - i)
                bar.set_postfix_str(f"event day {_fmt_ms(int(h.event_ms[j - 1]))[:10]}", refresh=False)
                i = j
            self._flush()
        finally:
            bar.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        wall = time.monotonic() - started
        tx, lb = sender.totals(self.topic), sender.totals(self.labels_topic)
        first = int(h.event_ms[0]) if n else None
        last = int(h.event_ms[i - 1]) if i else None
        return Totals(tx.sent, tx.failed, lb.sent, lb.failed, len(s.known_ms) - l,
                      tx.appended + lb.appended - tx.sent - tx.failed - lb.sent - lb.failed,
                      self.run_id, first, last, _iso(first), _iso(last),
                      round(tx.sent / wall, 1) if wall > 0 else 0.0, round(wall, 3), self.stopping,
                      self.topic, self.labels_topic)

    def _wait(self, i: int, l: int, clock: float | None) -> float:
        """Seconds to sleep when nothing is due (at most a tick)."""
        if clock is None or not self.pace.speed:
            return TICK_S
        upcoming = [float(self.h.event_ms[i])] if i < len(self.h) else []
        if l < self.schedule.labels:
            upcoming.append(float(self.schedule.known_ms[l]))
        if not upcoming:
            return TICK_S
        return min(max((min(upcoming) - clock) / self.pace.speed / 1000, 0.001), TICK_S * 2.5)

    def _flush(self) -> None:
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while self.sender.outstanding and time.monotonic() < deadline:
            self.sender.flush(timeout=0.5)


def _iso(ms: int | None) -> str | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# ------------------------------------------------------------------ the command

def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a date as YYYY-MM-DD, not {text!r}") from None


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number of days of 0 or more, not {text!r}")
    return value


def _run_id(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", text):
        raise argparse.ArgumentTypeError(f"must be 1 to 100 letters, digits or . _ : -, not {text!r}")
    return text


def new_run_id() -> str:
    return f"replay-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        text = message[0].upper() + message[1:]
        print(f"replay: {text.rstrip('.')}.", file=sys.stderr)
        raise SystemExit(2)


def _positive(what):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
        return value
    return parse


def parser(settings) -> argparse.ArgumentParser:
    p = _Parser(prog="python -m simulator replay",
                description="Replay a labelled transaction history onto Kafka in event time, each label after "
                            "its feedback delay.")
    p.add_argument("file", metavar="FILE", type=Path, help="the history: Parquet or CSV, in event-time order")
    cols = p.add_mutually_exclusive_group()
    cols.add_argument("--columns", choices=sorted(COLUMN_MAPS),
                      help="a built-in column map (default: handbook, when the file has its columns)")
    cols.add_argument("--column-map", metavar="FIELD=COLUMN,...",
                      help="the file's columns: txn_id=,event_time=,card_id=,merchant_id=,amount=,is_fraud= "
                           "(and pattern=, lat=,lon=, currency=EUR, id_prefix=)")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=_positive("a positive number of event seconds per second"),
                      help="event seconds per wall second (86400: a day a second)")
    pace.add_argument("--rate", type=_positive("a positive number of transactions per second"),
                      help="transactions per second")
    pace.add_argument("--max", action="store_true", help="as fast as the producer goes (the default)")
    p.add_argument("--from", dest="start", type=_date, metavar="DATE", help="first day replayed (UTC, included)")
    p.add_argument("--to", dest="end", type=_date, metavar="DATE", help="last day replayed (UTC, included)")
    p.add_argument("--label-delay-days", type=_non_negative, default=float(settings.label_delay_days),
                   help=f"a label is sent this long after its transaction, in event time "
                        f"({settings.label_delay_days}; the fraud job assumes LABEL_DELAY_DAYS)")
    p.add_argument("--run-id", type=_run_id, help="the replay header's value (default: a fresh one, printed)")
    p.add_argument("--topic", default=settings.topics.transactions, help="transactions topic")
    p.add_argument("--labels-topic", default=settings.topics.labels, help="labels topic")
    p.add_argument("--bootstrap", default=settings.kafka_bootstrap, help="Kafka bootstrap servers")
    p.add_argument("--linger-ms", type=int, default=5, help="producer linger (5 ms)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None, producer_factory=None) -> int:
    """The command; `producer_factory(bootstrap, linger_ms)` makes the sender (default: the bulk
    Producer). Nothing is sent, nor any connection opened, before the history is validated."""
    from infra import logs
    from simulator.producer import ProducerError

    logs.setup()
    try:
        return _main(argv, producer_factory)
    except HistoryError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return 2
    except ProducerError as exc:
        print(f"replay: {exc.code}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("replay: interrupted before the first transaction was sent.", file=sys.stderr)
        return 130


def _main(argv, producer_factory) -> int:
    from infra.config import load

    settings = load()
    args = parser(settings).parse_args(argv)
    history = load_history(args.file, columns=args.columns, column_map=args.column_map,
                           start=args.start, end=args.end)
    delay_ms = round(args.label_delay_days * DAY_MS)
    run_id = args.run_id or new_run_id()
    pace = Pace(speed=args.speed, rate=args.rate)
    plan = schedule(history.event_ms, delay_ms)

    if producer_factory is None:
        from simulator.producer import Producer

        def producer_factory(bootstrap, linger_ms):
            return Producer(bootstrap, linger_ms=linger_ms, client_id="cardstream-replay")

    producer = producer_factory(args.bootstrap, args.linger_ms)  # ProducerError: one sentence
    try:
        _ensure_topics(settings, args)
        print(f"replay: run {run_id}: {len(history):,} transactions of {history.path.name} (columns: "
              f"{history.cmap.name}), {_fmt_ms(int(history.event_ms[0]))} .. {_fmt_ms(int(history.event_ms[-1]))} "
              f"UTC, to {args.topic} / {args.labels_topic} on {args.bootstrap}, {pace.describe()}; labels "
              f"{args.label_delay_days:g} days after their transactions: {plan.labels:,} to send, "
              f"{plan.pending:,} later than the last transaction.", file=sys.stderr, flush=True)
        totals = Replayer(history, producer, args.topic, args.labels_topic, run_id=run_id, delay_ms=delay_ms,
                          pace=pace, progress=not args.no_progress).run()
    finally:
        producer.close()
    print(totals.line(), flush=True)
    if totals.failed or totals.labels_failed or totals.unacknowledged:
        print(f"replay: {totals.failed + totals.labels_failed:,} messages failed and {totals.unacknowledged:,} "
              f"were not acknowledged.", file=sys.stderr)
        return 1
    if totals.interrupted:
        print(f"replay: interrupted after {totals.sent:,} transactions (up to {totals.last_event_utc}).",
              file=sys.stderr)
        return 130
    return 0


def _ensure_topics(settings, args) -> None:
    from dataclasses import replace

    from kafka.errors import KafkaError

    from infra.topics import ensure_topics
    from simulator.producer import ProducerError

    try:
        ensure_topics([args.topic, args.labels_topic], s=replace(settings, external_bootstrap=args.bootstrap))
    except KafkaError as exc:
        raise ProducerError(f"Could not create the topics {args.topic} and {args.labels_topic} "
                            f"({type(exc).__name__}).") from None
