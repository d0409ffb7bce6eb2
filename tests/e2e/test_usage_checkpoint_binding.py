"""Exactly-once is bound to its checkpoint: a kept store with a deleted checkpoint is refused with
one sentence (never a silent skip or double count), and `--reset-sink` clears both together."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from controlplane.store import connect
from infra import kafka_client
from infra.config import ROOT


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_deleted_checkpoint_with_kept_store_is_refused_then_reset(kafka, topic, tmp_path):
    decisions = topic("decisions")
    p = kafka_client.producer(None, acks="all")
    for i in range(300):
        p.send(decisions, key=f"t-{i}".encode(),
               value=json.dumps({"txn_id": f"t-{i}", "card_id": "c", "event_time": 1_700_000_000_000 + i,
                                 "is_fraud": i % 10 == 0}).encode())
    p.flush()
    p.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOPIC_DECISIONS": decisions, "CARDSTREAM_DB": str(tmp_path / "s.db"),
           "CHECKPOINT_ROOT": str(tmp_path / "cp"), "TRIGGER_SECONDS": "0.5"}
    argv = [sys.executable, "-m", "pipelines.usage", "--guarantee", "exactly-once", "--no-windows"]
    db = connect(tmp_path / "s.db")

    def count():
        row = db.execute("SELECT processed FROM usage_counts WHERE guarantee = 'exactly-once'").fetchone()
        return row[0] if row else 0

    def checkpoints():
        return {r[0] for r in db.execute("SELECT DISTINCT checkpoint_id FROM sink_batches").fetchall()}

    def run_until_counted(*extra, not_under=frozenset()):
        proc = subprocess.Popen(argv + list(extra), env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: count() >= 300 and checkpoints() and not checkpoints() & not_under, 180,
                     "300 counted under a new checkpoint")
            time.sleep(2)  # a replay or a second pass would show up here
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=60)
        return out

    run_until_counted()
    assert count() == 300
    first = checkpoints()

    shutil.rmtree(tmp_path / "cp" / "usage-exactly-once")
    refused = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    said = refused.stdout + refused.stderr
    assert "make clean" in said and "--reset-sink" in said and "usage-exactly-once" in said
    assert count() == 300, "a refused start changes nothing"

    run_until_counted("--reset-sink", not_under=first)
    assert count() == 300, "reset clears the sink and its checkpoint together: counted once again"
