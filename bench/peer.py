"""Our exactly-once usage count against a peer, Quix Streams: `python -m bench peer --json`.

Why: a Python stream processor with exactly-once state is what a team would otherwise reach for;
the Spark job has to beat it clearly to earn its JVM.

Both engines do the same SystemUsage count with the same guarantee, one after the other, in one
run, on the same data:
- ours: the usage job's exactly-once query (pipelines.usage.job.UsageJob.start_query, as
  bench/throughput.py drives it): JVM JSON parsing, each txn_id counted once by Spark's
  dropDuplicatesWithinWatermark on the session's RocksDB state (pipelines/usage/dedupe.py), count and
  fraud sum per micro-batch, results + the batch's sink-ledger record in one SQLite transaction. Trigger every
  `--commit-seconds` (1 s), Quix's commit interval (not the job's USAGE_TRIGGER_SECONDS, 5 s, which it ran at by
  mistake once the job's trigger became 5 s in 65791db: a backlog's last small batch waited for it), maxOffsetsPerTrigger as
  configured.
- quix: quixstreams Application(processing_guarantee="exactly-once", commit_interval 1 s), JSON
  values, a stateful filter that keeps the first record per key (the key is the txn_id; RocksDB
  state with a changelog topic inside the Kafka transaction), and a sink that adds count and fraud
  sum together with its per-partition offsets in one SQLite transaction per checkpoint (records at
  offsets already applied are skipped, so a replayed checkpoint has no second effect).
Each must reach the truth exactly (processed = N, fraud = N/50), or the run fails.

Figures, measured the same way for both:
- *_eps (throughput phase): a topic pre-filled with N decisions (`--events`) drained from the
  earliest offset; N / (wall time of the sink transaction that brings the count to N - the moment
  processing began: our first micro-batch's trigger start, Quix's first record handed to the
  filter). Start-up before the first record is excluded. Each engine first makes `--warm-passes`
  untimed passes over the same topic (2; fresh state, consumer group and sink each): the JVM's JIT
  compiles Spark's generated code over more than one pass (500,000 decisions, exactly-once,
  2026-11-26: 64, 142, 175, 177 k/s in four passes), so one pass left ours a fifth short of its
  steady state; Quix Streams' passes warm what it has to warm (the broker's pages, its imports).
- *_p99_ms (latency phase): a fresh topic stamped with LogAppendTime is fed at `--rate` decisions/s
  for `--warmup` + `--seconds` while the engine runs. For each record appended after the warm-up:
  (wall-clock time of the first sink transaction whose per-partition end offset covers it) - (its
  Kafka append timestamp). Ours: both from the sink ledger (`sink_batches`: each applied batch's
  end offsets from Spark's offset log, and the time of its write); Quix: both from its sink's
  commit row. Broker and engines run
  on this machine's clock. p50 and p99 are nearest-rank over those records.
- ratio = ours_eps / quix_eps (goal: >= 3, issue 73: on Spark's own state).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from bench.common import (commit_latencies, create_topic, delete_topics, fill, fraud_in, logger, own_broker,
                          own_spark, paced_producer, pct, read_stamps, unload_state)
from controlplane import ledger
from infra.config import ROOT, load

log = logger("peer")
EO = "exactly-once"


# --- Quix Streams, in a child process of its own (its run loop wants the main thread) -----------

QUIX_SCHEMA = """
CREATE TABLE IF NOT EXISTS counts (id INTEGER PRIMARY KEY CHECK (id = 1), processed INTEGER, fraud INTEGER);
CREATE TABLE IF NOT EXISTS offsets (part INTEGER PRIMARY KEY, next_offset INTEGER);
CREATE TABLE IF NOT EXISTS commits (commit_ms INTEGER, processed INTEGER, ends TEXT);
INSERT OR IGNORE INTO counts VALUES (1, 0, 0);
"""


def quix_child(args) -> dict:
    """Run the Quix count on `args.topic` until its sink holds `args.expect` records."""
    # deferred: quixstreams only in the peer's child
    from quixstreams import Application
    from quixstreams.sinks.base import BaseSink

    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    conn = sqlite3.connect(args.db, isolation_level=None)
    conn.executescript(QUIX_SCHEMA)
    first_ms: list[int] = []

    class CountSink(BaseSink):
        """Count + fraud sum + per-partition offsets in one SQLite transaction per checkpoint."""

        def __init__(self):
            super().__init__()
            self.applied = dict(conn.execute("SELECT part, next_offset FROM offsets").fetchall())
            self.pending: dict[int, list[int]] = {}
            self.total = conn.execute("SELECT processed FROM counts").fetchone()[0]

        def add(self, value, key, timestamp, headers, topic, partition, offset):
            if offset < self.applied.get(partition, 0):
                return  # already in the sink: a replayed checkpoint
            b = self.pending.setdefault(partition, [0, 0, 0])
            b[0] += 1
            b[1] += 1 if value.get("is_fraud") else 0
            b[2] = offset + 1

        def flush(self):
            if not self.pending:
                return
            n = sum(b[0] for b in self.pending.values())
            f = sum(b[1] for b in self.pending.values())
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("UPDATE counts SET processed = processed + ?, fraud = fraud + ?", (n, f))
                for part, b in self.pending.items():
                    conn.execute("INSERT INTO offsets VALUES (?, ?) ON CONFLICT(part) DO UPDATE "
                                 "SET next_offset = excluded.next_offset", (part, b[2]))
                self.applied.update({part: b[2] for part, b in self.pending.items()})
                ends = json.dumps(dict(self.applied))
                conn.execute("INSERT INTO commits VALUES (?, ?, ?)", (int(time.time() * 1000), n, ends))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self.pending = {}
            self.total += n
            if self.total >= args.expect:
                app.stop()

    app = Application(broker_address=args.bootstrap, consumer_group=f"bench-peer-{args.tag}-{args.phase}",
                      auto_offset_reset="earliest", processing_guarantee="exactly-once",
                      commit_interval=args.commit_seconds, state_dir=args.state_dir, loglevel="WARNING")
    sdf = app.dataframe(app.topic(args.topic, value_deserializer="json", key_deserializer="bytes"))

    def first_seen(value, state) -> bool:
        if not first_ms:
            first_ms.append(int(time.time() * 1000))
        if state.get("seen"):
            return False
        state.set("seen", 1)
        return True

    sdf = sdf.filter(first_seen, stateful=True)
    sdf.sink(CountSink())
    app.run()
    processed, fraud = conn.execute("SELECT processed, fraud FROM counts").fetchone()
    return {"first_ms": first_ms[0] if first_ms else None, "processed": processed, "fraud": fraud}


def run_quix(bootstrap: str, topic: str, expect: int, work: Path, tag: str, phase: str,
             commit_seconds: float, timeout: float, feed=None) -> tuple[dict, list]:
    """Start the Quix child (and `feed`, a paced producer, right after it); (its figures, commits)."""
    db = work / f"quix-{phase}.db"
    cmd = [sys.executable, "-m", "bench", "peer", "--quix-child", "--bootstrap", bootstrap, "--topic", topic,
           "--expect", str(expect), "--db", str(db), "--tag", tag, "--phase", phase,
           "--commit-seconds", str(commit_seconds), "--state-dir", str(work / f"quix-state-{phase}")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    err_path = work / f"quix-{phase}.log"
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err_file, text=True)
    try:
        if feed is not None:
            feed()
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise SystemExit(f"bench peer: Quix Streams did not count {expect} records within {timeout:.0f} s.")
    if proc.returncode != 0:
        raise SystemExit(f"bench peer: the Quix Streams run failed: {err_path.read_text().strip()[-400:]}")
    result = json.loads(out.strip().splitlines()[-1])
    with sqlite3.connect(db) as conn:
        commits = [(ms, n, {int(k): v for k, v in json.loads(ends).items()})
                   for ms, n, ends in conn.execute("SELECT commit_ms, processed, ends FROM commits")]
    return result, commits


# --- ours: the usage job's exactly-once query in this process -----------------------------------

def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def run_ours(job, topic: str, expect: int, timeout: float, feed=None) -> tuple[dict, list]:
    """Run the exactly-once query on `topic` from a fresh checkpoint and sink until it counted
    `expect`; (its figures, commits as (sink write ms, rows, end offsets)) from the sink ledger."""
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from pipelines.guarantees import counts, policy
    from pipelines.usage.job import reset_sink

    eo = policy(EO)
    job.s = dataclasses.replace(job.s, topics=dataclasses.replace(job.s.topics, decisions=topic))
    reset_sink(job.db, job.s, eo.query, eo.name)  # its counts, ledger and checkpoint together
    query = job.start_query(eo)
    batches: dict[int, object] = {}
    try:
        if feed is not None:
            feed()
        deadline = time.monotonic() + timeout
        while True:
            for p in query.recentProgress:
                batches[p["batchId"]] = p
            got = counts(job.db).get(EO, {"processed": 0, "fraud": 0})
            if got["processed"] >= expect:
                break
            if not query.isActive:
                raise SystemExit(f"bench peer: our exactly-once query stopped: {query.exception()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"bench peer: our query counted {got['processed']} of {expect} "
                                 f"within {timeout:.0f} s.")
            time.sleep(0.2)
        time.sleep(0.5)  # the last batch's progress is posted just after its sink write
        for p in query.recentProgress:
            batches[p["batchId"]] = p
    finally:
        query.stop()
        unload_state(job.spark)  # the warm-up's keys must not weigh on the measured run's heap
    applied = [b for b in ledger.batches(job.db, eo.query) if b["outcome"] == ledger.APPLIED]
    commits = [(b["ts"], b["processed"], {int(p): o for p, o in json.loads(b["end_offsets"]).get(topic, {}).items()})
               for b in applied]
    commits = [c for c in commits if c[2]]
    if len(commits) < len(applied):
        log(f"{len(applied) - len(commits)} batches had no end offsets in the ledger (left out of latency)")
    started = [p for p in batches.values() if p["numInputRows"]]
    first_ms = _ms(min(started, key=lambda p: p["batchId"])["timestamp"]) if started else None
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in started) / 1000
    return {"first_ms": first_ms, **got, "busy_s": busy}, commits


# --- the run ----------------------------------------------------------------------------------

def throughput(name: str, result: dict, commits: list, n: int, fraud: int) -> float:
    if result["processed"] != n or result["fraud"] != fraud:
        raise SystemExit(f"bench peer: {name} counted {result['processed']} processed / {result['fraud']} fraud, "
                         f"the truth is {n} / {fraud}.")
    last = max(ms for ms, _, _ in commits)
    secs = (last - result["first_ms"]) / 1000
    log(f"{name}: {n:,} events exactly once in {secs:.2f} s from first record to last sink commit "
        f"-> {n / secs:,.0f}/s ({len(commits)} commits)")
    return n / secs


def latency(name: str, s, topic: str, total: int, commits: list, since_ms: int) -> dict:
    stamps = read_stamps(s, topic, total)
    lat = commit_latencies(stamps, [(ms, ends) for ms, _, ends in commits], since_ms)
    fig = {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "measured": len(lat)}
    log(f"{name}: latency over {len(lat):,} records: p50 {fig['p50_ms']} ms, p99 {fig['p99_ms']} ms")
    return fig


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench peer")
    p.add_argument("--events", type=int, default=500_000, help="pre-filled decisions (throughput phase)")
    p.add_argument("--producers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rate", type=float, default=2_000.0, help="decisions/s fed in the latency phase")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds of the latency phase")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds fed before measuring latency")
    p.add_argument("--warm-passes", type=int, default=2,
                   help="untimed passes over the filled topic before the measured one, each engine (2)")
    p.add_argument("--commit-seconds", type=float, default=1.0,
                   help="our trigger interval and Quix's commit_interval")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per engine and phase")
    p.add_argument("--json", action="store_true", help="(the result is always printed as JSON)")
    # the Quix child (internal)
    p.add_argument("--quix-child", action="store_true", help=argparse.SUPPRESS)
    for flag in ("--bootstrap", "--topic", "--db", "--tag", "--phase", "--state-dir"):
        p.add_argument(flag, help=argparse.SUPPRESS)
    p.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quix_child:
        return quix_child(args)
    if args.events < 1 or args.rate <= 0 or args.seconds <= 0 or args.warmup < 0 or args.commit_seconds <= 0 \
            or args.warm_passes < 0:
        p.error("--events, --rate, --seconds and --commit-seconds must be positive and --warmup and "
                "--warm-passes zero or more")

    base = load()
    tag = uuid.uuid4().hex[:8]
    total = int(args.rate * (args.warmup + args.seconds))
    n, fraud = args.events, fraud_in(args.events)
    with own_broker(base, log) as bootstrap, \
            tempfile.TemporaryDirectory(prefix="bench-peer-", dir=base.run_dir) as tmp:
        work = Path(tmp)
        topic = f"bench-peer-{tag}"
        try:
            create_topic(base, topic, args.partitions)
            sent, took = fill(base, topic, n, args.producers)
            log(f"filled {topic} with {sent:,} decisions in {took:.1f} s")

            def feeder(dest: str, prefix: str):
                def feed():
                    with paced_producer(base, dest, prefix, args.rate, args.warmup + args.seconds) as res:
                        started_ms = res.get(args.warmup + args.seconds + 120)
                    feed.since_ms = started_ms + int(args.warmup * 1000)
                    log(f"fed {total:,} decisions to {dest} at {args.rate:g}/s")
                return feed

            # Quix first: nothing of Spark's is alive yet
            for i in range(args.warm_passes):
                log(f"quix: warm-up pass {i + 1} (not counted)")
                run_quix(bootstrap, topic, n, work, tag, f"warmup{i}", args.commit_seconds, args.timeout)
            log("quix: throughput phase")
            q_res, q_commits = run_quix(bootstrap, topic, n, work, tag, "throughput", args.commit_seconds,
                                        args.timeout)
            quix_eps = throughput("quix", q_res, q_commits, n, fraud)
            lat_q = f"bench-peer-{tag}-lat-quix"
            create_topic(base, lat_q, args.partitions, append_time=True)
            log(f"quix: latency phase ({args.rate:g}/s for {args.warmup:g} + {args.seconds:g} s)")
            feed = feeder(lat_q, "lq")
            _, q_lat_commits = run_quix(bootstrap, lat_q, total, work, tag, "latency", args.commit_seconds,
                                        args.timeout + args.warmup + args.seconds, feed=feed)
            quix_lat = latency("quix", base, lat_q, total, q_lat_commits, feed.since_ms)

            ours_eps, ours_lat, busy_eps = _ours(base, work, topic, n, fraud, total, tag, args, feeder)
        finally:
            delete_topics(base, tag, log)
    return {"ours_eps": round(ours_eps), "quix_eps": round(quix_eps),
            "ratio": round(ours_eps / quix_eps, 2) if quix_eps else None,
            "ours_p99_ms": ours_lat["p99_ms"], "quix_p99_ms": quix_lat["p99_ms"],
            "ours_p50_ms": ours_lat["p50_ms"], "quix_p50_ms": quix_lat["p50_ms"],
            "ours_busy_eps": round(busy_eps), "events": n, "latency_rate": args.rate,
            "latency_records": {"ours": ours_lat["measured"], "quix": quix_lat["measured"]},
            "commit_seconds": args.commit_seconds, "cpus": os.cpu_count(),
            "load_average_1m": round(os.getloadavg()[0], 2)}


def _ours(base, work: Path, topic: str, n: int, fraud: int, total: int, tag: str, args, feeder):
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from controlplane import fencing
    from pipelines.usage.job import UsageJob, spark_conf

    s = dataclasses.replace(base, store_path=work / "ours.db", checkpoint_root=work / "checkpoints",
                            trigger_seconds=args.commit_seconds, usage_trigger_seconds=args.commit_seconds)
    with own_spark("cardstream-bench-peer", s, **spark_conf(s),
                   **{"spark.sql.streaming.numRecentProgressUpdates": "1000"}) as spark:
        job = UsageJob([EO], s, windows=False)
        job.spark = spark
        job.epoch = fencing.take_lease(job.db, "usage")  # the query runs here, not through job.run()
        for i in range(args.warm_passes):
            log(f"ours: warm-up pass {i + 1} (not counted)")
            run_ours(job, topic, n, args.timeout)
        log("ours: throughput phase")
        res, commits = run_ours(job, topic, n, args.timeout)
        eps = throughput("ours", res, commits, n, fraud)
        busy_eps = n / res["busy_s"] if res["busy_s"] else 0.0
        lat_o = f"bench-peer-{tag}-lat-ours"
        create_topic(base, lat_o, args.partitions, append_time=True)
        log(f"ours: latency phase ({args.rate:g}/s for {args.warmup:g} + {args.seconds:g} s)")
        feed = feeder(lat_o, "lo")
        _, lat_commits = run_ours(job, lat_o, total, args.timeout + args.warmup + args.seconds, feed=feed)
        return eps, latency("ours", base, lat_o, total, lat_commits, feed.since_ms), busy_eps
