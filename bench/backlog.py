"""`python -m bench backlog --json`: the fraud job's memory while a backlog drains.

An outage leaves the job minutes of input behind. The bench fills a fresh transactions topic with
`--minutes` of traffic at `--rate` (10 minutes at the demo's 200 tx/s: 120,000 transactions), then
starts the fraud job on it, as the supervisor would after the outage, and samples the resident
memory (RSS) of its driver (Python) and of its Spark JVM every `--every` seconds until every
transaction is decided. The batches are bounded by MAX_OFFSETS_PER_TRIGGER, so memory should stay
flat: the JSON gives the RSS at the first committed batch, the peak and the last sample, and the
growth from the first batch to the end.
"""
from __future__ import annotations

import argparse
import time

from bench.common import scratch, create_topic, delete_topics, fill, fraud_job, logger, own_broker
from controlplane.store import connect
from infra.config import load
from pipelines.supervisor.memory import jvm_of, process_table, read_rss_mb

log = logger("backlog")


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench backlog")
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of traffic left behind (10)")
    p.add_argument("--rate", type=float, default=200.0, help="the traffic's rate, tx/s (the demo's 200)")
    p.add_argument("--every", type=float, default=2.0, help="seconds between memory samples")
    p.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    p.add_argument("--json", action="store_true", help="(the last line is always JSON)")
    args = p.parse_args(argv)
    s = load()
    n = int(args.minutes * 60 * args.rate)
    tag, work, topics, env = scratch(s, "backlog")
    with own_broker(s, log):
        try:
            create_topic(s, topics["TOPIC_TRANSACTIONS"], s.topics.partitions, append_time=True)
            sent, secs = fill(s, topics["TOPIC_TRANSACTIONS"], n, processes=2, kind="transactions")
            log(f"{sent:,} transactions ({args.minutes:g} min at {args.rate:g} tx/s) in the topic in {secs:.1f} s; "
                f"starting the fraud job (batches of at most {s.max_offsets_per_trigger:,})")
            db = connect(env["CARDSTREAM_DB"])
            started = time.monotonic()
            with fraud_job(env, work) as job:
                samples, first_batch = sample(job, db, sent, args, started, work)
                batches = recorded_batches(db, sent)
        finally:
            delete_topics(s, tag, log)
    return summary(args, s, sent, samples, first_batch, batches)


def sample(job, db, sent: int, args, started: float, work) -> tuple[list, int | None]:
    """(seconds, driver MB, JVM MB, decided) every --every s until every transaction is decided,
    and the first sample with decisions (the first batch's), or None."""
    samples, first_batch = [], None
    while time.monotonic() - started < args.timeout:
        if job.poll() is not None:
            raise SystemExit(f"bench backlog: the fraud job exited with {job.returncode}; "
                             f"see {work / 'fraud.log'}")
        jvm = jvm_of(process_table(), job.pid)
        driver, java = read_rss_mb(job.pid), read_rss_mb(jvm.pid) if jvm else None
        decided = db.execute("SELECT count(*) FROM decisions").fetchone()[0]
        if driver is not None and java is not None:
            samples.append((time.monotonic() - started, driver, java, decided))
            if first_batch is None and decided:  # the first batch's decisions are in
                first_batch = len(samples) - 1
        if decided >= sent:
            return samples, first_batch
        time.sleep(args.every)
    raise SystemExit(f"bench backlog: {decided:,} of {sent:,} decided after {args.timeout:.0f} s")


def recorded_batches(db, sent: int) -> tuple:
    """(batches, their largest, rows read) of the fraud query, once the listener has recorded them
    all (it records a batch just after its commit) or 30 s have passed."""
    deadline = time.monotonic() + 30
    while True:
        batches = db.execute("SELECT count(*), max(num_input_rows), sum(num_input_rows) FROM "
                             "batch_progress WHERE query = 'fraud' AND num_input_rows > 0").fetchone()
        if (batches[2] or 0) >= sent or time.monotonic() > deadline:
            return batches
        time.sleep(1)


def summary(args, s, sent: int, samples: list, first_batch: int | None, batches: tuple) -> dict:
    """The JSON: memory from the first batch on (the warm-up before it is not the backlog's)."""
    drained = samples[-1][0]
    tail = samples[first_batch:] if first_batch is not None else samples
    total = [d + j for _, d, j, _ in tail]
    result = {
        "transactions": sent, "minutes": args.minutes, "rate": args.rate,
        "max_offsets_per_trigger": s.max_offsets_per_trigger, "batches": batches[0], "max_batch_rows": batches[1],
        "drain_s": round(drained, 1), "samples": len(samples),
        "driver_mb": {"first_batch": round(tail[0][1]), "peak": round(max(d for _, d, _, _ in tail)),
                      "last": round(tail[-1][1])},
        "jvm_mb": {"first_batch": round(tail[0][2]), "peak": round(max(j for _, _, j, _ in tail)),
                   "last": round(tail[-1][2])},
        "growth_pct": round((total[-1] - total[0]) / total[0] * 100, 1),
        "peak_over_first_pct": round((max(total) - total[0]) / total[0] * 100, 1),
    }
    log(f"drained {sent:,} in {drained:.0f} s over {batches[0]} batches; driver + JVM "
        f"{total[0]:.0f} MB at the first batch, peak {max(total):.0f} MB, last {total[-1]:.0f} MB")
    return result
