"""The column map (infra/histories.py) chosen for a file and applied: which columns are read, the
contract's ids made from the file's, each label's pattern. The values are the contract's own,
not yet JSON-escaped: `json_escaped` does that where a record is written."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from infra.contracts import CURRENCY_FORM, MAX_ID_BYTES
from infra.histories import COLUMN_MAPS, HANDBOOK, ColumnMap, ColumnMapError, parse_column_map
from infra.history.checks import first, no_nulls, row
from infra.history.reading import HistoryError

JSON_UNSAFE = r'["\\\x00-\x1f]'  # what a string needs escaped in JSON
FIELDS = ("txn_id", "event_time", "card_id", "merchant_id", "amount", "is_fraud", "pattern", "lat", "lon")


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


class ColumnPicker:
    """`read_table`'s `columns`: the map's columns, the map being the one given or, when none is,
    the one `choose_map` picks from the file's column names (known only once the file is open).
    `cmap` is the map used, after the call."""

    def __init__(self, path: Path, cmap: ColumnMap | None, columns: str | None, column_map: str | None):
        self.path, self.cmap, self.columns, self.column_map = path, cmap, columns, column_map

    def __call__(self, names: list[str]) -> list[str]:
        if self.cmap is None:
            self.cmap = choose_map(names, self.columns, self.column_map)
        for c in self.cmap.required():
            if c not in names:
                raise HistoryError(f"{self.path.name} has no column {c!r} (the {self.cmap.name} column map's "
                                   f"{field_of(self.cmap, c)}).")
        return self.cmap.required()


def field_of(cmap: ColumnMap, column: str) -> str:
    """The contract's field a column of the file holds, by the map (for a message)."""
    for field in FIELDS:
        if getattr(cmap, field) == column:
            return field
    return "column"


def check_map(cmap: ColumnMap) -> None:
    """The map's fixed values: a currency of ISO 4217's form, an id prefix short and JSON-safe."""
    if not re.fullmatch(CURRENCY_FORM, cmap.currency, re.ASCII):
        raise HistoryError(f"The currency {cmap.currency!r} of the {cmap.name} column map is not ISO 4217's "
                           f"form (three capital letters, such as EUR).")
    if len(cmap.id_prefix.encode()) > MAX_ID_BYTES // 2 or re.search(JSON_UNSAFE, cmap.id_prefix):
        raise HistoryError(f"The id prefix {cmap.id_prefix!r} is too long or holds quotes, backslashes or "
                           f"control characters.")


def ids(col, name: str, field: str, make, rows: np.ndarray):
    """An id column -> (the contract's ids as pyarrow strings, the column as read): no nulls, none
    empty, none longer than MAX_ID_BYTES. `make` is the map's txn_id_of / card_of / merchant_of."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    no_nulls(col, name, field, rows)
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise HistoryError(f"The column {name} ({field}) holds {t}: ids are whole numbers or text.")
    text = pc.cast(col, pa.string())
    out = pc.binary_join_element_wise(pa.scalar(make("")), text, "")
    if not pa.types.is_integer(t):
        at = first(pc.equal(pc.utf8_trim_whitespace(text), "").to_numpy(zero_copy_only=False))
        if at is not None:
            raise HistoryError(f"{row(rows[at]).capitalize()} has an empty {field} in column {name}.")
    at = first(pc.greater(pc.binary_length(out), MAX_ID_BYTES).to_numpy(zero_copy_only=False))
    if at is not None:
        raise HistoryError(f"{row(rows[at]).capitalize()} has a {field} longer than {MAX_ID_BYTES} bytes "
                           f"in column {name}.")
    return out, col


def patterns(table, cmap: ColumnMap, is_fraud: np.ndarray):
    """Each row's label pattern: the pattern column's value (named by the map's pattern_names),
    or "fraud" / "normal" where there is none."""
    default = pa.array(np.where(is_fraud, "fraud", "normal"), pa.string())
    if not cmap.pattern:
        return default
    col = table.column(cmap.pattern).combine_chunks()
    names = dict(cmap.pattern_names)
    text = pc.coalesce(_named(col, names), pc.cast(col, pa.string())) if names else pc.cast(col, pa.string())
    return pc.coalesce(text, default)


def _named(col, names: dict):
    """The map's name of each value of the pattern column (null where it names none)."""
    values = pc.cast(col, pa.string()) if not pa.types.is_integer(col.type) else col
    try:
        index = pc.index_in(values, value_set=pa.array(list(names), values.type))
    except (pa.ArrowException, TypeError):
        index = pa.nulls(len(col), pa.int32())
    return pc.take(pa.array(list(names.values()), pa.string()), index)


def json_escaped(text):
    """Strings as they stand between a JSON string's quotes: unchanged unless one holds a quote,
    a backslash or a control character (then all are escaped, one by one: rare)."""
    if pc.any(pc.match_substring_regex(text, JSON_UNSAFE)).as_py():
        return pa.array([json.dumps(v, ensure_ascii=False)[1:-1] for v in text.to_pylist()], pa.string())
    return text
