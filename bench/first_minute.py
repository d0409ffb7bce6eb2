"""`python -m bench first-minute --json`: seconds from `make demo` to its first decision in the store.

Runs `make demo` as a user does, `--rounds` times, each in a fresh run folder (its own broker,
topics, store and checkpoints: the first minute of a new checkout), the dashboard on
`--dashboard-port`, and stops it with Ctrl-C (SIGINT) once the fraud job's first batch has
committed and both warm standbys started. Per round: `first_decision_s` (the command's start to the first decision
row the store holds, polled every 0.25 s), and where the seconds went: `fraud_lease_s` (the fraud
job's driver, Spark JVM and session up: it took the lease), `fraud_first_batch_s` (its first
committed batch with rows) and `standbys_started_s` (the later of the two standbys' start: after
their jobs' first batches, issue 36 item 8). Goal (issue 36 item 8): ≤ 60 s.
"""
from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

from infra import daemons, kafka_client
from infra.config import ROOT, load

GOAL_S = 60


def log(message: str) -> None:
    print(f"bench first-minute: {message}", file=sys.stderr, flush=True)


def scalar(db: Path, sql: str, args=()):
    """One value from the demo's store, None while it (or the table) does not exist yet."""
    if not db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            row = conn.execute(sql, args).fetchone()
        return row[0] if row else None
    except sqlite3.Error:
        return None


def one_round(run_dir: Path, env: dict, timeout: float) -> dict:
    db = run_dir / "cardstream.db"
    started_ms = int(time.time() * 1000)
    with open(run_dir.parent / f"{run_dir.name}.log", "ab") as out:
        demo = subprocess.Popen(["make", "demo"], cwd=ROOT, env={**env, "CARDSTREAM_RUN_DIR": str(run_dir)},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    seen_ms = None
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and demo.poll() is None:
            if seen_ms is None and scalar(db, "SELECT 1 FROM decisions LIMIT 1"):
                seen_ms = int(time.time() * 1000)
            standbys = scalar(db, "SELECT count(*) FROM job_status WHERE job LIKE '%-standby' AND pid IS NOT NULL")
            batch = scalar(db, "SELECT 1 FROM batch_progress WHERE query = 'fraud' AND num_input_rows > 0")
            if seen_ms is not None and (standbys or 0) >= 2 and batch:  # its progress comes after its commit
                break
            time.sleep(0.25)
        if seen_ms is None:
            raise SystemExit(f"bench first-minute: no decision {timeout:.0f} s after make demo "
                             f"(exit {demo.poll()}; its log: {run_dir.parent / f'{run_dir.name}.log'})")

        def since(ms):
            return round((ms - started_ms) / 1000, 1) if ms else None
        return {"first_decision_s": since(seen_ms),
                "fraud_lease_s": since(scalar(db, "SELECT min(taken_at) FROM leases WHERE job = 'fraud'")),
                "fraud_first_batch_s": since(scalar(db, "SELECT min(ts) FROM batch_progress WHERE query = 'fraud' "
                                                        "AND num_input_rows > 0")),
                "standbys_started_s": since(scalar(db, "SELECT max(started_at) FROM job_status "
                                                       "WHERE job LIKE '%-standby'"))}
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C, as a user stops it
            try:
                demo.wait(timeout=load().stop_grace_seconds + 60)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
                demo.wait()


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench first-minute")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dashboard-port", type=int, default=int(os.environ.get("DASHBOARD_PORT", "8501")))
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the first decision")
    parser.add_argument("--json", action="store_true", help="(the last line is always JSON)")
    args = parser.parse_args(argv)
    base = load().run_dir / f"first-minute-{int(time.time())}"
    base.mkdir(parents=True)
    env = {**os.environ, "DASHBOARD_PORT": str(args.dashboard_port)}
    if kafka_client.answers(load()):
        # a broker already holds the port (`bench all`'s, a running demo's): the new checkout's
        # first minute starts a broker of its own, on free ports, as it would on a fresh machine
        port, controller = daemons.free_ports(2)
        env.update(KAFKA_PORT=str(port), KAFKA_CONTROLLER_PORT=str(controller))
        log(f"a broker already answers on the configured port: the demo's broker gets {port}/{controller}")
    rounds = []
    for i in range(1, args.rounds + 1):
        r = one_round(base / f"round-{i}", env, args.timeout)
        log(f"round {i}: first decision {r['first_decision_s']} s after make demo ({r})")
        rounds.append(r)
    firsts = [r["first_decision_s"] for r in rounds]
    return {"first_decision_s": statistics.median(firsts), "first_decision_runs": firsts,
            "rounds": rounds, "goal_s": GOAL_S, "load_average_1m": round(os.getloadavg()[0], 1),
            "cpus": os.cpu_count()}
