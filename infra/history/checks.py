"""Each column of a history checked against the contract, the first problem said in one sentence
(HistoryError) naming the file's row: times (in order, since 2000, not in the future), ids
(each transaction once), amounts, labels, places."""
from __future__ import annotations

import datetime as dt
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infra.contracts import MAX_AMOUNT_CENTS
from infra.histories import HISTORY_MIN_EVENT_TIME_MS
from infra.history.reading import HistoryError


def fmt_ms(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def row(n: int) -> str:
    return f"row {n:,}"


def first(mask: np.ndarray) -> int | None:
    """The position of the first True, or None."""
    idx = np.flatnonzero(mask)
    return int(idx[0]) if len(idx) else None


def no_nulls(col, name: str, field: str, rows: np.ndarray) -> None:
    if col.null_count:
        at = first(col.is_null().to_numpy(zero_copy_only=False))
        raise HistoryError(f"{row(rows[at]).capitalize()} has no {field} (column {name} is empty there).")


def times_ms(col, name: str):
    """A time column -> int64 ms since the epoch (naive times read as UTC)."""
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
    try:
        pc.cast(pa.array([value]), pa.timestamp("ns"))
        return False
    except pa.ArrowException:
        return True


def check_times(event_ms: np.ndarray, rows: np.ndarray, column: str) -> None:
    """In event-time order (the replay sends in the file's order), since 2000, none in the future."""
    back = first(np.diff(event_ms) < 0)
    if back is not None:
        raise HistoryError(f"The times are not in order: {row(rows[back + 1])} ({fmt_ms(event_ms[back + 1])}) "
                           f"comes after {row(rows[back])} ({fmt_ms(event_ms[back])}); sort the file by "
                           f"{column} first.")
    early = first(event_ms < HISTORY_MIN_EVENT_TIME_MS)
    if early is not None:
        raise HistoryError(f"{row(rows[early]).capitalize()} is dated {fmt_ms(event_ms[early])}, before 2000: "
                           f"not a time this replay sends.")
    late = first(event_ms > int(time.time() * 1000))
    if late is not None:
        raise HistoryError(f"{row(rows[late]).capitalize()} is dated {fmt_ms(event_ms[late])}, in the future.")


def check_unique(raw_txn, rows: np.ndarray, column: str) -> None:
    """Each transaction once: a txn id twice is named with both its rows."""
    twice = first_repeat(raw_txn)
    if twice is not None:
        earlier, again = twice
        raise HistoryError(f"The txn id {raw_txn[again].as_py()} (column {column}) is in {row(rows[earlier])} "
                           f"and again in {row(rows[again])}: each transaction is sent once.")


def first_repeat(ids) -> tuple[int, int] | None:
    """(the first position of an id, the first position that repeats an earlier id), or None when
    all ids differ. By sorting (a stable sort of positions, then neighbours compared): a hash set
    of 1.75 M ids costs Arrow ~370 MB at its peak, the sort ~30 MB."""
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


def numbers(col, name: str, field: str, rows: np.ndarray, nulls: bool = False) -> np.ndarray:
    """A numeric column -> float64 (NaN for a null, where `nulls` allows them)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not nulls:
        no_nulls(col, name, field, rows)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_decimal(col.type)):
        raise HistoryError(f"The column {name} ({field}) holds {col.type}, not numbers.")
    return pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)


def cents(amount: np.ndarray, txn, rows: np.ndarray, column: str) -> np.ndarray:
    """Amounts in currency units -> whole cents: none negative or not a number, none over the
    contract's maximum (0 is a payment: a card check)."""
    bad = first(~np.isfinite(amount) | (amount < 0))
    if bad is not None:
        what = "a negative amount" if amount[bad] < 0 else "an amount that is not a number"
        raise HistoryError(f"{row(rows[bad]).capitalize()} (txn {txn[bad].as_py()}) has {what} "
                           f"({amount[bad]:g}) in column {column}.")
    out = np.rint(amount * 100).astype(np.int64)
    big = first(out > MAX_AMOUNT_CENTS)
    if big is not None:
        raise HistoryError(f"{row(rows[big]).capitalize()} (txn {txn[big].as_py()}) has an amount of "
                           f"{amount[big]:,.2f}, over the contract's {MAX_AMOUNT_CENTS / 100:,.0f}.")
    return out


def fraud_flags(col, name: str, rows: np.ndarray) -> np.ndarray:
    """The label column -> bool: true/false, or 0/1."""
    col = col.combine_chunks()
    no_nulls(col, name, "is_fraud", rows)
    if pa.types.is_boolean(col.type):
        return col.to_numpy(zero_copy_only=False).astype(bool)
    if not pa.types.is_integer(col.type):
        raise HistoryError(f"The column {name} (is_fraud) holds {col.type}: 0/1 or true/false expected.")
    values = col.to_numpy(zero_copy_only=False)
    odd = first((values != 0) & (values != 1))
    if odd is not None:
        raise HistoryError(f"{row(rows[odd]).capitalize()} has is_fraud {values[odd]} in column "
                           f"{name}: 0 or 1 (or true/false) expected.")
    return values == 1


def check_places(lat: np.ndarray, lon: np.ndarray, rows: np.ndarray) -> None:
    """A place is both coordinates or neither, and in range."""
    one = first(np.isnan(lat) != np.isnan(lon))
    if one is not None:
        has, lacks = ("lat", "lon") if np.isnan(lon[one]) else ("lon", "lat")
        raise HistoryError(f"{row(rows[one]).capitalize()} has a {has} but no {lacks}: a place is both or "
                           f"neither.")
    out = first(~np.isnan(lat) & ((np.abs(lat) > 90) | (np.abs(lon) > 180) | ~np.isfinite(lat)
                                  | ~np.isfinite(lon)))
    if out is not None:
        raise HistoryError(f"{row(rows[out]).capitalize()} has the place ({lat[out]}, {lon[out]}), out of "
                           f"range (|lat| <= 90, |lon| <= 180).")
