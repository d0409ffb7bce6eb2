"""A standby runs nicer until it takes over (pipelines/engine/standby.py `step_back`, `come_forward`):
a real process, its thread and its child, niced at the start and back at the promotion."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from infra.priority import autogroups_enabled, group_nice, nice_of, threads
from pipelines.engine.standby import may_come_back

ROOT = Path(__file__).resolve().parents[2]

STANDBY = textwrap.dedent("""
    import os, subprocess, sys, threading, time
    from pipelines.engine import standby
    standby.listen(5)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    print(child.pid, flush=True)
    standby.PROMOTED.wait(30)
    print("promoted", flush=True)
    time.sleep(60)
""")


def niceness(pids: list[int]) -> list[int]:
    """The niceness of every thread of `pids`."""
    return [os.getpriority(os.PRIO_PROCESS, tid) for pid in pids for tid in threads(pid)]


def test_a_standby_is_nicer_until_it_is_promoted_then_every_thread_comes_back():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    allowed = may_come_back(5)
    proc = subprocess.Popen([sys.executable, "-c", STANDBY], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = None
    try:
        child = int(proc.stdout.readline())
        pids = [proc.pid, child]
        time.sleep(0.2)  # the thread started
        before = niceness(pids)
        assert len(before) >= 3  # the main thread, the sleeping thread, the child
        assert set(before) == ({min(19, base + 5)} if allowed else {base}), (before, base, allowed)
        os.kill(proc.pid, signal.SIGUSR1)
        assert proc.stdout.readline().strip() == "promoted"
        assert set(niceness(pids)) == {base}
    finally:
        proc.kill()
        proc.wait()
        if child is not None:  # its child outlives it otherwise (make test's leftover check names it)
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if not allowed:
        print(f"LOUD: this user may not raise a priority again: the standby here runs at {base}, as it should, "
              "and the niced path was not exercised", file=sys.stderr)


def test_an_autogroup_file_reads_as_its_niceness_and_an_empty_one_as_no_group():
    """The CI machine's test process sits in init's session, whose default group the kernel prints
    as nothing (PID 1's file is empty too): that is no group, not an error (a red run, 2026-11-30)."""
    assert nice_of("/autogroup-1677 nice 0\n") == 0
    assert nice_of("/autogroup-9 nice 5") == 5
    assert nice_of("/autogroup-9 nice -3\n") == -3
    assert nice_of("") is None
    assert nice_of("\n") is None


def test_a_standby_in_a_session_of_its_own_nices_its_scheduling_group_until_it_is_promoted():
    """As the supervisor starts it (a session of its own): with autogroups on, a thread's niceness
    weighs only within its session, so the standby's group is what must step back, and come back."""
    mine = group_nice("self")  # None too when this test runs in init's session (the CI machine's)
    proc = subprocess.Popen([sys.executable, "-c", STANDBY], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    child = None
    try:
        child = int(proc.stdout.readline())
        standing_by = group_nice(proc.pid)
        assert group_nice(child) == standing_by  # its child is in the same group
        if autogroups_enabled():
            # a new session always gets a group of its own, at niceness 0: the standby took it to 5
            assert standing_by == 5
        else:
            print("LOUD: this kernel does not schedule by autogroup (off or absent): the group's niceness "
                  "is not used here and this test checks only that nothing else was touched", file=sys.stderr)
            assert standing_by is None
        assert group_nice("self") == mine  # the test's own session is not touched
        os.kill(proc.pid, signal.SIGUSR1)
        assert proc.stdout.readline().strip() == "promoted"
        assert group_nice(proc.pid) == (None if standing_by is None else 0)
    finally:
        proc.kill()
        proc.wait()
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_standby_started_from_a_shell_leaves_the_shells_scheduling_group_alone():
    """Not its session's leader (run from a terminal, beside an active job of the same session):
    niceing the group would nice the active too, so only its threads step back."""
    mine = group_nice("self")
    out = subprocess.run([sys.executable, "-c", "from pipelines.engine import standby\n"
                          "print(standby.own_group_nice(), standby.step_back(5))"],
                         capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         timeout=60)
    assert out.returncode == 0, out.stderr
    group, taken = out.stdout.split()
    assert group == "None"
    assert int(taken) == (5 if may_come_back(5) else 0)
    assert group_nice("self") == mine


WORKER_PARENT = textwrap.dedent("""
    import subprocess, sys
    from pipelines.engine import standby
    standby.listen(10)
    worker = subprocess.Popen([sys.executable, "-c", "import sys\\nfrom pipelines.engine.niced_daemon import settle\\n"
                               "for _ in sys.stdin: print(settle(10), flush=True)"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for _ in range(2):
        worker.stdin.write("task\\n"); worker.stdin.flush()
        print(worker.stdout.readline().strip(), flush=True)
        standby.come_forward()
    worker.stdin.close(); worker.wait()
""")


def test_a_python_worker_comes_back_to_its_own_niceness_over_its_daemons_after_a_takeover():
    """A standby's daemon niced by 10 and a worker by 10 more: clamped at 19, the takeover's step
    forward alone left the worker at 9; its next task settles it at the daemon's 0 + 10."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    allowed = may_come_back(10)
    out = subprocess.run([sys.executable, "-c", WORKER_PARENT], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 0, out.stderr
    standing_by, after = (int(x) for x in out.stdout.split())
    daemon = min(19, base + 10) if allowed else base
    assert standing_by == min(19, daemon + 10)
    assert after == min(19, base + 10)
