"""Real job processes and what they read, shared by the e2e tests and the benchmarks.

A `JobProcess` is a real `python -m pipelines.usage` child (or another job module) with its own
topic, store and checkpoint root (`job_env`); `produce` and `Producer` write decisions to its
topic through the one Kafka client config (`infra.kafka_client`), and `Truth` remembers what was
sent, so a test (or `bench guarantees`) compares the sinks' counts with it. Nothing here is
mocked: the broker, Spark and SQLite are the real ones.
"""
from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from infra import kafka_client
from infra.config import ROOT, Settings
from infra.contracts import GUARANTEES

# what the usage job logs (infra.logs format) once its queries run: "<time> usage INFO running ..."
USAGE_READY = re.compile(r"\busage INFO running\b")


def log(msg: str) -> None:
    print(f"harness: {msg}", file=sys.stderr, flush=True)


def decision(i: int, fraud: bool, event_time: int | None = None, card: str | None = None,
             prefix: str = "tx") -> dict:
    """One decision as the fraud job writes it to the `decisions` topic."""
    now = int(time.time() * 1000)
    return {"txn_id": f"{prefix}-{i}", "card_id": card or f"card-{i % 13}", "merchant_id": f"m-{i % 5}",
            "amount_cents": 1000 + i, "event_time": event_time if event_time is not None else now,
            "produced_at": now, "decided_at": now, "score_avg_ticket": 0.1, "score_proximity": 0.1,
            "score_velocity": 0.1, "score": 0.9 if fraud else 0.1, "is_fraud": fraud, "is_late": False}


def producer(s: Settings | None = None):
    """A kafka-python producer on the configured cluster, acks=all."""
    return kafka_client.producer(s, acks="all", linger_ms=5)


def produce(s: Settings | None, topic: str, records: list[dict], prod=None) -> None:
    """Send decisions keyed by txn_id and wait until the broker has them all."""
    own = prod is None
    prod = prod or producer(s)
    for r in records:
        prod.send(topic, key=r["txn_id"].encode(), value=json.dumps(r).encode())
    prod.flush()
    if own:
        prod.close()


class Truth:
    """What the test produced: distinct txn_ids and fraud ones, overall and since a mark."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent: dict[str, bool] = {}
        self.order: list[str] = []

    def add(self, records: list[dict]) -> None:
        with self.lock:
            for r in records:
                if r["txn_id"] not in self.sent:
                    self.order.append(r["txn_id"])
                self.sent[r["txn_id"]] = r["is_fraud"]

    def counts(self, since: int = 0) -> tuple[int, int]:
        with self.lock:
            ids = self.order[since:]
            return len(ids), sum(self.sent[i] for i in ids)

    def mark(self) -> int:
        with self.lock:
            return len(self.order)


class Producer(threading.Thread):
    """Keeps producing new decisions until stopped, `rate` a second.

    `duplicate_rate` is the share of them sent a second time (an upstream that writes at least
    once): 0.1 sends one of every ten twice. `duplicates` counts those second copies. With
    `copy_ages` (lo, hi seconds) a second copy is of a decision sent between hi and lo seconds
    before (picked at random; owed until one is that old), as an upstream that re-sends after a
    timeout or its own restart; without, of one in the same step.
    """

    def __init__(self, s: Settings | None, topic: str, truth: Truth, rate: float = 100.0, start: int = 0,
                 duplicate_rate: float = 0.0, copy_ages: tuple[float, float] | None = None, seed: int = 7):
        super().__init__(daemon=True)
        self.s, self.topic, self.truth, self.rate = s, topic, truth, rate
        self.duplicate_rate = duplicate_rate
        self.copy_ages = copy_ages
        self._sent: deque = deque()  # (monotonic time sent, record), oldest first, with copy_ages
        self._random = random.Random(seed)
        self.i = start
        self.sent_records = 0   # every record sent, second copies included
        self.duplicates = 0
        self._owed = 0.0
        self.halt = threading.Event()

    def run(self):
        prod = producer(self.s)
        step = 10
        while not self.halt.is_set():
            batch = [decision(self.i + k, (self.i + k) % 7 == 0) for k in range(step)]
            self._owed += step * self.duplicate_rate
            again = self._copies(batch, int(self._owed))
            self._owed -= len(again)
            produce(self.s, self.topic, batch + again, prod)
            self.truth.add(batch)
            self.sent_records += len(batch) + len(again)
            self.duplicates += len(again)
            self.i += step
            self.halt.wait(step / self.rate)
        prod.close()

    def _copies(self, batch: list[dict], owed: int) -> list[dict]:
        """The second copies to send with `batch`: of its own records, or of older ones (`copy_ages`)."""
        if self.copy_ages is None:
            return batch[:min(len(batch), owed)]
        now = time.monotonic()
        lo, hi = self.copy_ages
        while self._sent and now - self._sent[0][0] > hi:
            self._sent.popleft()
        old = [r for at, r in self._sent if now - at >= lo]
        self._sent.extend((now, r) for r in batch)
        return [self._random.choice(old) for _ in range(owed)] if old else []

    def stop(self):
        self.halt.set()
        self.join(30)


class JobProcess:
    """A real job child (`python -m pipelines.usage` by default) with its own topic, store and
    checkpoints; `start` returns once its log says it runs (`ready`)."""

    def __init__(self, env: dict, args: list[str] | None = None, module: str = "pipelines.usage",
                 ready: re.Pattern = USAGE_READY, own_group: bool = False):
        """`own_group`: the child leads a process group of its own (its session), so `freeze` and
        `wake` reach its Spark JVM too, as the supervisor's zombie fault does."""
        self.env = env
        self.own_group = own_group
        self.args = ["--no-windows"] if args is None else args
        self.module, self.ready_line = module, ready
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.ready = threading.Event()

    def start(self, timeout: float = 120.0) -> "JobProcess":
        self.ready.clear()
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *self.args], env=self.env,
                                     cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=self.own_group)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        while not self.ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() - t0 > timeout:
                self.kill()
                raise RuntimeError(f"{self.module} did not start (exit code {self.proc.returncode}):\n"
                                   + "\n".join(self.lines[-30:]))
        log(f"{self.module} started in {time.monotonic() - t0:.1f} s")
        return self

    def _read(self, proc):
        for line in proc.stdout:
            self.lines.append(line.rstrip())
            if self.ready_line.search(line):
                self.ready.set()

    def wait_exit(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            if self.own_group:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def freeze(self) -> None:
        """SIGSTOP the job and its JVM (its process group): a long GC pause, a suspended VM."""
        assert self.own_group, "a frozen job's JVM must be in its group"
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def wake(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


def job_env(base: Path, topic: str, extra: dict | None = None) -> dict:
    """The environment of a job child: its decisions topic, store and checkpoints under `base`."""
    env = dict(os.environ)
    env.update({"TOPIC_DECISIONS": topic, "CARDSTREAM_DB": str(base / "cardstream.db"),
                "CHECKPOINT_ROOT": str(base / "checkpoints"), "TRIGGER_SECONDS": "0.5", "USAGE_TRIGGER_SECONDS": "0.5", "DLQ_TRIGGER_SECONDS": "0.5",
                "PYTHONPATH": str(ROOT), "SPARK_MASTER": os.environ.get("SPARK_MASTER", "local[2]"),
                "SPARK_SHUFFLE_PARTITIONS": os.environ.get("SPARK_SHUFFLE_PARTITIONS", "2"),
                "SPARK_DRIVER_MEMORY": os.environ.get("SPARK_DRIVER_MEMORY", "1g")})
    env.update(extra or {})
    return env


def wait_for(check, timeout: float, what: str, interval: float = 0.25):
    """The first truthy `check()`; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def counts(db) -> dict:
    """{guarantee: {"processed", "fraud"}} for all three guarantees (zeros before the first write)."""
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from pipelines.guarantees import counts as sink_counts

    got = sink_counts(db)
    return {g: got.get(g, {"processed": 0, "fraud": 0}) for g in GUARANTEES}


def command_status(db, command_id: int) -> str:
    return db.execute("SELECT status FROM commands WHERE id = ?", [command_id]).fetchone()[0]


def settled(db, truth: int, seconds: float = 2.0, timeout: float = 90.0) -> dict:
    """Wait until exactly-once has caught up with `truth` (or the timeout), then until quiet."""
    try:
        wait_for(lambda: counts(db)["exactly-once"]["processed"] >= truth, timeout, "exactly-once to catch up")
    except TimeoutError as exc:
        log(str(exc))
    return quiet(db, seconds, timeout=30)


def quiet(db, seconds: float = 2.0, timeout: float = 90.0) -> dict:
    """Wait until the sink counts stop changing for `seconds`; return them."""
    last, since = None, time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = counts(db)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return now
        time.sleep(0.25)
    return last
