"""The one restart policy, used at both levels a failure can be handled at.

A failed Spark query is restarted in its job's process from its checkpoint (cheap: the JVM and the
SparkSession stay up); a job process that exits is restarted by the supervisor (a new driver and
JVM). Both wait by the same rule: `base` seconds, doubled for each failure within `window_s`
of the previous ones, capped at `cap`. A job gives up after `max_failures` query failures in
the window and exits 1, which hands the problem to the supervisor; the supervisor never gives up,
it only waits longer. A deliberate kill (the `crash` fault) is not a failure: plain `base` delay.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field


@dataclass
class Backoff:
    base: float = 2.0
    cap: float = 30.0
    window_s: float = 300.0
    max_failures: int | None = None      # None: never give up
    clock: callable = field(default=time.monotonic)
    _failures: deque = field(default_factory=deque)

    def failed(self) -> float | None:
        """Record a failure now; the delay before the next start, or None to give up."""
        now = self.clock()
        self._failures.append(now)
        while self._failures and now - self._failures[0] > self.window_s:
            self._failures.popleft()
        n = len(self._failures)
        if self.max_failures is not None and n > self.max_failures:
            return None
        return min(self.cap, self.base * 2 ** (n - 1))

    @property
    def recent_failures(self) -> int:
        return len(self._failures)


def first_line(exc) -> str:
    """The one telling line of a (often Py4J-wrapped, multi-line) Spark or Python error."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for line in lines:
        if "task-failure injected" in line:
            return line[:300]
    errors = [ln for ln in lines if ("Error" in ln or "Exception" in ln) and not ln.startswith(("at ", "File "))
              and "Python Proxy" not in ln]
    return (errors[-1] if errors else lines[0] if lines else type(exc).__name__)[:300]
