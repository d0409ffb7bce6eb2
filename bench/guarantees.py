"""Guarantees under real faults: `python -m bench guarantees --json`.

Runs three scenarios against a real `python -m pipelines.usage` child process (all three
guarantee queries side by side), each on a fresh decisions topic, store and checkpoint root:

- crash-after-sink: the job SIGKILLs itself after the at-least-once sink write, before Spark's
  commit; then it is restarted.
- crash: the job gets SIGKILL while a producer keeps producing; restarted while it still produces.
- sink-down: the sinks reject writes for a few seconds while the producer produces.

Prints {"crash-after-sink": {"at-most-once": {"truth": …, "observed": …}, …}, "crash": …, "sink-down": …}.
The helpers here (JobProcess, produce, decisions) are also what tests/test_usage_job.py drives.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from infra.config import ROOT, load
from infra.contracts import GUARANTEES

T0 = 1_700_000_000_000


def log(msg: str) -> None:
    print(f"bench guarantees: {msg}", file=sys.stderr, flush=True)


def decision(i: int, fraud: bool, event_time: int | None = None, card: str | None = None,
             prefix: str = "tx") -> dict:
    now = int(time.time() * 1000)
    return {"txn_id": f"{prefix}-{i}", "card_id": card or f"card-{i % 13}", "merchant_id": f"m-{i % 5}",
            "amount_cents": 1000 + i, "event_time": event_time if event_time is not None else now,
            "produced_at": now, "decided_at": now, "score_avg_ticket": 0.1, "score_proximity": 0.1,
            "score_velocity": 0.1, "score": 0.9 if fraud else 0.1, "is_fraud": fraud, "is_late": False}


def producer(bootstrap: str):
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)


def produce(bootstrap: str, topic: str, records: list[dict], prod=None) -> None:
    own = prod is None
    prod = prod or producer(bootstrap)
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
    """Keeps producing new decisions (with a duplicate now and then) until stopped."""

    def __init__(self, bootstrap: str, topic: str, truth: Truth, rate: float = 100.0, start: int = 0):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.truth, self.rate = bootstrap, topic, truth, rate
        self.i = start
        self.sent_records = 0
        self.halt = threading.Event()

    def run(self):
        prod = producer(self.bootstrap)
        step = 10
        while not self.halt.is_set():
            batch = [decision(self.i + k, (self.i + k) % 7 == 0) for k in range(step)]
            batch.append(batch[0])  # the fraud job writes at least once: duplicates happen
            produce(self.bootstrap, self.topic, batch, prod)
            self.truth.add(batch)
            self.sent_records += len(batch)
            self.i += step
            self.halt.wait(step / self.rate)
        prod.close()

    def stop(self):
        self.halt.set()
        self.join(30)


class JobProcess:
    """A real `python -m pipelines.usage` child with its own topic, store and checkpoints."""

    def __init__(self, env: dict, args: list[str] | None = None):
        self.env = env
        self.args = ["--no-windows"] if args is None else args
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.ready = threading.Event()

    def start(self, timeout: float = 120.0) -> "JobProcess":
        self.ready.clear()
        t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "pipelines.usage", *self.args], env=self.env,
                                     cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        if not self.ready.wait(timeout):
            raise RuntimeError("the usage job did not start in time:\n" + "\n".join(self.lines[-30:]))
        log(f"usage job started in {time.monotonic() - t0:.1f} s")
        return self

    def _read(self, proc):
        for line in proc.stdout:
            self.lines.append(line.rstrip())
            if line.startswith("usage: running"):
                self.ready.set()

    def wait_exit(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


def job_env(base: Path, topic: str, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({"TOPIC_DECISIONS": topic, "CARDSTREAM_DB": str(base / "cardstream.db"),
                "CHECKPOINT_ROOT": str(base / "checkpoints"), "TRIGGER_SECONDS": "0.5",
                "PYTHONPATH": str(ROOT), "SPARK_MASTER": os.environ.get("SPARK_MASTER", "local[2]"),
                "SPARK_SHUFFLE_PARTITIONS": os.environ.get("SPARK_SHUFFLE_PARTITIONS", "2"),
                "SPARK_DRIVER_MEMORY": os.environ.get("SPARK_DRIVER_MEMORY", "1g")})
    env.update(extra or {})
    return env


def wait_for(check, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def counts(db) -> dict:
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


def _report(truth_total: tuple[int, int], amo_truth: tuple[int, int], got: dict, db=None) -> dict:
    from pipelines.guarantees import dropped

    out = {}
    for g in GUARANTEES:
        t = amo_truth if g == "at-most-once" else truth_total
        out[g] = {"truth": t[0], "observed": got[g]["processed"], "fraud_truth": t[1],
                  "fraud_observed": got[g]["fraud"]}
    if db is not None:
        out["at-most-once"]["dropped"] = dropped(db)["processed"]
    return out


class Scenario:
    """One fresh topic + store + checkpoint root + job process."""

    def __init__(self, s, name: str, workdir: Path):
        from infra.topics import ensure_topics
        from controlplane.store import connect

        self.s = s
        self.topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
        ensure_topics([self.topic], partitions=2, s=s)
        self.base = workdir / name
        self.base.mkdir(parents=True, exist_ok=True)
        self.env = job_env(self.base, self.topic)
        self.db = connect(self.base / "cardstream.db")
        self.job = JobProcess(self.env)
        self.truth = Truth()
        self.amo_mark = 0

    def send(self, records):
        produce(self.s.kafka_bootstrap, self.topic, records)
        self.truth.add(records)

    def close(self):
        self.job.stop()
        self.db.conn.close()


def crash_after_sink(s, workdir: Path) -> dict:
    from controlplane import commands

    sc = Scenario(s, "crash-after-sink", workdir)
    try:
        sc.job.start()
        sc.amo_mark = sc.truth.mark()
        sc.send([decision(i, i % 5 == 0) for i in range(200)])
        wait_for(lambda: all(c["processed"] >= 200 for c in counts(sc.db).values()), 90, "the first 200 events")
        cid = commands.issue(sc.db, "crash-after-sink", "usage")
        wait_for(lambda: command_status(sc.db, cid) != "pending", 30, "the job to claim crash-after-sink")
        sc.send([decision(i, i % 5 == 0) for i in range(200, 400)])
        code = sc.job.wait_exit(90)
        log(f"crash-after-sink: job exited with {code}, command {command_status(sc.db, cid)}")
        sc.job.start()
        sc.send([decision(i, i % 5 == 0) for i in range(400, 450)])
        got = settled(sc.db, sc.truth.counts()[0])
        return _report(sc.truth.counts(), sc.truth.counts(sc.amo_mark), got, sc.db)
    finally:
        sc.close()


def crash(s, workdir: Path, down_seconds: float = 3.0) -> dict:
    sc = Scenario(s, "crash", workdir)
    prod = None
    try:
        sc.job.start()
        prod = Producer(s.kafka_bootstrap, sc.topic, sc.truth)
        prod.start()
        wait_for(lambda: all(c["processed"] >= 100 for c in counts(sc.db).values()), 90, "the first events")
        sc.job.kill()
        log("crash: job SIGKILLed while producing")
        time.sleep(down_seconds)
        sc.job.start()
        time.sleep(3)
        prod.stop()
        got = settled(sc.db, sc.truth.counts()[0])
        return _report(sc.truth.counts(), sc.truth.counts(sc.amo_mark), got, sc.db)
    finally:
        if prod:
            prod.stop()
        sc.close()


def sink_down(s, workdir: Path, seconds: float = 4.0) -> dict:
    from controlplane import commands

    sc = Scenario(s, "sink-down", workdir)
    prod = None
    try:
        sc.job.start()
        prod = Producer(s.kafka_bootstrap, sc.topic, sc.truth)
        prod.start()
        wait_for(lambda: all(c["processed"] >= 100 for c in counts(sc.db).values()), 90, "the first events")
        cid = commands.issue(sc.db, "sink-down", "usage", seconds=seconds)
        wait_for(lambda: command_status(sc.db, cid) == "done", 30, "the job to take the sink down")
        time.sleep(seconds + 2)
        prod.stop()
        got = settled(sc.db, sc.truth.counts()[0])
        return _report(sc.truth.counts(), sc.truth.counts(sc.amo_mark), got, sc.db)
    finally:
        if prod:
            prod.stop()
        sc.close()


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench guarantees")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (always)")
    parser.add_argument("--only", choices=("crash-after-sink", "crash", "sink-down"), action="append")
    args = parser.parse_args(argv)
    s = load()
    from bench.common import own_broker

    scenarios = {"crash-after-sink": crash_after_sink, "crash": crash, "sink-down": sink_down}
    out = {}
    with own_broker(s, log), tempfile.TemporaryDirectory(prefix="bench-guarantees-", dir=s.run_dir) as tmp:
        for name, run in scenarios.items():
            if args.only and name not in args.only:
                continue
            log(f"running {name}")
            out[name] = run(s, Path(tmp))
            log(f"{name}: {json.dumps(out[name])}")
    return out
