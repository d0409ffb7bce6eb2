"""Guarantees under real faults: `python -m bench guarantees --json`.

Runs three scenarios against a real `python -m pipelines.usage` child process (all three
guarantee queries side by side), each on a fresh decisions topic, store and checkpoint root:

- crash-after-sink: the job SIGKILLs itself after the at-least-once sink write, before Spark's
  commit; then it is restarted.
- crash: the job gets SIGKILL while a producer keeps producing; restarted while it still produces.
- sink-down: the sinks reject writes for a few seconds while the producer produces.
- zombie: the job is frozen (SIGSTOP, its JVM too) while a producer produces; a replacement on
  the same checkpoints takes the lease and commits batches; the frozen one wakes (its writes
  fenced: it exits 3, or 4 when Spark stops its queries first); then the replacement is SIGKILLed
  and restarted, its exactly-once state rebuilt from the checkpoint by Spark.

Each scenario's figures come from the consistent-cut audit (`pipelines.audit`), as the dashboard
shows them: per guarantee truth, observed, lost, duplicated split into `replayed` (the query's own
replays) and `upstream` (ids sent twice), and lag. No duplicates are sent unless
`--upstream-duplicates RATE` asks for them (then `upstream_duplicates_sent` says how many);
`--copy-ages LO,HI` makes each a copy of a decision sent LO to HI seconds before (as long as the
scenario has run; `--zombie-seconds` makes the zombie's run that long), not of one sent with it.

Prints {"crash-after-sink": {"at-most-once": {"truth": …, "observed": …, "lost": …, …}, …},
"crash": …, "sink-down": …, "zombie": {…, "zombie_exit": 3}, "upstream_duplicate_rate": R}.
The job-process harness (JobProcess, Producer, Truth, produce, …) is bench/harness/jobs.py, which
tests/e2e/test_usage_job.py drives too.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import own_broker
from bench.harness.jobs import (JobProcess, Producer, Truth, command_status, counts, decision, job_env, produce,
                                settled, wait_for)
from controlplane import fencing, ledger
from infra.config import load
from infra.contracts import GUARANTEES
from infra.topics import ensure_topics


def log(msg: str) -> None:
    print(f"bench guarantees: {msg}", file=sys.stderr, flush=True)


FIGURES = ("truth", "observed", "lost", "duplicated", "replayed", "upstream", "lag_records")


def _report(sc: "Scenario") -> dict:
    """The audit of this scenario's queries now (after `settled`), per guarantee."""
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from pipelines import audit
    from pipelines.guarantees import dropped

    snap = audit.Auditor(sc.settings, sc.db).snapshot()["usage"]
    out = {g: {k: snap[g][k] for k in FIGURES} for g in GUARANTEES}
    out["at-most-once"]["dropped"] = dropped(sc.db)["processed"]
    if sc.duplicates:
        out["upstream_duplicates_sent"] = sc.duplicates
    return out


class Scenario:
    """One fresh topic + store + checkpoint root + job process."""

    def __init__(self, s, name: str, workdir: Path, duplicate_rate: float = 0.0,
                 copy_ages: tuple[float, float] | None = None):
        # deferred: the store (sqlite-utils, pandas) loads only where used
        from controlplane.store import connect

        self.s = s
        self.topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
        ensure_topics([self.topic], partitions=2, s=s)
        self.base = workdir / name
        self.base.mkdir(parents=True, exist_ok=True)
        self.env = job_env(self.base, self.topic)
        self.db = connect(self.base / "cardstream.db")
        self.settings = dataclasses.replace(s, topics=dataclasses.replace(s.topics, decisions=self.topic),
                                            store_path=self.base / "cardstream.db",
                                            checkpoint_root=self.base / "checkpoints")
        self.job = JobProcess(self.env)
        self.truth = Truth()
        self.duplicate_rate = duplicate_rate
        self.copy_ages = copy_ages
        self.duplicates = 0

    def send(self, records):
        again = records[:int(round(len(records) * self.duplicate_rate))]
        produce(self.s, self.topic, records + again)
        self.duplicates += len(again)
        self.truth.add(records)

    def producer(self) -> Producer:
        return Producer(self.s, self.topic, self.truth, duplicate_rate=self.duplicate_rate, copy_ages=self.copy_ages)

    def close(self):
        self.job.stop()
        self.db.conn.close()


def crash_after_sink(s, workdir: Path, duplicate_rate: float = 0.0) -> dict:
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from controlplane import commands

    sc = Scenario(s, "crash-after-sink", workdir, duplicate_rate)
    try:
        sc.job.start()
        sc.send([decision(i, i % 5 == 0) for i in range(200)])
        wait_for(lambda: all(c["processed"] >= 200 for c in counts(sc.db).values()), 90, "the first 200 events")
        cid = commands.issue(sc.db, "crash-after-sink", "usage")
        wait_for(lambda: command_status(sc.db, cid) != "pending", 30, "the job to claim crash-after-sink")
        sc.send([decision(i, i % 5 == 0) for i in range(200, 400)])
        code = sc.job.wait_exit(90)
        log(f"crash-after-sink: job exited with {code}, command {command_status(sc.db, cid)}")
        sc.job.start()
        sc.send([decision(i, i % 5 == 0) for i in range(400, 450)])
        settled(sc.db, sc.truth.counts()[0])
        return _report(sc)
    finally:
        sc.close()


def _fault_under_traffic(s, workdir: Path, name: str, duplicate_rate: float, fault, copy_ages=None,
                         own_group: bool = False) -> dict:
    """The job counting a producer's live traffic; `fault(sc)` once its first events are counted;
    then the producer stopped and the counts settled."""
    sc = Scenario(s, name, workdir, duplicate_rate, copy_ages)
    sc.job = JobProcess(sc.env, own_group=own_group)
    prod = None
    try:
        sc.job.start()
        prod = sc.producer()
        prod.start()
        wait_for(lambda: all(c["processed"] >= 100 for c in counts(sc.db).values()), 90, "the first events")
        fault(sc)
        prod.stop()
        sc.duplicates += prod.duplicates
        settled(sc.db, sc.truth.counts()[0])
        return _report(sc)
    finally:
        if prod:
            prod.stop()
        sc.close()


def crash(s, workdir: Path, down_seconds: float = 3.0, duplicate_rate: float = 0.0, copy_ages=None) -> dict:
    def fault(sc):
        sc.job.kill()
        log("crash: job SIGKILLed while producing")
        time.sleep(down_seconds)
        sc.job.start()
        time.sleep(3)

    return _fault_under_traffic(s, workdir, "crash", duplicate_rate, fault, copy_ages)


def sink_down(s, workdir: Path, seconds: float = 4.0, duplicate_rate: float = 0.0, copy_ages=None) -> dict:
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from controlplane import commands

    def fault(sc):
        cid = commands.issue(sc.db, "sink-down", "usage", seconds=seconds)
        wait_for(lambda: command_status(sc.db, cid) == "done", 30, "the job to take the sink down")
        time.sleep(seconds + 2)

    return _fault_under_traffic(s, workdir, "sink-down", duplicate_rate, fault, copy_ages)


def _applied_since(db, epoch: int) -> int:
    """Exactly-once batches applied by instances newer than `epoch`."""
    return sum(1 for b in ledger.batches(db, "usage-exactly-once")
               if b["outcome"] == ledger.APPLIED and b["epoch"] > epoch)


def zombie(s, workdir: Path, duplicate_rate: float = 0.0, copy_ages=None, seconds: float = 0.0) -> dict:
    """The zombie, then a crash of its replacement (module docstring); `seconds`: run at least this
    long in all (so upstream copies can be as old as `copy_ages` asks)."""
    started = time.monotonic()
    woke: dict = {}

    def fault(sc):
        replacement = JobProcess(sc.env, own_group=True)
        epoch = fencing.current_epoch(sc.db, "usage")
        rows = len(ledger.batches(sc.db, "usage-exactly-once"))
        # frozen between two writes, not inside one (a frozen holder of SQLite's write lock would
        # keep the replacement from taking the lease)
        wait_for(lambda: len(ledger.batches(sc.db, "usage-exactly-once")) > rows, 60, "a batch of the job")
        sc.job.freeze()
        log(f"zombie: froze the job (epoch {epoch}); starting its replacement")
        try:
            replacement.start()
            wait_for(lambda: _applied_since(sc.db, epoch) >= 2, 90, "the replacement to commit two batches")
        except BaseException:
            replacement.kill()
            raise
        finally:
            sc.job.wake()
        woke["zombie_exit"] = sc.job.wait_exit(120)
        log(f"zombie: woke and exited with {woke['zombie_exit']}; SIGKILL to the replacement, then a restart")
        time.sleep(2)
        replacement.kill()
        sc.job = replacement  # what the scenario stops at its end
        time.sleep(1)
        replacement.start()
        time.sleep(max(3.0, seconds - (time.monotonic() - started)))

    out = _fault_under_traffic(s, workdir, "zombie", duplicate_rate, fault, copy_ages, own_group=True)
    return {**out, **woke}


def ages(text: str) -> tuple[float, float]:
    """"LO,HI" seconds, 0 <= LO <= HI."""
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not LO,HI in seconds (e.g. 20,300)") from None
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"{text!r}: ages must be 0 <= LO <= HI")
    return lo, hi


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench guarantees")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (always)")
    parser.add_argument("--only", choices=("crash-after-sink", "crash", "sink-down", "zombie"), action="append")
    parser.add_argument("--upstream-duplicates", type=float, default=0.0, metavar="RATE",
                        help="send this share of the decisions twice (default 0: no duplicates sent)")
    parser.add_argument("--copy-ages", type=ages, default=None, metavar="LO,HI",
                        help="each second copy is of a decision sent LO to HI seconds before (default: sent with it)")
    parser.add_argument("--zombie-seconds", type=float, default=0.0, metavar="S",
                        help="run the zombie scenario at least this long (default: as long as its faults take)")
    args = parser.parse_args(argv)
    if not 0 <= args.upstream_duplicates <= 1:
        parser.error("--upstream-duplicates is a share between 0 and 1")
    s = load()

    scenarios = {"crash-after-sink": crash_after_sink,
                 "crash": lambda *a, **k: crash(*a, **k, copy_ages=args.copy_ages),
                 "sink-down": lambda *a, **k: sink_down(*a, **k, copy_ages=args.copy_ages),
                 "zombie": lambda *a, **k: zombie(*a, **k, copy_ages=args.copy_ages, seconds=args.zombie_seconds)}
    out = {"upstream_duplicate_rate": args.upstream_duplicates, "copy_ages": args.copy_ages}
    with own_broker(s, log), tempfile.TemporaryDirectory(prefix="bench-guarantees-", dir=s.run_dir) as tmp:
        for name, run in scenarios.items():
            if args.only and name not in args.only:
                continue
            log(f"running {name}")
            out[name] = run(s, Path(tmp), duplicate_rate=args.upstream_duplicates)
            log(f"{name}: {json.dumps(out[name])}")
    return out
