"""What the real-time fraud path's guarantee costs on one crash: `python -m bench fraud-guarantees --json`.

For each of at-most-once and at-least-once, on fresh topics, store and checkpoint: starts
`python -m pipelines.fraud --mode realtime --guarantee G`, waits for its first real-time decision,
feeds valid transactions at `--rate` tx/s, SIGKILLs the job's driver after `--before` seconds (the
only fault; the stateful path dies with it), restarts it with the same arguments after
RESTART_DELAY_SECONDS (as the supervisor would), keeps feeding for `--after` seconds once the
real-time path decides again, stops feeding, lets the accurate (stateful) path drain, and reads
the topics back (read_committed; every time the broker's LogAppendTime):

- `undecided`: transactions fed that `decisions-rt` never decided;
- `replayed`: `decisions-rt` records beyond the first of their transaction (a replay resends);
- `p99_after_recovery_ms`: p99 of (decision appended - transaction appended) over the
  `decisions-rt` records appended in the minute after the first one after the kill;
- `filled_by_accurate`: of the undecided, how many the stateful path decided in `decisions`
  (exactly once), and `accurate_p99_ms` / `accurate_max_ms`, how long after arriving;
- `down_ms`: kill to the restarted real-time query's first decision (its start is recorded by the
  job in the store's `fraud_rt_runs`; the killed driver's JVM may still append a few meanwhile).

The figures are `pipelines.audit.paths.episode`, the arithmetic the live auditor records for the
Fraud page. Last line: {"at-most-once": {...}, "at-least-once": {...}, "rate": R}.
"""
from __future__ import annotations

import argparse
import sys
import time
import uuid

from bench.common import own_broker
from bench.harness.fraud_rt import Feeder, RealtimeRun, read_stamps, recovered
from bench.harness.jobs import wait_for
from infra.config import load
from pipelines.audit.paths import episode

GUARANTEES = ("at-most-once", "at-least-once")
FIGURES = ("undecided", "p99_after_recovery_ms", "filled_by_accurate", "replayed", "transactions", "down_ms",
           "accurate_p99_ms", "accurate_max_ms")


def log(msg: str) -> None:
    print(f"bench fraud-guarantees: {msg}", file=sys.stderr, flush=True)


def run_one(s, guarantee: str, args) -> dict:
    run = RealtimeRun(s, guarantee, s.run_dir / f"bench-fraud-guarantees-{uuid.uuid4().hex[:8]}")
    feeder = None
    try:
        run.start()
        run.prime()
        feeder = Feeder(s, run.tx, args.rate, prefix="t")
        feeder.start()
        log(f"{guarantee}: job up, feeding {args.rate:g} tx/s; SIGKILL in {args.before:g} s")
        time.sleep(args.before)
        before = run.rt_end()
        killed_at = run.kill()
        log(f"{guarantee}: SIGKILL sent; restart in {s.restart_delay_seconds:g} s")
        time.sleep(s.restart_delay_seconds)
        run.start()
        recovered(run, before, timeout=300)
        time.sleep(args.after)
        feeder.stop()
        fed = set(feeder.sent)
        log(f"{guarantee}: fed {len(fed)}; waiting for the accurate path to decide them")

        def drained():
            return not fed - {t for t, _ in read_stamps(s, run.dec)}
        try:
            wait_for(drained, args.drain, "the accurate path to decide every transaction", interval=3.0)
        except TimeoutError as exc:
            log(str(exc))
        time.sleep(2)  # a real-time decision still on its way
        tx, rt, acc = run.stamps(run.tx, "t-"), run.stamps(run.rt, "t-"), run.stamps(run.dec, "t-")
        fig = episode(tx, rt, acc, killed_at, since=0, until=1 << 62, restarted_at=run.restarted_at(killed_at))
        out = {k: fig[k] for k in FIGURES}
        log(f"{guarantee}: {out}")
        run.stop()
        run.delete_topics()
        return out
    except BaseException:
        if feeder is not None:
            feeder.stop()
        run.stop(keep=True)
        log(f"{guarantee}: failed; the job's output is kept in {run.work}")
        raise


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench fraud-guarantees")
    p.add_argument("--rate", type=float, default=50.0,
                   help="transactions per second (in real-time mode the stateful path is throttled to 100/s, "
                        "pipelines/fraud/job.py: at 50 it drains the restart's backlog)")
    p.add_argument("--before", type=float, default=20.0, help="seconds fed before the SIGKILL")
    p.add_argument("--after", type=float, default=60.0, help="seconds fed after the real-time path is back")
    p.add_argument("--drain", type=float, default=180.0, help="how long the accurate path may take to catch up")
    p.add_argument("--guarantee", choices=GUARANTEES, action="append", help="run only this one (repeatable)")
    p.add_argument("--json", action="store_true", help="(the last line is always JSON)")
    args = p.parse_args(argv)
    if args.rate <= 0 or args.before <= 0 or args.after < 0:
        p.error("--rate and --before must be positive and --after zero or more")

    s = load()
    result = {}
    with own_broker(s, log):
        for g in args.guarantee or GUARANTEES:
            result[g] = run_one(s, g, args)
    result["rate"] = args.rate
    return result
