"""Resident memory of processes and bytes on disk, read from /proc and the file system.

The parsing is pure (`rss_kb`, `stat_fields`, `jvm_of`, `workers_of`, `store_of`), the reading
(`process_table`, `read_rss_mb`, `dir_bytes`, ...) is kept apart, so the rules are unit-tested on
text and the I/O stays thin. No psutil: /proc/<pid>/status (VmRSS) and /proc/<pid>/stat are enough.

A PySpark driver is a Python process whose Spark JVM is a child process (`java`); the JVM in turn
forks Spark's Python workers (`python -m pyspark.daemon`, and the workers it forks). Each is
sampled apart: a leak in the driver, the JVM's heap or a Python worker shows in its own line.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from infra.config import ROOT

PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    state: str


# --- pure -----------------------------------------------------------------------------------------

def rss_kb(status_text: str) -> int | None:
    """VmRSS of a /proc/<pid>/status text, in kB (None: no such line, a kernel thread or a zombie)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            try:
                return int(parts[1])
            except (IndexError, ValueError):
                return None
    return None


def stat_fields(pid: int, stat_text: str) -> Proc | None:
    """pid, parent pid, command name and state from a /proc/<pid>/stat text (the name may hold
    spaces and parentheses: it is whatever lies between the first "(" and the last ")")."""
    try:
        head, tail = stat_text.rsplit(")", 1)
        comm = head.split("(", 1)[1]
        fields = tail.split()
        return Proc(pid, int(fields[1]), comm, fields[0])
    except (IndexError, ValueError):
        return None


def children_of(table: dict[int, Proc], pid: int) -> list[Proc]:
    return sorted((p for p in table.values() if p.ppid == pid and p.state != "Z"), key=lambda p: p.pid)


def descendants(table: dict[int, Proc], pid: int) -> list[Proc]:
    out, todo = [], [pid]
    while todo:
        kids = children_of(table, todo.pop())
        out.extend(kids)
        todo.extend(k.pid for k in kids)
    return out


def jvm_of(table: dict[int, Proc], pid: int) -> Proc | None:
    """The Spark JVM of a PySpark driver: its child process named `java` (None: not started yet)."""
    return next((p for p in children_of(table, pid) if p.comm == "java"), None)


def workers_of(table: dict[int, Proc], jvm_pid: int) -> list[Proc]:
    """Spark's Python workers under a JVM: every descendant process that is not itself a JVM."""
    return [p for p in descendants(table, jvm_pid) if p.comm != "java"]


def parse_environ(raw: bytes) -> dict[str, str]:
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def store_of(environ: dict[str, str], cwd: Path) -> Path:
    """The store a CardStream process with this environment opens, as `infra.config.load` names it
    (CARDSTREAM_DB, else CARDSTREAM_RUN_DIR/cardstream.db, else .run/ of the checkout; a relative
    path from the process's own working directory)."""
    def absolute(raw: str) -> Path:
        p = Path(raw)
        return p if p.is_absolute() else Path(cwd) / p

    if environ.get("CARDSTREAM_DB"):
        return absolute(environ["CARDSTREAM_DB"])
    run_dir = absolute(environ["CARDSTREAM_RUN_DIR"]) if environ.get("CARDSTREAM_RUN_DIR") else ROOT / ".run"
    return run_dir / "cardstream.db"


def is_dashboard(cmdline: list[str]) -> bool:
    """`streamlit run dashboard/app.py ...` (honcho's Procfile line, the tests' and the benches')."""
    return any(Path(a).name == "streamlit" or a == "streamlit" for a in cmdline[:3]) and \
        any(a.endswith("dashboard/app.py") for a in cmdline)


# --- reading ----------------------------------------------------------------------------------------

def process_table() -> dict[int, Proc]:
    """Every process now: pid -> (parent, name, state)."""
    out = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            proc = stat_fields(int(entry.name), (entry / "stat").read_text())
        except OSError:
            continue
        if proc is not None:
            out[proc.pid] = proc
    return out


def read_rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MB (MiB), None once it is gone."""
    try:
        kb = rss_kb((PROC / str(pid) / "status").read_text())
    except OSError:
        return None
    return None if kb is None else kb / 1024


def find_dashboards(store_path: Path, table: dict[int, Proc] | None = None) -> list[int]:
    """Pids of the Streamlit dashboards that read this store (found by their command line, and
    their environment naming the same store: a dashboard of another run is left out)."""
    found = []
    for pid in (table or process_table()):
        base = PROC / str(pid)
        try:
            cmdline = [a.decode(errors="replace") for a in (base / "cmdline").read_bytes().split(b"\0") if a]
            if not is_dashboard(cmdline):
                continue
            environ = parse_environ((base / "environ").read_bytes())
            cwd = Path(os.readlink(base / "cwd"))
        except OSError:
            continue
        if store_of(environ, cwd).resolve() == Path(store_path).resolve():
            found.append(pid)
    return sorted(found)


def spark_rows(name: str, pid: int, table: dict[int, Proc]) -> list[tuple[str, int, float]]:
    """(process, pid, rss MB) of a PySpark driver, its JVM (`NAME-jvm`) and the JVM's Python
    workers summed (`NAME-pyworkers`, pid of the eldest), whichever are alive."""
    out = []
    rss = read_rss_mb(pid)
    if rss is not None:
        out.append((name, pid, rss))
    jvm = jvm_of(table, pid)
    if jvm is not None:
        rss = read_rss_mb(jvm.pid)
        if rss is not None:
            out.append((f"{name}-jvm", jvm.pid, rss))
        workers = [(w.pid, read_rss_mb(w.pid)) for w in workers_of(table, jvm.pid)]
        workers = [(p, r) for p, r in workers if r is not None]
        if workers:
            out.append((f"{name}-pyworkers", workers[0][0], sum(r for _, r in workers)))
    return out


def dir_bytes(path: Path) -> int | None:
    """Bytes on disk of every file under `path`: the blocks allocated, not the apparent size
    (Kafka preallocates its 10 MB index files sparse). None: no such folder. Files that vanish
    while it walks (RocksDB compaction, Spark's log cleanup) are skipped."""
    path = Path(path)
    if not path.is_dir():
        return None
    total, todo = 0, [str(path)]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def store_bytes(store_path: Path) -> int | None:
    """The store's file with its write-ahead log and shared-memory index (None: no store)."""
    sizes = []
    for suffix in ("", "-wal", "-shm"):
        try:
            sizes.append(Path(f"{store_path}{suffix}").stat().st_size)
        except OSError:
            if not suffix:
                return None
    return sum(sizes)
