"""A labelled transaction history read from its file, mapped onto the contract and validated:
one reader for the replay (`python -m simulator replay`) and the handbook's frames
(pipelines/fraud/handbook.py), so a row means the same payment in each.

    reading.py     the file: Parquet or CSV, by its name and first bytes -> a pyarrow Table
    mapping.py     the column map (infra/histories.py) chosen and applied: the contract's ids, patterns
    checks.py      each column checked: times, ids, amounts, labels, places (HistoryError: the first problem)
    load.py        `load_history`: those steps in order -> a `History` of arrays in event-time order

These modules import pyarrow at their top: the package is imported only where a history is read,
never by a module every process loads (the layer rule puts it in infra, below the simulator and
the jobs that both read histories).
"""
from infra.history.load import History, load_history
from infra.history.reading import HistoryError

__all__ = ["History", "HistoryError", "load_history"]
