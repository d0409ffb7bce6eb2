"""What a run delivered, counted from the broker's acknowledgements (simulator/producer.py), and
the wait for the last of them: the simulator's runner and the replayer both end this way."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

FLUSH_TIMEOUT_S = 90.0


@dataclass
class Delivered:
    """The first fields of a run's totals (a run adds its own after them): transactions and labels
    the broker acknowledged, and those it refused."""
    sent: int
    failed: int
    labels_sent: int
    labels_failed: int

    def line(self) -> str:
        return json.dumps(self.__dict__)


def unacknowledged(*stats) -> int:
    """Records appended (TopicStats of each topic) whose fate the broker has not told."""
    return sum(s.appended - s.sent - s.failed for s in stats)


def flush_all(producer, give_up=lambda: False, timeout: float = FLUSH_TIMEOUT_S) -> bool:
    """Wait, up to `timeout`, for every appended record's fate; False when `give_up()` stopped the wait."""
    deadline = time.monotonic() + timeout
    while producer.outstanding and time.monotonic() < deadline:
        if give_up():
            return False
        producer.flush(timeout=0.5)
    return True
