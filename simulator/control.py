"""The simulator's side of the command table: claim its commands, carry them out, say how it went.

Commands for job "simulator" (issued by the dashboard or `python -m pipelines.control`):

| kind | params | does |
| --- | --- | --- |
| `pause` / `resume` | | stop / go on sending (what is in flight is still delivered) |
| `set-rate` | `rate` (tx/s, > 0) | pace the stream at that rate from now on |
| `set-fraud-rate` | `fraud_rate` (0..1) | share of fraud from the next block of events on |
| `set-late-rate` | `late_rate` (0..1) | share of late events from the next block on |
| `late-burst` | `count` (default 200) | the next `count` ordinary payments are late (out of order) |
| `bad-input` | `count` (default 50) | the next `count` messages are malformed |

Each command is claimed exactly once (pipelines.commands.claim) and finished with a one-line
result, or failed with the reason (a bad parameter, say) while the simulator runs on.
"""
from __future__ import annotations

import sys
from typing import Protocol

from pipelines import commands

JOB = "simulator"
KINDS = ("pause", "resume", "set-rate", "set-fraud-rate", "set-late-rate", "late-burst", "bad-input")
DEFAULT_COUNTS = {"late-burst": 200, "bad-input": 50}


class Target(Protocol):
    """What a command acts on (the running simulator); each returns a one-line result."""

    def pause(self) -> str: ...
    def resume(self) -> str: ...
    def set_rate(self, rate: float) -> str: ...
    def set_shares(self, fraud_rate: float | None = None, late_rate: float | None = None) -> str: ...
    def late_burst(self, count: int) -> str: ...
    def bad_input(self, count: int) -> str: ...


def _number(cmd: commands.Command, name: str, kind=float, default=None):
    value = cmd.param(name, default)
    if value is None:
        raise ValueError(f"{cmd.kind} needs the parameter {name!r}.")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{cmd.kind}: {name} must be a number, not {value!r}.") from None
    if kind is int and number != float(value):
        raise ValueError(f"{cmd.kind}: {name} must be a whole number, not {value!r}.")
    return number


def apply(target: Target, cmd: commands.Command) -> str:
    """Carry out one command on the target; ValueError (one sentence) when it cannot be."""
    kind = cmd.kind
    if kind == "pause":
        return target.pause()
    if kind == "resume":
        return target.resume()
    if kind == "set-rate":
        return target.set_rate(_number(cmd, "rate"))
    if kind == "set-fraud-rate":
        return target.set_shares(fraud_rate=_number(cmd, "fraud_rate", default=cmd.param("rate")))
    if kind == "set-late-rate":
        return target.set_shares(late_rate=_number(cmd, "late_rate", default=cmd.param("rate")))
    if kind in ("late-burst", "bad-input"):
        count = _number(cmd, "count", int, DEFAULT_COUNTS[kind])
        if count < 1:
            raise ValueError(f"{kind}: count must be at least 1, not {count}.")
        return target.late_burst(count) if kind == "late-burst" else target.bad_input(count)
    raise ValueError(f"The simulator does not know the command {kind!r}.")


class Control:
    """Polls the store for the simulator's commands and applies them to a target."""

    def __init__(self, db, job: str = JOB, err=sys.stderr):
        self.db = db
        self.job = job
        self.err = err
        self._warned = False

    def poll(self, target: Target) -> list[tuple[int, bool, str]]:
        """Claim and carry out every pending command; [(id, ok, result)]."""
        try:
            claimed = commands.claim(self.db, KINDS, self.job)
        except Exception as exc:  # a locked or broken store must not stop the traffic
            if not self._warned:
                print(f"simulator: cannot read commands from the store ({exc}); retrying.", file=self.err)
                self._warned = True
            return []
        done = []
        for cmd in claimed:
            try:
                result, ok = apply(target, cmd), True
            except ValueError as exc:
                result, ok = str(exc), False
            commands.finish(self.db, cmd.id, result, ok)
            print(f"simulator: command {cmd.id} {cmd.kind}: {result}", file=self.err, flush=True)
            done.append((cmd.id, ok, result))
        return done
