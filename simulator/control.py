"""The simulator's side of the command table: claim its commands, carry them out, say how it went.

Which commands are the simulator's, their parameters and defaults come from the fault catalogue
(`controlplane.faults`, executor `simulator`): pause, resume, set-rate, set-fraud-rate,
set-late-rate, late-burst and bad-input. Each is claimed exactly once and finished with a
one-line result, or failed with the reason (a bad parameter, say) while the simulator runs on.
"""
from __future__ import annotations

import logging
from typing import Protocol

from controlplane import commands, faults

JOB = "simulator"
KINDS = faults.claims(faults.SIMULATOR)
log = logging.getLogger(JOB)


class Target(Protocol):
    """What a command acts on (the running simulator); each returns a one-line result."""

    def pause(self) -> str: ...
    def resume(self) -> str: ...
    def set_rate(self, rate: float) -> str: ...
    def set_shares(self, fraud_rate: float | None = None, late_rate: float | None = None) -> str: ...
    def late_burst(self, count: int) -> str: ...
    def bad_input(self, count: int) -> str: ...


def _number(cmd: commands.Command, name: str):
    """The parameter as the catalogue types and bounds it (a command written straight into the
    table, past `commands.issue`, is checked here again)."""
    param = faults.get(cmd.kind).param(name)
    value = cmd.param(name, param.default)
    if value is None:
        raise ValueError(f"{cmd.kind} needs the parameter {name!r}.")
    return param.coerce(cmd.kind, value)


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
        return target.set_shares(fraud_rate=_number(cmd, "fraud_rate"))
    if kind == "set-late-rate":
        return target.set_shares(late_rate=_number(cmd, "late_rate"))
    if kind == "late-burst":
        return target.late_burst(_number(cmd, "count"))
    if kind == "bad-input":
        return target.bad_input(_number(cmd, "count"))
    raise ValueError(f"The simulator does not know the command {kind!r}.")


class Control:
    """Polls the store for the simulator's commands and applies them to a target."""

    def __init__(self, db, job: str = JOB):
        self.db = db
        self.job = job
        self._warned = False

    def poll(self, target: Target) -> list[tuple[int, bool, str]]:
        """Claim and carry out every pending command; [(id, ok, result)]."""
        try:
            claimed = commands.claim(self.db, KINDS, self.job)
        except Exception as exc:  # a locked or broken store must not stop the traffic
            if not self._warned:
                log.warning("cannot read commands from the store (%s); retrying.", exc)
                self._warned = True
            return []
        done = []
        for cmd in claimed:
            try:
                result, ok = apply(target, cmd), True
            except ValueError as exc:  # faults.Refused is a ValueError too
                result, ok = str(exc), False
            commands.finish(self.db, cmd.id, result, ok)
            log.info("command %s %s: %s", cmd.id, cmd.kind, result)
            done.append((cmd.id, ok, result))
        return done
