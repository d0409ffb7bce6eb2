"""The supervisor's helper threads (the live auditor, housekeeping): each started once, a daemon,
its `_loop` running rounds until the supervisor's `stopping()` says so."""
from __future__ import annotations

import threading
from typing import Callable


class RoundThread:
    """A helper thread of the supervisor: `start()` (again: a no-op) runs `_loop` on a daemon
    thread named `name`, so a supervisor that exits never waits for it."""
    name = "rounds"

    def __init__(self, s, stopping: Callable[[], bool]):
        self.s, self.stopping = s, stopping
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        raise NotImplementedError
