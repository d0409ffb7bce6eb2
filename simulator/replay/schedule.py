"""When each label may be sent: the transactions and their labels merged by event time."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
