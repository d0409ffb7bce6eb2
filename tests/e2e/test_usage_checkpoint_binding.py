"""Exactly-once is bound to its checkpoint: a kept store with a deleted checkpoint is refused with
one sentence (never a silent skip or double count), and `--reset-sink` clears both together; so is
a checkpoint restored from a backup, or with its newest offset and commit logs deleted, whose batch
ids come again over other Kafka ranges."""
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


def test_a_restored_or_truncated_checkpoint_reusing_batch_ids_is_refused(kafka, topic, tmp_path):
    """Batch ids name Kafka ranges only within one history of a checkpoint. A checkpoint restored
    from a backup, or with its newest offset and commit logs deleted, plans those ids again over
    other ranges; the store applied them already, so a skip would lose the new records silently
    (the count stays put while the topic grows). The job refuses at that batch, exit 2, in one
    sentence, and writes nothing."""
    decisions = topic("decisions")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOPIC_DECISIONS": decisions, "CARDSTREAM_DB": str(tmp_path / "s.db"),
           "CHECKPOINT_ROOT": str(tmp_path / "cp"), "TRIGGER_SECONDS": "0.5"}
    argv = [sys.executable, "-m", "pipelines.usage", "--guarantee", "exactly-once", "--no-windows"]
    db = connect(tmp_path / "s.db")
    checkpoint = tmp_path / "cp" / "usage-exactly-once"
    sent = 0

    def produce(n):
        nonlocal sent
        p = kafka_client.producer(None, acks="all")
        for i in range(sent, sent + n):
            p.send(decisions, key=f"t-{i}".encode(),
                   value=json.dumps({"txn_id": f"t-{i}", "card_id": "c", "event_time": int(time.time() * 1000),
                                     "is_fraud": False}).encode())
        p.flush()
        p.close()
        sent += n

    def count():
        row = db.execute("SELECT processed FROM usage_counts WHERE guarantee = 'exactly-once'").fetchone()
        return row[0] if row else 0

    def run_until_counted():
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: count() >= sent or proc.poll() is not None, 180, f"{sent} counted")
            assert proc.poll() is None, proc.communicate()[0][-2000:]
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
        assert count() == sent

    def refused(why):
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            # before: the batch was skipped as a replay, the count stayed put and the job ran on
            wait_for(lambda: proc.poll() is not None, 180, f"the job to refuse the {why} checkpoint")
        finally:
            if proc.poll() is None:
                proc.kill()
            out = proc.communicate(timeout=60)[0]
        assert proc.returncode == 2, out[-3000:]
        [said] = [line for line in out.splitlines() if "no longer name what the store holds" in line]
        assert "usage-exactly-once: batch" in said and "--reset-sink" in said, said
        assert count() == applied, "a refused batch writes nothing"
        return said

    produce(300)
    run_until_counted()
    backup = tmp_path / "backup"
    shutil.copytree(checkpoint, backup)
    produce(200)
    run_until_counted()
    applied = count()

    # the newest batch's offset and commit logs deleted: its id is planned again over more input
    newest = max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    for log in ("offsets", "commits"):
        for f in (checkpoint / log).glob(f"*{newest}*"):
            if f.name.lstrip(".").split(".")[0] == str(newest):
                f.unlink()
    produce(50)
    said = refused("truncated")
    assert f"batch {newest} of checkpoint" in said

    # a backup of the checkpoint from before the last 200: its next batch id is one the store applied
    shutil.rmtree(checkpoint)
    shutil.copytree(backup, checkpoint)
    refused("restored")
