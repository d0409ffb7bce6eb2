"""Guarantees under real faults: `python -m bench guarantees --json`.

Runs three scenarios against a real `python -m pipelines.usage` child process (all three
guarantee queries side by side), each on a fresh decisions topic, store and checkpoint root:

- crash-after-sink: the job SIGKILLs itself after the at-least-once sink write, before Spark's
  commit; then it is restarted.
- crash: the job gets SIGKILL while a producer keeps producing; restarted while it still produces.
- sink-down: the sinks reject writes for a few seconds while the producer produces.

Prints {"crash-after-sink": {"at-most-once": {"truth": …, "observed": …}, …}, "crash": …, "sink-down": …}.
The job-process harness (JobProcess, Producer, Truth, produce, …) is tests/harness/jobs.py, which
tests/e2e/test_usage_job.py drives too.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from infra.config import load
from infra.contracts import GUARANTEES
from tests.harness.jobs import (JobProcess, Producer, Truth, command_status, counts, decision, job_env, produce,
                                settled, wait_for)


def log(msg: str) -> None:
    print(f"bench guarantees: {msg}", file=sys.stderr, flush=True)


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
        produce(self.s, self.topic, records)
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
        prod = Producer(s, sc.topic, sc.truth)
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
        prod = Producer(s, sc.topic, sc.truth)
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
