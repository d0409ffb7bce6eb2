"""The detached JVMs CardStream starts itself (Kafka brokers, the Spark master and workers): whether
one still runs, a signal to it, a stop that escalates, and the telling end of its log. One copy
for infra.broker, infra.cluster and infra.hdfs."""
from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def command_lines():
    """(pid, its command line's arguments as bytes) of every process this one can read: how our
    daemons are found (each names its run folder's files on its command line)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            yield int(proc.name), (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue


def send_signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop(pids: list[int], timeout: float) -> bool:
    """SIGTERM `pids` at once, then SIGKILL what is still alive after `timeout`; True when
    something had to be killed."""
    for pid in pids:
        send_signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if alive(pid)]
        time.sleep(0.2)
    for pid in pids:
        send_signal(pid, signal.SIGKILL)
    return bool(pids)


def tail(path: Path, lines: int = 3) -> str:
    """The last error lines of a log (or its last lines), in one line of at most 500 characters."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    interesting = [l for l in text if " ERROR " in l or "Exception" in l] or text
    return " | ".join(interesting[-lines:])[:500]


def free_ports(n: int) -> list[int]:
    """n ports on 127.0.0.1 free right now (the kernel's choice), for a scratch daemon."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()
