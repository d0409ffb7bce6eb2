"""The live auditor: a consistent-cut audit (`pipelines.audit`) every AUDIT_INTERVAL_SECONDS,
appended to the store's `audit` table for the dashboard, on a thread of the supervisor."""
from __future__ import annotations

import logging
import time

from controlplane.store import connect
from infra import heap
from pipelines.supervisor.rounds import RoundThread

log = logging.getLogger("supervisor")


class LiveAuditor(RoundThread):
    """An audit round every AUDIT_INTERVAL_SECONDS (`LiveAuditor(s, stopping).start()`)."""
    name = "auditor"

    def _loop(self) -> None:
        # deferred: kafka-python loads only where Kafka is used
        from pipelines import audit

        db = connect(s=self.s)
        auditor = audit.Auditor(self.s, db, persist=True)
        while not self.stopping():
            started = time.monotonic()
            try:
                audit.record(db, auditor.snapshot())
            except Exception as exc:  # Kafka down, store busy: try again next round
                log.warning("audit skipped: %s", exc)
            heap.trim()  # the round's Kafka fetches and parsed records are garbage now
            time.sleep(max(0.5, self.s.audit_interval_seconds - (time.monotonic() - started)))
