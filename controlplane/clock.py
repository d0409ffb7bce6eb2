"""The one wall clock of the control plane: milliseconds since the epoch, as every table stores."""
from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
