"""`python -m bench recovery --json`: seconds from SIGKILL to the first new committed batch,
and where they went (kill -> lease taken -> first batch with rows started -> committed).

Runs the real stack on fresh topics and a scratch store: broker, simulator, and the supervisor with
the fraud and usage jobs; then crashes each job `--rounds` times through the command table, as the
dashboard's button does, and reports the median of the recovery times the supervisor measured.
`--standby` runs each job with a warm standby and crashes the active only once its standby's
session is up; the recovery is then the standby's takeover. Goal: ≤ 10 s each.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from infra import broker
from infra.config import ROOT, load
from controlplane import commands
from controlplane.store import connect


def log(message: str) -> None:
    print(f"bench recovery: {message}", file=sys.stderr, flush=True)


def wait_for(what: str, predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"bench recovery: timed out after {timeout:.0f} s waiting for {what}")


PHASES = ("to_lease_s", "to_batch_s", "batch_s")


def median_phases(rows: list[dict]) -> dict:
    """The median of each phase of the recoveries (pipelines.supervisor.faults.phases) that tell it."""
    out = {}
    for phase in PHASES:
        values = [r[phase] for r in rows if r.get(phase) is not None]
        out[phase] = round(statistics.median(values), 2) if values else None
    return out


def describe(rec: dict) -> str:
    return ", ".join(f"{p[:-2].replace('_', ' ')} " + (f"{rec[p]:.1f} s" if rec.get(p) is not None else "not told")
                     for p in PHASES)


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench recovery")
    parser.add_argument("--rounds", type=int, default=3, help="crashes per job (median over these)")
    parser.add_argument("--rate", type=float, default=200, help="simulator rate, tx/s")
    parser.add_argument("--standby", action="store_true",
                        help="run each job with a warm standby (the crash hands over to it)")
    parser.add_argument("--crash", default="fraud,usage", help="the jobs to crash, comma-separated (both run)")
    parser.add_argument("--json", action="store_true", help="(the last line is always JSON)")
    args = parser.parse_args(argv)
    crashed = [j.strip() for j in args.crash.split(",") if j.strip()]
    if not crashed or set(crashed) - {"fraud", "usage"}:
        parser.error("--crash takes fraud, usage or both")
    s = load()
    started_broker = not s.external_bootstrap and not broker.broker_pids(s)
    broker.up(s, quiet=True)
    work = Path(tempfile.mkdtemp(prefix="bench-recovery-", dir=s.run_dir))
    tag = uuid.uuid4().hex[:8]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(work / "cardstream.db"),
           "CHECKPOINT_ROOT": str(work / "checkpoints"), "RESTART_DELAY_SECONDS": "1",
           "TOPIC_TRANSACTIONS": f"bench-tx-{tag}", "TOPIC_LABELS": f"bench-labels-{tag}",
           "TOPIC_DECISIONS": f"bench-decisions-{tag}", "TOPIC_DLQ": f"bench-dlq-{tag}",
           "TOPIC_MARKERS": f"bench-markers-{tag}", "TOPIC_DECISIONS_RT": f"bench-decisions-rt-{tag}",
           "AUDIT_INTERVAL_SECONDS": "3600", "TRIGGER_SECONDS": "0.5"}
    db = connect(env["CARDSTREAM_DB"])
    log(f"starting the supervisor (fraud, usage, simulator at {args.rate:.0f} tx/s); logs in {work}")
    with open(work / "supervisor.log", "ab") as out:
        sup = subprocess.Popen([sys.executable, "-m", "pipelines.supervisor", "--jobs", "fraud,usage",
                                "--with-simulator", "--simulator-args", f"--rate {args.rate}",
                                *(["--standby"] if args.standby else [])],
                               env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        for job in ("fraud", "usage"):
            pattern = "usage-%" if job == "usage" else job
            wait_for(f"{job}'s first batch", lambda: db.execute(
                "SELECT count(*) FROM batch_progress WHERE query LIKE ? AND num_input_rows > 0",
                [pattern]).fetchone()[0], timeout=240)
        for round_ in range(1, args.rounds + 1):
            for job in crashed:
                if args.standby:  # crash only once the standbys' sessions are up, as a user would see them:
                    # one fault at a time, not while the other job's new standby starts and rehearses
                    for other in ("fraud", "usage"):
                        wait_for(f"{other}'s standby", lambda other=other: db.execute(
                            "SELECT status FROM job_status WHERE job = ?", [f"{other}-standby"]).fetchone()
                            == ("ready",), 240)
                before = db["recoveries"].count_where("job = ?", [job])
                command_id = commands.issue(db, "crash", job)
                wait_for(f"the crash of {job}", lambda: db["commands"].get(command_id)["status"] != "pending", 30)
                wait_for(f"{job} to recover", lambda: db["recoveries"].count_where("job = ?", [job]) > before, 240)
                (rec,) = db["recoveries"].rows_where("job = ?", [job], order_by="id desc", limit=1)
                log(f"round {round_}: {job} recovered in {rec['seconds']:.1f} s ({describe(rec)})")
        result = {}
        for job in crashed:
            rows = list(db["recoveries"].rows_where("job = ?", [job]))
            result[f"{job}_s"] = round(statistics.median(r["seconds"] for r in rows), 2)
            result[f"{job}_runs"] = [round(r["seconds"], 2) for r in rows]
            result[f"{job}_phases_s"] = median_phases(rows)
        result["goal_s"] = 10
        result["standby"] = args.standby
        result["rehearsal"] = args.standby and s.standby_rehearsal  # STANDBY_REHEARSAL
        return result
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sup.kill()
        if started_broker:
            broker.down(s, quiet=True)
