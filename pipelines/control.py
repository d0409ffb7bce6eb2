"""Issue a fault or command from the shell: `python -m pipelines.control FAULT [--job J] [--seconds N]`.

The command goes into the store's command table, exactly as a dashboard button puts it there; the
supervisor, the job or the simulator that owns it executes it once. `--wait` waits for the outcome.
"""
from __future__ import annotations

import argparse
import sys
import time

from infra.config import load
from infra.contracts import FAULTS
from pipelines import commands
from pipelines.store import connect

SIMULATOR_COMMANDS = ("pause", "resume", "set-rate", "set-fraud-rate", "set-late-rate")
DEFAULT_JOB = {"late-burst": "simulator", "bad-input": "simulator", "crash-after-sink": "usage",
               "sink-down": "usage", "task-failure": "usage"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.control",
                                     description="Issue a fault or a simulator command.")
    parser.add_argument("kind", choices=[*FAULTS, *SIMULATOR_COMMANDS], metavar="FAULT",
                        help=f"one of: {', '.join((*FAULTS, *SIMULATOR_COMMANDS))}")
    parser.add_argument("--job", choices=["fraud", "usage", "simulator"],
                        help="the job it applies to (default: usage for job faults)")
    parser.add_argument("--seconds", type=float, help="duration, for sink-down, broker-down and zombie")
    parser.add_argument("--count", type=int, help="events, for late-burst and bad-input")
    parser.add_argument("--rate", type=float, help="for set-rate (tx/s), set-fraud-rate and set-late-rate (0..1)")
    parser.add_argument("--wait", type=float, nargs="?", const=120.0, metavar="SECONDS",
                        help="wait for the outcome (default up to 120 s)")
    args = parser.parse_args(argv)
    if args.seconds is not None and args.seconds <= 0:
        parser.error("--seconds must be positive")
    job = args.job or DEFAULT_JOB.get(args.kind) or ("simulator" if args.kind in SIMULATOR_COMMANDS else "usage")
    params = {k: v for k, v in {"seconds": args.seconds, "count": args.count}.items() if v is not None}
    if args.rate is not None:
        params[{"set-rate": "rate", "set-fraud-rate": "fraud_rate", "set-late-rate": "late_rate"}
               .get(args.kind, "rate")] = args.rate
    db = connect(s=load())
    command_id = commands.issue(db, args.kind, job, **params)
    print(f"command {command_id}: {args.kind} for {job} issued")
    if args.wait is None:
        return 0
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        row = db["commands"].get(command_id)
        if row["status"] in (commands.DONE, commands.FAILED):
            print(f"command {command_id}: {row['status']}: {row['result']}")
            return 0 if row["status"] == commands.DONE else 1
        time.sleep(0.3)
    print(f"command {command_id}: still {db['commands'].get(command_id)['status']} after {args.wait:.0f} s "
          f"(is the supervisor / job running?)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
