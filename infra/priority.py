"""A process's share of the CPU on Linux: its threads' niceness and its session's scheduling group.

Why both: with autogroups on (`kernel.sched_autogroup_enabled`, the default of most distributions)
the scheduler shares the CPU between sessions first and only then between a session's threads,
and the supervisor and honcho start every process in a session of its own. A niced thread then
weighs only against its own session's threads; what yields to the other processes is the session's
group (`/proc/self/autogroup`). A group's niceness goes back to 0 without a privilege, a thread's
only with CAP_SYS_NICE or an RLIMIT_NICE that allows it (a standby's use of both:
pipelines/engine/standby.py `step_back`).
"""
from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)

AUTOGROUP = "/proc/self/autogroup"
AUTOGROUP_ENABLED = "/proc/sys/kernel/sched_autogroup_enabled"


def nice_of(autogroup: str) -> int | None:
    """A `/proc/<pid>/autogroup` text's niceness ("/autogroup-1677 nice 0"); None for the empty text
    the kernel gives a process in the default group (`group_nice`)."""
    fields = autogroup.split()
    return int(fields[-1]) if fields else None


def autogroups_enabled() -> bool:
    """Whether the kernel shares the CPU between sessions' groups first (off or absent: False)."""
    try:
        with open(AUTOGROUP_ENABLED) as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def group_nice(pid: int | str = "self") -> int | None:
    """The niceness of process `pid`'s scheduling group (its session's autogroup), or None when
    it has no group of its own: autogroups off or absent, or the process still in init's session
    (no `setsid` between it and PID 1, as in some containers), whose default group is the root's
    and for which the kernel prints an empty file."""
    if not autogroups_enabled():
        return None
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return nice_of(f.read())
    except (OSError, ValueError):
        return None


def own_group_nice() -> int | None:
    """The niceness of this process's scheduling group, or None when there is none to use (see
    `group_nice`) or the session is not this process's own (started from a shell: the group would
    be the shell's, an active job's too)."""
    if os.getsid(0) != os.getpid():
        return None
    return group_nice()


def set_group_nice(nice: int, tries: int = 20) -> bool:
    """Set this session's autogroup niceness; the kernel takes one change per 0.1 s from a process
    without CAP_SYS_ADMIN (EAGAIN), so a refused write is tried again. False when it cannot be."""
    for _ in range(tries):
        try:
            fd = os.open(AUTOGROUP, os.O_WRONLY)
            try:
                os.write(fd, str(nice).encode())
            finally:
                os.close(fd)
            return True
        except BlockingIOError:
            time.sleep(0.11)
        except OSError as exc:
            log.warning("could not set the session's scheduling group's niceness to %d: %s", nice, exc)
            return False
    return False


def threads(pid: int) -> list[int]:
    """The thread ids of process `pid` (none when it has ended)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []
