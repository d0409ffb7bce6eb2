"""A replayed history through the real fraud job, with the job killed after a batch's sink write
and before Spark's commit: the feature log and the decisions are the same as a run without the
crash — every transaction once, with the same features, score and verdict."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane import commands, store
from infra import kafka_client
from pipelines.fraud.features import BASELINE_FEATURES

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def read(topic: str) -> list[dict]:
    return [json.loads(m.value) for m in kafka_client.read_to_end(topic)]


def job(tmp_path: Path, topic, tx: str, labels: str, name: str):
    args = ["--transactions-topic", tx, "--labels-topic", labels, "--decisions-topic", topic(f"{name}-dec"),
            "--features-topic", topic(f"{name}-feat"), "--dlq-topic", topic(f"{name}-dlq"),
            "--markers-topic", topic(f"{name}-marks"), "--realtime-topic", topic(f"{name}-rt"),
            "--checkpoint", str(tmp_path / name / "checkpoint"), "--store", str(tmp_path / name / "store.db"),
            "--available-now", "--max-offsets-per-trigger", "6000", "--trigger-seconds", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LABEL_DELAY_DAYS": "1", "SPARK_UI": "0",
           "CARDSTREAM_DB": str(tmp_path / name / "store.db")}
    (tmp_path / name).mkdir()
    return args, env


def run(args, env, timeout=420) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.fraud", *args], cwd=ROOT, env=env, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_crash_mid_replay_gives_the_same_features_and_decisions(kafka, settings, topic, tmp_path):
    tx, labels = topic("hb-tx"), topic("hb-labels")
    replay = subprocess.run([sys.executable, "-m", "simulator", "replay", str(settings.handbook_data),
                             "--to", "2018-04-02", "--max", "--label-delay-days", "1", "--topic", tx,
                             "--labels-topic", labels, "--no-progress"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=180,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert replay.returncode == 0, replay.stderr[-2000:]
    sent = json.loads(replay.stdout.strip().splitlines()[-1])["sent"]
    assert sent > 18_000

    clean_args, clean_env = job(tmp_path, topic, tx, labels, "clean")
    done = run(clean_args, clean_env)
    assert done.returncode == 0, done.stdout[-3000:]

    args, env = job(tmp_path, topic, tx, labels, "crashed")
    db = store.connect(tmp_path / "crashed" / "store.db")
    command = commands.issue(db, "crash-after-sink", "fraud")
    crashed = run(args, env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout[-3000:]
    assert commands.get(db, command)["status"] == commands.DONE
    written = db.execute("SELECT count(*) FROM decisions").fetchone()[0]
    assert 0 < written < sent, "the kill landed after a batch's sink write, before the end"
    db.conn.close()
    resumed = run(args, env)
    assert resumed.returncode == 0, resumed.stdout[-3000:]

    want = {r["txn_id"]: r for r in read(topic_name(clean_args, "--features-topic"))}
    got = read(topic_name(args, "--features-topic"))
    assert len(want) == sent and len(got) == sent, "each transaction's features logged exactly once"
    assert {r["txn_id"] for r in got} == set(want)
    for r in got:
        w = want[r["txn_id"]]
        assert [r[k] for k in (*BASELINE_FEATURES, "score", "is_fraud")] == \
               [w[k] for k in (*BASELINE_FEATURES, "score", "is_fraud")], r["txn_id"]
    # the terminals learned from the labels after their delay: some risk is not zero
    assert sum(r["t_count_1d"] > 0 for r in got) > 1_000 and any(r["t_risk_1d"] > 0 for r in got)
    decisions = read(topic_name(args, "--decisions-topic"))
    assert sorted(d["txn_id"] for d in decisions) == sorted(want)


def topic_name(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]
