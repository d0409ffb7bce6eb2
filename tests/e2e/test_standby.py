"""A warm standby per job on real Kafka and Spark: a crash hands the fraud job to its standby, a
zombie (the active frozen, then woken) is fenced, and the decisions stay exactly once."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys

import pytest

from controlplane import commands
from controlplane.store import connect
from infra.config import ROOT
from pipelines import audit
from tests.harness.jobs import wait_for

pytestmark = pytest.mark.timeout(900)


def status(db, job):
    row = db.execute("SELECT status, detail, pid FROM job_status WHERE job = ?", [job]).fetchone()
    return row or (None, None, None)


def test_crash_hands_over_to_the_standby_and_a_zombie_is_fenced(kafka, settings, topic, tmp_path):
    names = {k: topic(k) for k in ("tx", "labels", "dec", "dlq", "marks", "rt")}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(tmp_path / "s.db"),
           "CHECKPOINT_ROOT": str(tmp_path / "cp"), "CARDSTREAM_RUN_DIR": os.environ["CARDSTREAM_RUN_DIR"],
           "TOPIC_TRANSACTIONS": names["tx"], "TOPIC_LABELS": names["labels"], "TOPIC_DECISIONS": names["dec"],
           "TOPIC_DLQ": names["dlq"], "TOPIC_MARKERS": names["marks"], "TOPIC_DECISIONS_RT": names["rt"],
           "RESTART_DELAY_SECONDS": "1", "AUDIT_INTERVAL_SECONDS": "3600", "TRIGGER_SECONDS": "0.5"}
    db = connect(tmp_path / "s.db")
    with open(tmp_path / "supervisor.log", "ab") as out:
        sup = subprocess.Popen([sys.executable, "-m", "pipelines.supervisor", "--jobs", "fraud", "--standby",
                                "--with-simulator", "--simulator-args", "--rate 40 --seed 11"],
                               env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: status(db, "fraud-standby")[0] == "ready", 300, "the fraud standby's session")
        first_active = status(db, "fraud")[2]
        crash = commands.issue(db, "crash", "fraud")
        wait_for(lambda: commands.get(db, crash)["status"] == "done", 30, "the crash")
        assert "standby" in commands.get(db, crash)["result"] and "takes over" in commands.get(db, crash)["result"]
        wait_for(lambda: "took over" in (status(db, "fraud")[1] or ""), 30, "the takeover")
        assert status(db, "fraud")[2] != first_active
        wait_for(lambda: db["recoveries"].count_where("job = 'fraud'"), 240, "a batch after the takeover")

        wait_for(lambda: status(db, "fraud-standby")[0] == "ready", 300, "the next standby's session")
        zombie = commands.issue(db, "zombie", "fraud", seconds=3)
        wait_for(lambda: commands.get(db, zombie)["status"] in ("done", "failed"), 300, "the zombie's end")
        result = commands.get(db, zombie)["result"]
        assert "stale epoch" in result or "stopped by Spark" in result, result

        pause = commands.issue(db, "pause", "simulator")
        wait_for(lambda: commands.get(db, pause)["status"] == "done", 30, "the simulator to pause")
        s = dataclasses.replace(settings, store_path=tmp_path / "s.db", checkpoint_root=tmp_path / "cp",
                                topics=dataclasses.replace(settings.topics, transactions=names["tx"],
                                                           labels=names["labels"], decisions=names["dec"]))
        auditor = audit.Auditor(s, db)
        fraud = wait_for(lambda: (f := auditor.snapshot()["fraud"])["lag_records"] == 0 and f["truth"] and f, 240,
                         "the fraud job to catch up")
        assert (fraud["lost"], fraud["topic_lost"], fraud["duplicated"]) == (0, 0, 0), fraud
        assert fraud["observed"] == fraud["topic"] == fraud["truth"]
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(timeout=120)
        except subprocess.TimeoutExpired:
            sup.kill()
