"""A history file -> a pyarrow Table: Parquet or CSV, told apart by the file's name and first bytes."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".tsv")


class HistoryError(ValueError):
    """Bad input to the replay, in one sentence: exit 2, nothing sent."""


def file_format(path: Path) -> str:
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
    if name.endswith(PARQUET_SUFFIXES) or magic == b"PAR1":
        return "parquet"
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    raise HistoryError(f"{path} is neither Parquet nor CSV (by its name and first bytes): give a .parquet "
                       f"or .csv file.")


def read_table(path: Path, columns=None):
    """The file as a pyarrow Table. `columns(names)` picks the columns to read from the file's
    column names (a Parquet file reads only those; a CSV file is read whole, its names checked)."""
    kind = file_format(path)
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
        raise _unreadable(path, kind, exc) from None


def _unreadable(path: Path, kind: str, exc: Exception) -> HistoryError:
    """Arrow's first line of complaint, as the one sentence the user reads."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return HistoryError(f"{path} is not a readable {'Parquet' if kind == 'parquet' else 'CSV'} file "
                        f"({first.rstrip('.')}).")
