"""Process memory and bytes on disk (pipelines/supervisor/memory.py, housekeeping's sampling): the
/proc parsing on its texts, and the reading on this machine's real /proc and a real store."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from infra.config import ROOT, load
from pipelines.supervisor import housekeeping, memory

STATUS = "Name:\tjava\nState:\tS (sleeping)\nVmPeak:\t 5000000 kB\nVmRSS:\t  715044 kB\nRssAnon:\t 700000 kB\n"


def test_rss_from_the_status_text():
    assert memory.rss_kb(STATUS) == 715044
    assert memory.rss_kb("Name:\tkthreadd\nState:\tS (sleeping)\n") is None  # kernel threads have none


def test_stat_fields_survive_a_name_with_spaces_and_parentheses():
    p = memory.stat_fields(42, "42 (python -m (x)) S 7 42 42 0 -1 4194560 ...")
    assert (p.pid, p.ppid, p.comm, p.state) == (42, 7, "python -m (x)", "S")
    assert memory.stat_fields(1, "garbage") is None


def test_a_drivers_jvm_and_its_python_workers():
    P = memory.Proc
    table = {p.pid: p for p in (P(10, 1, "python", "S"), P(11, 10, "java", "S"), P(12, 11, "python", "S"),
                                P(13, 12, "python", "S"), P(14, 11, "bash", "Z"), P(20, 1, "python", "S"))}
    assert memory.jvm_of(table, 10).pid == 11 and memory.jvm_of(table, 20) is None
    assert [p.pid for p in memory.workers_of(table, 11)] == [12, 13]  # the daemon and what it forked; no zombie


def test_which_store_a_process_opens(tmp_path):
    assert memory.store_of({"CARDSTREAM_DB": "/x/y.db"}, tmp_path) == Path("/x/y.db")
    assert memory.store_of({"CARDSTREAM_RUN_DIR": "run"}, tmp_path) == tmp_path / "run" / "cardstream.db"
    assert memory.store_of({}, tmp_path) == ROOT / ".run" / "cardstream.db"
    assert memory.parse_environ(b"A=1\0B=x=y\0junk\0") == {"A": "1", "B": "x=y"}


def test_the_dashboard_is_known_by_its_command_line():
    assert memory.is_dashboard([".venv/bin/streamlit", "run", "dashboard/app.py", "--server.port", "8501"])
    assert memory.is_dashboard(["/usr/bin/python3", "/w/.venv/bin/streamlit", "run", "/w/dashboard/app.py"])
    assert not memory.is_dashboard(["python", "-m", "pipelines.supervisor"])
    assert not memory.is_dashboard(["vim", "dashboard/app.py"])


def test_sampling_real_processes(tmp_path):
    """This process and a real child, read from /proc; a process that is gone is left out."""
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(30 << 20); time.sleep(30)"])
    try:
        for _ in range(100):  # until the child has touched its 30 MB
            rss = memory.read_rss_mb(child.pid)
            if rss and rss > 30:
                break
            __import__("time").sleep(0.05)
        rows = housekeeping.process_rows({"me": (os.getpid(), False), "child": (child.pid, True),
                                          "gone": (2 ** 22 + 7, False)})
        names = {name: (pid, rss) for name, pid, rss in rows}
        assert set(names) == {"me", "child"}  # a Python child without a JVM: no -jvm row
        assert names["child"][0] == child.pid and names["child"][1] > 30
        assert 10 < names["me"][1] < 4096
    finally:
        child.kill()
        child.wait()


def test_bytes_on_disk(tmp_path, store):
    root = tmp_path / "checkpoints"
    (root / "fraud" / "state" / "0").mkdir(parents=True)
    (root / "fraud" / "state" / "0" / "1.zip").write_bytes(b"x" * 1000)
    (root / "usage-exactly-once").mkdir()
    (root / "usage-exactly-once" / "metadata").write_bytes(b"y" * 24)
    on_disk = sum(f.stat().st_blocks * 512 for f in root.rglob("*") if f.is_file())
    assert memory.dir_bytes(root) == on_disk >= 1024 and memory.dir_bytes(tmp_path / "none") is None
    with open(root / "fraud" / "sparse.index", "wb") as f:  # as Kafka preallocates its indexes
        f.truncate(10 << 20)
    assert memory.dir_bytes(root) - on_disk < 1 << 20
    db = tmp_path / "cardstream.db"
    assert memory.store_bytes(db) >= db.stat().st_size > 0  # with its WAL
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "CHECKPOINT_ROOT": str(root)})
    rows = {row[0]: row[2] for row in housekeeping.storage_rows(s)}
    assert rows["checkpoints"] == memory.dir_bytes(root) and rows["store"] > 0 and "kafka" not in rows  # no broker here


def test_a_pass_records_one_row_per_process_and_per_storage(tmp_path, store):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "STORE_RETENTION_HOURS": "24"})
    done = housekeeping.run_pass(store, s, {"supervisor": (os.getpid(), False)}, now=1_900_000_000_000)
    assert [r[0] for r in done["processes"]] == ["supervisor"]
    rows = list(store.query("SELECT * FROM process_memory"))
    assert len(rows) == 1 and rows[0]["process"] == "supervisor" and rows[0]["pid"] == os.getpid()
    assert {r["what"] for r in store.query("SELECT what FROM storage_bytes")} == {
        "store", "table:sink_batches", "table:card_profiles"}
    tables = {r["what"]: r for r in store.query("SELECT * FROM storage_bytes WHERE what LIKE 'table:%'")}
    assert tables["table:sink_batches"]["rows"] == 0 and tables["table:sink_batches"]["bytes"] >= 4096
    assert done["pruned"]["process_memory"] == 0
