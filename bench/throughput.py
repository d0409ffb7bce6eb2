"""Sustained events/s through each guarantee, Kafka -> Spark -> SQLite, in wall-clock time, beside
Spark's own Kafka -> no-op ceiling measured in the same run: `python -m bench throughput --json`.

Fills a fresh decisions topic with N events from several producer processes, then runs the usage
job's own query for each guarantee (pipelines.usage.UsageJob.start_query: same parsing,
aggregation, Spark's dedupe for exactly-once, and sink rule) over it, one after the other in one Spark application, until
its sink has counted all N; and, in the same application over the same topic, Spark's Kafka source
into the `noop` sink (the records read and materialised, nothing done: bench/limit.py's query).
At-most-once is told to start from the earliest offset here (it normally starts from the latest),
otherwise it would see none of the pre-filled topic. Every query runs with a 0 s trigger (a batch
starts when the one before it ends; the job's own USAGE_TRIGGER_SECONDS paces a live feed, not a
backlog) and maxOffsetsPerTrigger as the job's (USAGE_MAX_OFFSETS), and its state is unloaded from
the JVM when it stops (`unload_state`). Untimed warm-up passes of every query first (`--warmup`,
3: in one application, ten passes of each, the no-op's second pass still took 3.47 µs of the JVM's
CPU an event and its third on 1.97–2.52; the others' from their third on within the spread of their
later passes, bench/RESULTS.md); with
`--rounds R` every query runs R times, each round in a rotated order (so a load that drifts over
the run falls on every query alike), and each figure is the median of its R runs (8 by default:
one round's ratio moves by a tenth, and on 2026-11-30 the first round after three warm-up passes
had the lowest exactly-once / at-least-once in 13 runs of 15, 0.46-0.83 against a median of 0.87).

Figures (events/s):
- the headline, wall clock: N / (the end of the batch that brought the count to N - the start of
  the query's first batch), from Spark's own progress (a batch's start `timestamp` plus its
  triggerExecution). What a user waiting for the count sees, minus the query's start-up (planning,
  the checkpoint's creation) before its first batch, which a long-running job pays once.
- busy (beside it, named): N / the sum of the batches' triggerExecution, the figure this bench
  printed before 2026-11-25; it leaves out the time between batches.
- eo_over_alo, eo_over_noop: ratios of the wall-clock figures, both measured in this run;
  alo_over_noop, at-least-once over the no-op, the part of the ceiling left before exactly-once's
  shuffle and state store add anything (exactly-once / no-op can be no higher, give or take the noise). With
  --rounds above 1, `rounds` holds each round's own three ratios as well (their spread is the noise).
- median_interval (with --rounds above 1): for each of the three ratios, the interval the rounds give
  its median at 95 % or more (order statistics; with eight rounds or fewer the extremes, at the
  coverage they have), and that coverage: a goal inside the interval is one these rounds cannot
  decide.
- cpu_us_per_event (local mode): the driver JVM's CPU time over each query's run per event, the
  median of the rounds; on a machine shared with other work it moves far less than the clocks.
Prints {"at-most-once", "at-least-once", "exactly-once", "noop", "eo_over_alo", "eo_over_noop",
"alo_over_noop", "wall_clock": true, "busy": {the same four figures and ratios in busy time},
"cpu_us_per_event": {query: µs}, "rounds": {"eo_over_alo": [r, ...], "eo_over_noop": [r, ...],
"alo_over_noop": [r, ...]}, "median_interval": {each ratio: [low, high], "coverage": c}}.

With --cluster the same queries run on the Spark standalone cluster (infra.cluster: started for
the run unless it is up, stopped after it if the bench started it), as an application with one
executor per worker; the figures add the workers ALIVE and the executors the application had.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from bench.common import cpu_seconds, fill, own_broker, own_cluster, own_spark, unload_state, wait_for_rows
from bench.limit import noop_query
from infra import cluster
from infra.config import load
from infra.contracts import GUARANTEES
from infra.topics import ensure_topics

NOOP = "noop"
# each ratio the JSON line holds: (query, the query it is over)
RATIOS = {"eo_over_alo": ("exactly-once", "at-least-once"), "eo_over_noop": ("exactly-once", NOOP),
          "alo_over_noop": ("at-least-once", NOOP)}


def log(msg: str) -> None:
    print(f"bench throughput: {msg}", file=sys.stderr, flush=True)


def started_at(progress: dict) -> float:
    """A batch's trigger start (Spark's progress `timestamp`, ISO 8601 UTC) in epoch seconds."""
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def rates(progress: list[dict]) -> tuple[float, float]:
    """(wall-clock, busy) events/s of a query's batches with rows: rows / (the last batch's end -
    the first batch's start), and rows / the sum of their triggerExecution."""
    if not progress:
        return 0.0, 0.0
    rows = sum(p["numInputRows"] for p in progress)
    busy = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
    last = progress[-1]
    wall = started_at(last) + last["durationMs"].get("triggerExecution", 0) / 1000 - started_at(progress[0])
    return (rows / wall if wall > 0 else 0.0), (rows / busy if busy > 0 else 0.0)


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """A distribution-free interval for the median of what `values` sample: the order statistics
    of ranks r and n + 1 - r, r the largest whose coverage (1 - 2 P(Binomial(n, 1/2) < r)) is at
    least `confidence`, else the extremes; (low, high, coverage). Why: one round's ratio moves more
    than a goal's gap, so a median alone cannot say on which side of a goal the ratio lies."""
    x = sorted(values)
    n = len(x)
    if n == 0:
        raise ValueError("no values")

    def coverage(r: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(r)) / 2 ** n

    r = 1
    while r + 1 <= (n + 1) // 2 and coverage(r + 1) >= confidence:
        r += 1
    return x[r - 1], x[n - r], round(coverage(r), 3)


def figures(runs: dict[str, list[tuple]]) -> dict:
    """{query: [(wall, busy[, cpu µs/event]), ...]} -> the JSON line: medians, wall clock first,
    busy beside it, and the JVM's CPU per event when measured."""
    wall = {q: statistics.median(r[0] for r in rs) for q, rs in runs.items()}
    busy = {q: statistics.median(r[1] for r in rs) for q, rs in runs.items()}
    cpu = {q: round(statistics.median(r[2] for r in rs), 2) for q, rs in runs.items()
           if rs and all(len(r) > 2 and r[2] is not None for r in rs)}

    def line(eps: dict) -> dict:
        return {**{q: round(eps[q]) for q in (*GUARANTEES, NOOP)},
                **{name: ratio(eps[top], eps[bottom]) for name, (top, bottom) in RATIOS.items()}}

    out = {**line(wall), "wall_clock": True, "busy": line(busy)}
    if len(runs["exactly-once"]) > 1:
        # each round's own ratios (the queries of a round run back to back): on a shared machine one
        # round's ratio moves far more than the medians' (eo_over_noop 0.54-1.13 over nine rounds of one run)
        out["rounds"] = {name: [ratio(a[0], b[0]) for a, b in zip(runs[top], runs[bottom])]
                         for name, (top, bottom) in RATIOS.items()}
        intervals = {name: median_interval([r for r in rs if r is not None]) for name, rs in out["rounds"].items()
                     if any(r is not None for r in rs)}
        if intervals:
            out["median_interval"] = {**{name: [lo, hi] for name, (lo, hi, _) in intervals.items()},
                                      "coverage": min(c for _, _, c in intervals.values())}
    if cpu:
        out["cpu_us_per_event"] = cpu
    return out


def jvm_cpu_seconds(spark) -> float | None:
    """CPU time (user + system) the driver's JVM has used so far, from /proc; None off Linux.
    In local mode every task runs in it, so its difference over a query is the query's CPU, a
    figure other work on a shared machine disturbs far less than the wall clock."""
    return cpu_seconds(spark._jvm.java.lang.ProcessHandle.current().pid())


def measure(job, query: str, n: int, timeout: float, label: str = "") -> tuple[float, float, float | None]:
    """Run one guarantee's query (or the no-op one) over the filled topic to its N-th event:
    (wall-clock events/s, busy events/s, the JVM's CPU µs per event or None on a cluster)."""
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from pipelines import guarantees
    from pipelines.usage.job import reset_sink

    if query == NOOP:
        stream = noop_query(job.spark, job.s.topics.decisions, job.s)
    else:
        policy = guarantees.policy(query)
        reset_sink(job.db, job.s, policy.query, policy.name)  # its counts, ledger and checkpoint: a fresh run
        stream = job.start_query(policy)
    t0, cpu0 = time.monotonic(), jvm_cpu_seconds(job.spark) if job.s.spark_master.startswith("local") else None
    try:
        progress = wait_for_rows(stream, n, timeout, f"{query} query", every=0.2)
        total = time.monotonic() - t0
        cpu1 = jvm_cpu_seconds(job.spark) if cpu0 is not None else None
        sink = n if query == NOOP else guarantees.counts(job.db).get(query, {}).get("processed", 0)
    finally:
        stream.stop()
        unload_state(job.spark)
    rows = sum(p["numInputRows"] for p in progress)
    if rows < n or sink != n:
        raise RuntimeError(f"{query}: read {rows} and counted {sink} of {n} events within {timeout:.0f} s")
    wall, busy = rates(progress)
    cpu_us = (cpu1 - cpu0) * 1e6 / n if cpu1 is not None else None
    log(f"{label}{query}: {rows} rows in {len(progress)} batches -> {wall:,.0f}/s wall clock "
        f"({rows / wall:.2f} s), {busy:,.0f}/s busy; {rows / total:,.0f}/s counting its start-up ({total:.1f} s)"
        + (f"; the JVM's CPU {cpu_us:.2f} µs an event" if cpu_us is not None else ""))
    return wall, busy, cpu_us


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench throughput")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (always)")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=8,
                        help="runs of each query, rotated; figures are medians (one round's ratio moves by a "
                             "tenth, and the first after the warm-up is most often the lowest)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed passes of every query before the rounds (the JIT's steady state)")
    parser.add_argument("--max-offsets", type=int, default=None, help="maxOffsetsPerTrigger (default: setting)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--topic", help="reuse a topic already filled with exactly --events events")
    parser.add_argument("--cluster", action="store_true",
                        help="run on the Spark standalone cluster (SPARK_MASTER_PORT, SPARK_WORKERS ...)")
    args = parser.parse_args(argv)
    if args.events < 1 or args.producers < 1 or args.rounds < 1 or args.warmup < 0:
        raise SystemExit("--events, --producers and --rounds must be positive, --warmup not negative.")

    base = load()
    if args.cluster and base.spark_master.startswith("local"):
        base = dataclasses.replace(base, spark_master=base.spark_master_url)
    with own_broker(base, log), (own_cluster(base, log) if args.cluster else contextlib.nullcontext()):
        return _run(args, base)


def executors(spark) -> int:
    """The executors the application has now: its block managers, the driver's not counted."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


def _run(args, base) -> dict:
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from controlplane import fencing
    from pipelines.usage.job import UsageJob, spark_conf

    topic = args.topic or f"bench-throughput-{uuid.uuid4().hex[:8]}"
    if not args.topic:
        ensure_topics([topic], partitions=args.partitions, s=base)
        sent, took = fill(base, topic, args.events, args.producers)
        log(f"filled {topic} with {sent} events in {took:.1f} s ({sent / took:,.0f}/s, {args.producers} producers)")
    queries = [NOOP, *GUARANTEES]
    runs: dict[str, list[tuple]] = {q: [] for q in queries}
    extra = {}
    with tempfile.TemporaryDirectory(prefix="bench-throughput-", dir=base.run_dir) as tmp:
        s = dataclasses.replace(base, topics=dataclasses.replace(base.topics, decisions=topic),
                                store_path=Path(tmp) / "cardstream.db", checkpoint_root=Path(tmp) / "checkpoints",
                                trigger_seconds=0.0, usage_trigger_seconds=0.0,
                                usage_max_offsets=args.max_offsets or base.usage_max_offsets)
        with own_spark("cardstream-bench-throughput", s, **spark_conf(s)) as spark:
            log(f"on {s.spark_master}, load average {' '.join(f'{x:.1f}' for x in _load())} (1, 5, 15 min)")
            job = UsageJob(list(GUARANTEES), s, windows=False, amo_from_earliest=True)
            job.spark = spark
            job.epoch = fencing.take_lease(job.db, "usage")  # the queries run here, not through job.run()
            for w in range(args.warmup):  # each query's own code warmed (JIT), not only exactly-once's
                for q in queries:
                    measure(job, q, args.events, args.timeout, label=f"warm-up {w + 1} (not counted) ")
            for r in range(args.rounds):
                for q in queries[r % len(queries):] + queries[:r % len(queries)]:
                    runs[q].append(measure(job, q, args.events, args.timeout, label=f"round {r + 1}: "))
            if not s.spark_master.startswith("local"):
                extra = {"workers": len(cluster.alive_workers(cluster.master_json(s) or {}, s)),
                         "executors": executors(spark)}
            log(f"load average after the run {' '.join(f'{x:.1f}' for x in _load())} (1, 5, 15 min)")
    return {**figures(runs), **extra}


def _load() -> tuple[float, float, float]:
    import os

    return os.getloadavg()
