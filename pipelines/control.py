"""Issue a fault or command from the shell: `python -m pipelines.control FAULT [--job J] [--seconds N]`.

The arguments come from the fault catalogue (`controlplane.faults`); the command goes into the
store's command table exactly as a dashboard button puts it there, and is refused at once with
one sentence when no executor could carry it out. `--wait` waits for the outcome.
"""
from __future__ import annotations

import argparse
import sys
import time

from controlplane import commands, faults
from controlplane.store import connect
from infra.config import load


def parser() -> argparse.ArgumentParser:
    kinds = list(faults.CATALOGUE)
    p = argparse.ArgumentParser(prog="python -m pipelines.control", description="Issue a fault or a simulator command.",
                                epilog="\n".join(f"{k}: {f.sentence} (jobs: {', '.join(f.jobs) or f.target})"
                                                 for k, f in faults.CATALOGUE.items()),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=kinds, metavar="FAULT", help=f"one of: {', '.join(kinds)}")
    p.add_argument("--job", help="the job it applies to (default: the catalogue's first for that fault)")
    seen = set()
    for f in faults.CATALOGUE.values():
        for param in f.params:
            if param.name not in seen:
                seen.add(param.name)
                p.add_argument(f"--{param.name.replace('_', '-')}", dest=param.name,
                               help=f"{param.help}" + (f" ({param.unit})" if param.unit else ""))
    p.add_argument("--wait", type=float, nargs="?", const=120.0, metavar="SECONDS",
                   help="wait for the outcome (default up to 120 s)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    names = {param.name for f in faults.CATALOGUE.values() for param in f.params}
    given = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    db = connect(s=load())
    try:
        command_id = commands.issue(db, args.kind, args.job, **given)
    except faults.Refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    row = commands.get(db, command_id)
    print(f"command {command_id}: {args.kind} for {faults.target(args.kind, row['job'])} issued")
    if args.wait is None:
        return 0
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        row = commands.get(db, command_id)
        if row["status"] in (commands.DONE, commands.FAILED):
            print(f"command {command_id}: {row['status']}: {row['result']}")
            return 0 if row["status"] == commands.DONE else 1
        time.sleep(0.3)
    print(f"command {command_id}: still {commands.get(db, command_id)['status']} after {args.wait:.0f} s "
          f"(is the supervisor / job running?)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
