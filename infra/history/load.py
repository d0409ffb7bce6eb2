"""`load_history`: a history file read, mapped and validated whole, as a `History` of arrays."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from infra.histories import ColumnMap
from infra.history import checks
from infra.history.checks import fmt_ms
from infra.history.mapping import ColumnPicker, check_map, ids, patterns
from infra.history.reading import HistoryError, read_table


@dataclass
class History:
    """The selected rows of a history, validated, as arrays in event-time order. Ids and patterns
    are the contract's values (not JSON-escaped: a record escapes them as it is written)."""
    path: Path
    cmap: ColumnMap
    rows: np.ndarray          # each row's number in the file (1 = the first data row)
    event_ms: np.ndarray      # int64
    txn: object               # pyarrow string arrays: the contract's ids (prefix included)
    card: object
    merchant: object
    amount: np.ndarray        # float64, in currency units as in the file
    amount_cents: np.ndarray  # int64
    is_fraud: np.ndarray      # bool
    pattern: object           # pyarrow string array: a label's pattern
    scenario: object          # the pattern column as read (pyarrow), None when the map has none
    lat: np.ndarray | None    # float64, NaN where the row has no place; None: no coordinates at all
    lon: np.ndarray | None
    currency: str

    def __len__(self) -> int:
        return len(self.event_ms)


def load_history(path: Path, cmap: ColumnMap | None = None, *, columns: str | None = None,
                 column_map: str | None = None, start: dt.date | None = None, end: dt.date | None = None
                 ) -> History:
    """Read FILE, map its columns (`cmap`, else --column-map, else --columns, else the handbook's
    when the file has them), keep the rows of the days [start, end] (UTC, both included) and
    validate them all before anything uses one (HistoryError: the first problem, in one sentence)."""
    path = Path(path)
    if start and end and start > end:
        raise HistoryError(f"--from {start} is after --to {end}.")
    picker = ColumnPicker(path, cmap, columns, column_map)
    table = read_table(path, picker)
    cmap = picker.cmap
    check_map(cmap)
    table = table.select(list(dict.fromkeys(cmap.required())))
    if table.num_rows == 0:
        raise HistoryError(f"{path.name} has no rows.")
    table, rows, event_ms = _days(table, cmap.event_time, path.name, start, end)
    checks.check_times(event_ms, rows, cmap.event_time)
    txn, raw_txn = ids(table.column(cmap.txn_id), cmap.txn_id, "txn_id", cmap.txn_id_of, rows)
    card, _ = ids(table.column(cmap.card_id), cmap.card_id, "card_id", cmap.card_of, rows)
    merchant, _ = ids(table.column(cmap.merchant_id), cmap.merchant_id, "merchant_id", cmap.merchant_of, rows)
    checks.check_unique(raw_txn, rows, cmap.txn_id)
    amount = checks.numbers(table.column(cmap.amount), cmap.amount, "amount", rows)
    cents = checks.cents(amount, txn, rows, cmap.amount)
    is_fraud = checks.fraud_flags(table.column(cmap.is_fraud), cmap.is_fraud, rows)
    scenario = table.column(cmap.pattern).combine_chunks() if cmap.pattern else None
    lat, lon = _places(table, cmap, rows)
    return History(path, cmap, rows, event_ms, txn, card, merchant, amount, cents, is_fraud,
                   patterns(table, cmap, is_fraud), scenario, lat, lon, cmap.currency)


def day_ms(day: dt.date) -> int:
    """The first millisecond of a UTC day."""
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp() * 1000)


def _days(table, column: str, name: str, start: dt.date | None, end: dt.date | None):
    """(the table's rows of the days [start, end], their numbers in the file, their times in ms):
    the times read first, so that the days are told by them."""
    rows = np.arange(1, table.num_rows + 1)
    tcol = table.column(column)
    checks.no_nulls(tcol.combine_chunks(), column, "event_time", rows)
    event_ms = checks.times_ms(tcol, column).to_numpy(zero_copy_only=False).astype(np.int64)
    keep = np.ones(len(event_ms), dtype=bool)
    if start:
        keep &= event_ms >= day_ms(start)
    if end:
        keep &= event_ms < day_ms(end + dt.timedelta(days=1))
    if not keep.any():
        span = f"{fmt_ms(int(event_ms.min()))} .. {fmt_ms(int(event_ms.max()))}"
        raise HistoryError(f"No row of {name} falls in {start or 'the start'} .. {end or 'the end'} "
                           f"(its times run {span} UTC).")
    if keep.all():
        return table, rows, event_ms
    idx = np.flatnonzero(keep)
    return table.take(pa.array(idx)), rows[idx], event_ms[idx]


def _places(table, cmap: ColumnMap, rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(lat, lon) as float64 with NaN for no place, or (None, None) when the map has no coordinates."""
    if not cmap.lat:
        return None, None
    lat = checks.numbers(table.column(cmap.lat), cmap.lat, "lat", rows, nulls=True)
    lon = checks.numbers(table.column(cmap.lon), cmap.lon, "lon", rows, nulls=True)
    checks.check_places(lat, lon, rows)
    return lat, lon
