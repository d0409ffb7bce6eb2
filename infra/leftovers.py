"""Processes a run left behind: `python -m infra.leftovers --marker=DIR [--kill]`.

`make test` ends with it: a test run must leave nothing of its own behind (a Spark JVM, a
broker, a job, Streamlit, Chromium). A process belongs to the run when its command line names
the run's folder (the broker's config) or its environment has CARDSTREAM_RUN_DIR set to it or to
a folder inside it (every job, JVM, Streamlit and browser the tests start inherits it; make test's
second lane runs in one), so a demo running from the same checkout is left alone. With `--kill` it
stops them; it exits 1 whenever it found any, naming them.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from infra.config import ROOT

GRACE_S = 15.0


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def leftovers(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of live processes of the run folder `marker`, this process's line excluded."""
    env_mark = f"CARDSTREAM_RUN_DIR={marker}".encode()
    mine = _ancestors()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in mine:
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            env = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        # a folder inside the run's counts too (make test's second lane runs in <marker>/lane-1)
        if cmd and state != "Z" and (marker in cmd or any(e == env_mark or e.startswith(env_mark + b"/")
                                                          for e in env)):
            found.append((int(proc.name), cmd))
    return found


def main(argv: list[str]) -> int:
    marker = next((a.split("=", 1)[1] for a in argv if a.startswith("--marker=")), str(ROOT / ".run" / "test"))
    deadline = time.monotonic() + GRACE_S  # a JVM exits a moment after its driver
    while (found := leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not found:
        return 0
    for pid, cmd in found:
        print(f"left running: pid {pid}: {cmd[:200]}", file=sys.stderr)
    if "--kill" in argv:
        for pid, _ in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        print(f"stopped {len(found)} leftover process(es); the run that started them did not.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
