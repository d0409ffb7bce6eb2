"""The fraud job in real-time mode as a real process on fresh topics, fed at a fixed rate, killed
and restarted: shared by `bench fraud-guarantees` and the e2e test of the real-time guarantee.

Nothing is mocked: `python -m pipelines.fraud --mode realtime --guarantee G` on the real broker,
SIGKILLed like the supervisor's `crash` does it (the driver's pid), restarted with the same
arguments after the supervisor's delay; the topics are read back with their LogAppendTime.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

from bench.common import append_stamped, delete_topics
from bench.harness.jobs import JobProcess, log, wait_for
from controlplane.store import connect
from infra import kafka_client
from infra.config import ROOT, Settings
from infra.topics import ensure_topics
from pipelines.audit.paths import Stamps

READY = re.compile(r"\bfraud INFO realtime mode, epoch\b")


def transaction(txn_id: str, i: int) -> dict:
    now = int(time.time() * 1000)
    return {"txn_id": txn_id, "card_id": f"card-{i % 500}", "merchant_id": f"m-{i % 23}",
            "amount_cents": 1_000 + (i * 37) % 9_000, "currency": "EUR", "lat": 48.85, "lon": 2.35,
            "event_time": now, "produced_at": now}


class Feeder(threading.Thread):
    """Sends valid transactions at `rate` a second until stopped (acks=all, keyed by card)."""

    def __init__(self, s: Settings, topic: str, rate: float, prefix: str = "t"):
        super().__init__(daemon=True)
        self.s, self.topic, self.rate, self.prefix = s, topic, rate, prefix
        self.sent: list[str] = []
        self.halt = threading.Event()

    def run(self):
        prod = kafka_client.producer(self.s, acks="all", linger_ms=0)
        t0 = time.monotonic()
        try:
            while not self.halt.is_set():
                due = int((time.monotonic() - t0) * self.rate) + 1
                while len(self.sent) < due:
                    i = len(self.sent)
                    txn = transaction(f"{self.prefix}-{i}", i)
                    prod.send(self.topic, key=txn["card_id"].encode(), value=json.dumps(txn).encode())
                    self.sent.append(txn["txn_id"])
                self.halt.wait(0.01)
            prod.flush()
        finally:
            prod.close()

    def stop(self):
        self.halt.set()
        self.join(30)


def read_stamps(s: Settings, topic: str, idle_ms: int = 2_000, docs: list | None = None) -> list[tuple[str, int]]:
    """(txn_id, LogAppendTime) of every committed record of `topic`, read_committed (the
    transactional `decisions` topic's aborted records are never read); each record's JSON is
    appended to `docs` when given."""
    out = []
    for m in append_stamped(s, topic, _mixed_clocks, idle_ms, max_poll_records=5_000,
                            isolation_level="read_committed", group_id=None):
        try:
            doc = json.loads(m.value)
        except (ValueError, TypeError, RecursionError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("txn_id"), str):
            out.append((doc["txn_id"], m.timestamp))
            if docs is not None:
                docs.append(doc)
    return out


def _mixed_clocks(topic: str) -> RuntimeError:
    return RuntimeError(f"topic {topic} is not stamped with the broker's append time "
                        f"(LogAppendTime, infra/topics.py): its latencies would mix clocks")


class RealtimeRun:
    """One guarantee's run: its own topics, store, checkpoint and job process."""

    def __init__(self, s: Settings, guarantee: str, work: Path, extra_env: dict | None = None):
        self.s, self.guarantee, self.work = s, guarantee, work
        tag = uuid.uuid4().hex[:8]
        self.tag = tag
        self.tx, self.dec, self.dlq, self.marks, self.rt = (f"frg-{n}-{tag}" for n in ("tx", "dec", "dlq", "marks", "rt"))
        ensure_topics([self.tx, self.dec, self.dlq, self.marks, self.rt], s=s)
        work.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(work / "store.db"),
               # the real-time query holds one task slot per Kafka partition for its whole batch,
               # beside the stateful path's tasks: more slots than cores (its tasks mostly wait)
               "SPARK_MASTER": f"local[{2 * s.topics.partitions + 2}]", **(extra_env or {})}
        args = ["--mode", "realtime", "--guarantee", guarantee, "--transactions-topic", self.tx,
                "--decisions-topic", self.dec, "--dlq-topic", self.dlq, "--markers-topic", self.marks,
                "--realtime-topic", self.rt, "--checkpoint", str(work / "checkpoint"),
                "--store", str(work / "store.db"),
                # one real-time batch for the whole run: no commit between the start and a kill
                "--realtime-batch-seconds", "600"]
        self.job = JobProcess(env, args, module="pipelines.fraud", ready=READY)
        self._codes: dict[str, int] = {}

    def start(self, timeout: float = 240.0) -> None:
        self.job.start(timeout)

    def prime(self, timeout: float = 240.0) -> None:
        """Send a transaction a second until one comes back on decisions-rt: the real-time tasks
        are then running (they start after the job logs that it runs)."""
        prod = kafka_client.producer(self.s, acks="all")
        i = 0

        def decided():
            nonlocal i
            txn = transaction(f"prime-{i}", i)
            prod.send(self.tx, key=txn["card_id"].encode(), value=json.dumps(txn).encode())
            prod.flush()
            i += 1
            return any(t.startswith("prime-") for t, _ in read_stamps(self.s, self.rt, 500))
        try:
            wait_for(decided, timeout, "the real-time path's first decision", interval=1.0)
        finally:
            prod.close()

    def rt_end(self) -> int:
        return sum(kafka_client.end_offsets(self.rt, self.s).values())

    def kill(self) -> int:
        """SIGKILL the job's driver (as the supervisor's crash does); the kill time in ms."""
        killed_at = int(time.time() * 1000)
        self.job.kill()
        return killed_at

    def runs(self) -> list[tuple[int, str, int]]:
        """(started_at, guarantee, resumed) of each start of the real-time query, as the job recorded it."""
        db = connect(self.work / "store.db")
        try:
            return [tuple(r) for r in db.execute("SELECT started_at, guarantee, resumed FROM fraud_rt_runs "
                                                 "ORDER BY started_at").fetchall()]
        finally:
            db.conn.close()

    def restarted_at(self, killed_at: int) -> int | None:
        """When the real-time query was started again after the kill (None: not yet)."""
        return next((at for at, _, _ in self.runs() if at > killed_at), None)

    def stamps(self, topic: str, prefix: str) -> Stamps:
        """The records of `topic` whose txn_id starts with `prefix`, as codes and append times."""
        pairs = [(self._codes.setdefault(t, len(self._codes)), ts) for t, ts in read_stamps(self.s, topic)
                 if t.startswith(prefix)]
        return Stamps.of(pairs)

    def stop(self, keep: bool = False) -> None:
        self.job.stop()
        if not keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def delete_topics(self) -> None:
        delete_topics(self.s, self.tag)


def recovered(run: RealtimeRun, before: int, timeout: float) -> None:
    """Wait until the restarted job writes to decisions-rt again (its end offset passes `before`)."""
    wait_for(lambda: run.rt_end() > before, timeout, "the real-time path to decide again", interval=0.5)
    log(f"{run.guarantee}: the real-time path decides again")
