"""make demo's stack on real Kafka and Spark, shared by this module's tests in order: the supervisor
with both jobs (the fraud job's two paths), a warm standby each and the simulator (the Procfile's
command, on the test broker and fresh topics, at 40 transactions/s).

First, after its first minute (60 s after the stack's start, as a user with a browser open from
`make demo` on sees it; at its first decision if that comes later), every dashboard page in Chromium
with the page check of the seeded walk (no cut figure, no "nan" or "None", no count with ".0", no
empty chart without a sentence); its screenshots are the README's. Then a crash hands the fraud job to its
standby, a zombie (the active frozen, then woken) is fenced, and the decisions stay exactly once
(the standbys' sessions come up while the walk runs).
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from controlplane import commands
from controlplane.clock import now_ms
from controlplane.store import connect
from infra.config import ROOT, load
from pipelines import audit
from tests.harness.browser import PAGES, SHOTS, check_and_shoot, chromium, streamlit, wait_for_chart
from bench.harness.jobs import wait_for

# a net for a hung stack, not a speed goal: the first-minute walk took 540-664 s on a machine 2.4x slower
# than the one these tests were written on (its own waits name what did not come)
pytestmark = pytest.mark.timeout(1800)
FIRST_MINUTE_MS = 60_000
# what each page shows once make demo's stack has run its first minute, and whether it draws a chart
LIVE = {"": (["Tx in /s", "Decisions /s", "Latency p99", "of the Spark processes link theirs", "Consumer lag"],
             True),
        "guarantees": (["exactly-once", "What each guarantee did"], True),
        "faults": (["Inject crash", "Command log", "Recovery times"], False),
        "windows": (["Watermarks", "Late events", "Tumbling"], True),
        "checkpoints": (["Where each checkpoint stands", "Batch history", "Per query"], True),
        "fraud": (["Precision", "Two paths", "Recently flagged"], True),
        "controls": (["Set rate", "Pause"], False)}


def status(db, job):
    row = db.execute("SELECT status, detail, pid FROM job_status WHERE job = ?", [job]).fetchone()
    return row or (None, None, None)


@pytest.fixture(scope="module")
def demo(kafka, topic, tmp_path_factory):
    work = tmp_path_factory.mktemp("demo")
    names = {k: topic(k) for k in ("tx", "labels", "dec", "dlq", "marks", "rt")}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(work / "s.db"),
           "CHECKPOINT_ROOT": str(work / "cp"), "CARDSTREAM_RUN_DIR": os.environ["CARDSTREAM_RUN_DIR"],
           "TOPIC_TRANSACTIONS": names["tx"], "TOPIC_LABELS": names["labels"], "TOPIC_DECISIONS": names["dec"],
           "TOPIC_DLQ": names["dlq"], "TOPIC_MARKERS": names["marks"], "TOPIC_DECISIONS_RT": names["rt"],
           # SPARK_UI: make demo's default whatever the shell has, for the walk reads the UI links;
           # FRAUD_MODE: the Procfile's (both fraud paths)
           "RESTART_DELAY_SECONDS": "1", "TRIGGER_SECONDS": "0.5", "SPARK_UI": "1", "FRAUD_MODE": "realtime"}
    db = connect(work / "s.db")
    started_ms = now_ms()  # make demo's start: its first minute is counted from here
    with open(work / "supervisor.log", "ab") as out:
        # the Procfile's supervisor line (both jobs by default), the session's broker instead of its own
        sup = subprocess.Popen([sys.executable, "-m", "pipelines.supervisor", "--with-simulator", "--standby",
                                "--simulator-args", "--rate 40 --seed 11"],
                               env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield SimpleNamespace(env=env, db=db, names=names, work=work, sup=sup, started_ms=started_ms)
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(timeout=120)
        except subprocess.TimeoutExpired:
            sup.kill()
        db.conn.close()


# a net for a standby that never gets ready, not a speed goal: beside the cluster tier (HDFS, two jobs
# on a Spark cluster) in make test's other lane, this test took 298 s in all on 2026-12-08
STANDBY_NET_S = 480


def first_decision_after(db, since_ms: int) -> int | None:
    return db.execute("SELECT min(decided_at) FROM decisions WHERE decided_at > ?", [since_ms]).fetchone()[0]


def first_decided_at(db) -> int | None:
    return db.execute("SELECT min(decided_at) FROM decisions").fetchone()[0]


def test_every_page_after_the_first_minute_in_chromium(demo, tmp_path):
    db = demo.db
    with streamlit(demo.env, tmp_path / "streamlit.log") as base, chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(base)  # the server warms up while the first minute runs out
        first = wait_for(lambda: first_decided_at(db), 300, "the first decision")
        # reported, not held to a number (`python -m bench first-minute` measures it against the
        # 60 s goal of issue 36 item 8)
        print(f"make demo's first decision {(first - demo.started_ms) / 1000:.1f} s after its start")
        # ... which on two cores needs the standbys' JVMs to start after their jobs' first batch with
        # rows (or STANDBY_START_AFTER_TAKEOVER_MAX_SECONDS after the lease), not beside the primaries
        for job, queries in (("fraud", "fraud"), ("usage", "usage-%")):
            wait_for(lambda job=job: status(db, f"{job}-standby")[2], 300, f"the {job} standby's start")
            started = db.execute("SELECT started_at FROM job_status WHERE job = ?", [f"{job}-standby"]).fetchone()[0]
            batch = db.execute("SELECT min(ts) FROM batch_progress WHERE query LIKE ? AND num_input_rows > 0",
                               [queries]).fetchone()[0]
            lease = db.execute("SELECT taken_at FROM leases WHERE job = ?", [job]).fetchone()[0]
            cap_ms = int(load().standby_start_after_takeover_max_s * 1000)
            assert started >= min(batch or lease + cap_ms, lease + cap_ms) - 500, (job, started, batch, lease)
        time.sleep(max(0.0, (demo.started_ms + FIRST_MINUTE_MS - now_ms()) / 1000))
        # Still deciding at the minute's end (or now, if the waits above ran past it): a decision in
        # the last 10 s or the next within 20 s. The accurate path decides once a batch, and in the
        # first minute on two cores shared with the other lane its batches were measured 9-13 s
        # apart: a bare 10 s window failed CI twice on a live stack.
        end = now_ms()
        nearest = wait_for(lambda: first_decision_after(db, end - 10_000), 20,
                           "a decision from 10 s before the first minute's end (none: the stack stopped deciding)")
        print(f"the first decision in the first minute's last 10 s or after it: {(nearest - end) / 1000:+.1f} s from its end")
        for path, name in PAGES.items():
            texts, has_chart = LIVE[path]
            page.goto(f"{base}/{path}")
            for text in texts:
                page.get_by_text(text, exact=False).first.wait_for(state="attached", timeout=60_000)
            if has_chart:
                wait_for_chart(page, f"make demo's {name} page after its first minute",
                               tmp_path / f"nochart-{name}.png")
            check_and_shoot(page, f"make demo's {name} page after its first minute", SHOTS / f"{name}.png", tmp_path)


def test_crash_hands_over_to_the_standby_and_a_zombie_is_fenced(demo, settings):
    db, names = demo.db, demo.names
    wait_for(lambda: status(db, "fraud-standby")[0] == "ready", STANDBY_NET_S, "the fraud standby's session")
    first_active = status(db, "fraud")[2]
    crash = commands.issue(db, "crash", "fraud")
    wait_for(lambda: commands.get(db, crash)["status"] == "done", 30, "the crash")
    assert "standby" in commands.get(db, crash)["result"] and "takes over" in commands.get(db, crash)["result"]
    wait_for(lambda: "took over" in (status(db, "fraud")[1] or ""), 30, "the takeover")
    assert status(db, "fraud")[2] != first_active
    wait_for(lambda: db["recoveries"].count_where("job = 'fraud'"), 240, "a batch after the takeover")
    (rec,) = db["recoveries"].rows_where("job = 'fraud'")
    # where the takeover's seconds went: the promoted standby took the lease after the kill
    assert rec["via"] == "standby" and rec["to_lease_s"] is not None and rec["to_lease_s"] >= 0, rec
    assert abs(rec["to_lease_s"] + rec["to_batch_s"] + rec["batch_s"] - rec["seconds"]) < 0.01, rec

    wait_for(lambda: status(db, "fraud-standby")[0] == "ready", STANDBY_NET_S, "the next standby's session")
    # ... started only once the takeover's first batch had committed (not beside it on two cores)
    started = db.execute("SELECT started_at FROM job_status WHERE job = 'fraud-standby'").fetchone()[0]
    assert started >= rec["recovered_at"] - 500, (started, rec)
    zombie = commands.issue(db, "zombie", "fraud", seconds=3)
    wait_for(lambda: commands.get(db, zombie)["status"] in ("done", "failed"), 300, "the zombie's end")
    result = commands.get(db, zombie)["result"]
    assert "stale epoch" in result or "stopped by Spark" in result, result

    pause = commands.issue(db, "pause", "simulator")
    wait_for(lambda: commands.get(db, pause)["status"] == "done", 30, "the simulator to pause")
    s = dataclasses.replace(settings, store_path=demo.work / "s.db", checkpoint_root=demo.work / "cp",
                            topics=dataclasses.replace(settings.topics, transactions=names["tx"],
                                                       labels=names["labels"], decisions=names["dec"]))
    auditor = audit.Auditor(s, db)
    fraud = wait_for(lambda: (f := auditor.snapshot()["fraud"])["lag_records"] == 0 and f["truth"] and f, 240,
                     "the fraud job to catch up")
    assert (fraud["lost"], fraud["topic_lost"], fraud["duplicated"]) == (0, 0, 0), fraud
    assert fraud["observed"] == fraud["topic"] == fraud["truth"]
