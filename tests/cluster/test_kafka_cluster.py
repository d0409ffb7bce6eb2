"""Three real Kafka brokers on loopback (`infra.broker` with KAFKA_BROKERS=3): topics replicated
three times with min.insync.replicas 2, and one broker of three stopped and started again while
the real simulator sends, without a transaction lost, repeated or held up for long.

The cluster has its own run folder and ports (KAFKA_PORT + 18 to + 23: 19110-19115 by default), so
no other broker is touched, and a session moved to other ports moves them too.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

import pytest
from kafka.admin import ConfigResource, ConfigResourceType

from infra import broker, kafka_client
from infra.config import ROOT, load
from infra.topics import TopicError, ensure_topics

PORT = load().kafka_port + 18  # the session's broker's ports + 18: its own, beside the lanes'
CONTROLLER_PORT = PORT + 1
RATE, COUNT = 100, 4000  # 40 s of traffic


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(settings, env) of a running cluster of three; every broker stopped at the end."""
    env = {"CARDSTREAM_RUN_DIR": str(tmp_path_factory.mktemp("kafka-cluster")), "CLUSTER": "1",
           "KAFKA_PORT": str(PORT), "KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT), "TOPIC_PARTITIONS": "4",
           "SPARK_MASTER": "local[2]"}
    s = load(env)
    assert s.kafka_brokers == 3 and s.topic_replication == 3 and s.topic_min_insync == 2
    started = time.monotonic()
    try:
        broker.up(s, quiet=True)
        print(f"\n3 brokers up in {time.monotonic() - started:.1f} s; RSS "
              + ", ".join(f"{_rss_mb(pid)} MB" for pid in broker.broker_pids(s)))
        yield s, env
    finally:
        broker.down(s, quiet=True)
    assert not broker.broker_pids(s)


def _rss_mb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return 0


def _describe(s, topic: str) -> list[dict]:
    admin = kafka_client.admin(s)
    try:
        return admin.describe_topics([topic])[0]["partitions"]
    finally:
        admin.close()


def _settled(s, topic: str, timeout_s: float = 30.0) -> list[dict]:
    """The partitions of a topic just created, once each has a leader and its replicas in sync
    (the controller elects them a moment after the create call returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        parts = _describe(s, topic)
        if parts and all(p["leader_id"] >= 0 and len(p["isr_nodes"]) == len(p["replica_nodes"]) for p in parts):
            return parts
        if time.monotonic() >= deadline:
            return parts
        time.sleep(0.3)


def _topic_config(s, topic: str, key: str, timeout_s: float = 15.0) -> str | None:
    """A topic's config value as a broker describes it; asked again while the broker asked does not
    know the topic yet (each broker applies the cluster's metadata on its own: a topic just created
    can be described by one and be unknown to another, an answer without its configs)."""
    deadline = time.monotonic() + timeout_s
    admin = kafka_client.admin(s)
    try:
        while True:
            answer = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, [key])])
            found = answer.get("topic", {}).get(topic, {}).get(key)
            if found is not None or time.monotonic() >= deadline:
                return None if found is None else found["value"]
            time.sleep(0.3)
    finally:
        admin.close()


def test_topics_have_three_replicas_and_need_two_in_sync(cluster):
    s, _ = cluster
    name = f"replicated-{uuid.uuid4().hex[:8]}"
    assert ensure_topics([name], s=s) == [name]
    parts = _settled(s, name)
    assert len(parts) == 4
    assert all(sorted(p["replica_nodes"]) == [1, 2, 3] and sorted(p["isr_nodes"]) == [1, 2, 3] for p in parts)
    assert len({p["leader_id"] for p in parts}) > 1  # leadership is spread over the brokers
    assert _topic_config(s, name, "min.insync.replicas") == "2"

    too_many = load({**cluster[1], "TOPIC_REPLICATION": "4"})
    started = time.monotonic()
    with pytest.raises(TopicError) as err:
        ensure_topics([f"four-{uuid.uuid4().hex[:8]}"], s=too_many)
    assert time.monotonic() - started < 10
    assert "Topics need 4 replicas (TOPIC_REPLICATION)" in err.value.code and "has 3 broker(s) answering" in err.value.code


def test_one_broker_of_three_stops_and_starts_while_the_simulator_sends_and_nothing_is_lost(cluster):
    s, env = cluster
    tx, labels = f"transactions-{uuid.uuid4().hex[:8]}", f"labels-{uuid.uuid4().hex[:8]}"
    ensure_topics([tx, labels], s=s)
    leader = next(p["leader_id"] for p in _settled(s, tx) if p["partition_index"] == 0)
    node = leader - 1  # the broker leading partition 0 stops: its writes must move, not wait
    sim = subprocess.Popen(
        [sys.executable, "-m", "simulator", "--rate", str(RATE), "--count", str(COUNT), "--seed", "18",
         "--topic", tx, "--labels-topic", labels, "--no-control", "--progress-seconds", "5"],
        cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(8)
        assert sim.poll() is None, sim.communicate()[1][-2000:]
        stopped_at = time.time()
        broker.down(s, quiet=True, node=node)
        stop_s = time.time() - stopped_at
        assert not broker.broker_pids(s, node) and len(broker.broker_pids(s)) == 2
        assert kafka_client.answers(s)  # the cluster still answers, whichever node is down
        time.sleep(10)
        restarted = time.monotonic()
        broker.up(s, quiet=True, node=node)
        start_s = time.monotonic() - restarted
        out, err = sim.communicate(timeout=COUNT / RATE + 60)
    finally:
        if sim.poll() is None:
            sim.kill()
            sim.wait()
    assert sim.returncode == 0, err[-2000:]
    totals = json.loads(out.strip().splitlines()[-1])
    assert totals["sent"] == COUNT and totals["failed"] == 0 and totals["unacknowledged"] == 0, totals

    records = kafka_client.read_to_end(tx, s, timeout_s=30, isolation_level="read_uncommitted")
    ids = [json.loads(r.value)["txn_id"] for r in records]
    assert len(ids) == COUNT, f"read back {len(ids)} of {COUNT} acknowledged transactions"
    assert len(set(ids)) == COUNT, f"{COUNT - len(set(ids))} transactions were written twice"

    # the longest pause between two appends to one partition (the broker's clock: LogAppendTime)
    by_part: dict[int, list[int]] = {}
    for r in records:
        by_part.setdefault(r.partition, []).append(r.timestamp)
    pause_ms = max(max(b - a for a, b in zip(ts, ts[1:])) for ts in (sorted(v) for v in by_part.values()))
    print(f"\nnode {node} (leader of partition 0) stopped in {stop_s:.1f} s, down 10 s, back in {start_s:.1f} s; "
          f"{COUNT} sent at {totals['achieved_rate']} tx/s, {len(ids)} read back, 0 lost, 0 twice; "
          f"longest pause between appends to one partition {pause_ms / 1000:.2f} s")
    assert pause_ms < 15_000  # loose: the figure is reported, not held to a number

    # the restarted broker catches up and is back in every partition's in-sync replicas
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(len(p["isr_nodes"]) == 3 for p in _describe(s, tx)):
            break
        time.sleep(0.5)
    assert all(len(p["isr_nodes"]) == 3 for p in _describe(s, tx))


def test_the_broker_down_fault_stops_one_named_node_and_kafka_keeps_answering(cluster, tmp_path):
    """The supervisor's executor (the one that claims `broker-down`) on a store of its own."""
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from controlplane import commands
    from controlplane.store import connect
    from pipelines.supervisor.faults import FaultExecutor

    s, _ = cluster
    db = connect(tmp_path / "cardstream.db")
    executor = FaultExecutor(SimpleNamespace(db=db, s=s))
    cid = commands.issue(db, "broker-down", seconds=3, node=2)
    executor.take_commands()
    assert commands.get(db, cid)["status"] == "started"
    answered, down_seen = True, False
    while executor._broker_fault.is_alive():
        answered &= kafka_client.answers(s)  # what the supervisor and the dashboard ask: never "down"
        down_seen |= not broker.broker_pids(s, 2)
        time.sleep(0.2)
    row = commands.get(db, cid)
    assert row["status"] == "done", row
    assert row["result"].startswith(f"broker node 2 (127.0.0.1:{PORT + 4}) stopped (")
    assert row["result"].endswith("down for 3 s, answering again")
    assert down_seen and answered and len(broker.broker_pids(s)) == 3

    bad = commands.issue(db, "broker-down", seconds=1, node=3)
    executor.take_commands()
    assert commands.get(db, bad)["result"] == "failed: there is no broker node 3: the cluster has 3 (nodes 0–2)"
    db.conn.close()
