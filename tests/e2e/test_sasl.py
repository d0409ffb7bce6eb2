"""A real broker that takes only SASL_PLAINTEXT logins (mechanism PLAIN), and the one connection
config (`infra.kafka_client`) carrying the credentials to every client: the simulator, the audit,
the dashboard's Kafka reads, the usage job (Spark's Kafka source) and Spark's Kafka sink; and a
wrong password said in one sentence, at once, instead of a client retrying until it times out.

The broker has its own run folder and ports (29120-29121); clients get KAFKA_SECURITY_PROTOCOL,
KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD as any deployment would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from bench.harness.jobs import JobProcess, counts, decision, job_env, produce, wait_for
from controlplane.store import connect
from dashboard.data import kafka as dashboard_kafka
from infra import broker, kafka_client
from infra.config import ROOT, load
from infra.topics import ensure_topics
from pipelines.audit.topics import TopicIndex

PORT, CONTROLLER_PORT = 29120, 29121
SENT = 300
REFUSED = "refused the SASL login of user 'app'"


@pytest.fixture(scope="module")
def sasl(tmp_path_factory):
    """(settings, env) of clients logging in as `app` to a broker that takes SASL/PLAIN only."""
    env = {"CARDSTREAM_RUN_DIR": str(tmp_path_factory.mktemp("kafka-sasl")), "KAFKA_PORT": str(PORT),
           "KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT), "KAFKA_BROKER_SASL_USERS": "cardstream:broker-pw,app:app-pw",
           "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "KAFKA_SASL_MECHANISM": "PLAIN",
           "KAFKA_SASL_USERNAME": "app", "KAFKA_SASL_PASSWORD": "app-pw", "TOPIC_PARTITIONS": "2"}
    s = load(env)
    try:
        broker.up(s, quiet=True)
        yield s, env
    finally:
        broker.down(s, quiet=True)


@pytest.fixture(scope="module")
def sent(sasl):
    """The topic the real simulator filled with SENT transactions, logged in over SASL."""
    s, env = sasl
    tx = f"transactions-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run([sys.executable, "-m", "simulator", "--count", str(SENT), "--seed", "5", "--topic", tx,
                           "--labels-topic", f"labels-{uuid.uuid4().hex[:8]}", "--no-control", "--progress-seconds", "0"],
                          cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    totals = json.loads(proc.stdout.strip().splitlines()[-1])
    assert totals["sent"] == SENT and totals["failed"] == 0
    return tx


def wrong(env: dict):
    """The same settings with a wrong password."""
    return load({**env, "KAFKA_SASL_PASSWORD": "not-the-password"})


def test_the_broker_takes_sasl_plain_logins_only(sasl):
    s, _ = sasl
    assert kafka_client.sasl_plain("127.0.0.1", PORT, "app", "app-pw") == (0, "")
    code, message = kafka_client.sasl_plain("127.0.0.1", PORT, "app", "nope")
    assert code == 58 and "Authentication failed" in message  # SASL_AUTHENTICATION_FAILED
    assert kafka_client.login_error(s) is None
    props = (s.kafka_dir / "node-0" / "server.properties")
    assert "SASL_PLAINTEXT://127.0.0.1:29120" in props.read_text() and props.stat().st_mode & 0o077 == 0


def test_the_simulator_audit_and_dashboard_log_in(sasl, sent):
    s, _ = sasl
    index = TopicIndex(s, sent).read()
    assert index.records == SENT
    ends = dashboard_kafka.end_offsets(s, [sent])
    assert sum(ends[sent].values()) == SENT


def test_a_wrong_password_is_one_sentence_not_a_hang(sasl):
    s, env = sasl
    bad = wrong(env)
    started = time.monotonic()
    with pytest.raises(kafka_client.LoginRefused) as err:
        kafka_client.admin(bad)
    assert str(err.value) == (f"The Kafka broker at 127.0.0.1:{PORT} {REFUSED} (Authentication failed: Invalid "
                              f"username or password); check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD.")
    with pytest.raises(dashboard_kafka.BrokerDown, match=REFUSED):
        dashboard_kafka.end_offsets(bad, ["anything"])
    assert time.monotonic() - started < 5

    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "simulator", "--count", "10", "--no-control"], cwd=ROOT,
                          env={**os.environ, **env, "KAFKA_SASL_PASSWORD": "not-the-password", "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(f"simulator: The Kafka broker at 127.0.0.1:{PORT} {REFUSED}")
    assert took < 30, f"the simulator took {took:.0f} s to give up"


def test_the_usage_job_reads_its_decisions_over_sasl(sasl, tmp_path):
    s, env = sasl
    topic = f"decisions-{uuid.uuid4().hex[:8]}"
    ensure_topics([topic], s=s)
    job = JobProcess(job_env(tmp_path, topic, env))
    job.start(timeout=180)
    try:
        produce(s, topic, [decision(i, i % 4 == 0) for i in range(200)])
        db = connect(tmp_path / "cardstream.db")

        def counted():
            c = counts(db)
            return c if all(v["processed"] >= 200 for v in c.values()) else None

        got = wait_for(counted, 120, "the usage job to count 200 decisions read over SASL")
        assert all(v == {"processed": 200, "fraud": 50} for v in got.values()), got
        db.conn.close()
    finally:
        job.stop()


def test_spark_reads_and_writes_kafka_over_sasl(sasl, sent, spark):
    s, env = sasl
    opts = kafka_client.spark_options(s)
    assert opts["kafka.security.protocol"] == "SASL_PLAINTEXT" and opts["kafka.sasl.mechanism"] == "PLAIN"
    read = spark.read.format("kafka").options(**opts).option("subscribe", sent).load()
    rows = read.selectExpr("key", "value").collect()
    assert len(rows) == SENT
    copy = f"copied-{uuid.uuid4().hex[:8]}"
    ensure_topics([copy], s=s)
    (spark.createDataFrame(rows).write.format("kafka").options(**opts).option("topic", copy).save())
    assert sum(kafka_client.end_offsets(copy, s).values()) == SENT

    started = time.monotonic()
    with pytest.raises(Exception) as err:
        spark.read.format("kafka").options(**kafka_client.spark_options(wrong(env))).option("subscribe", sent).load().count()
    assert "Authentication failed" in str(err.value) or "SaslAuthentication" in str(err.value)
    print(f"\nSpark with a wrong password failed after {time.monotonic() - started:.1f} s")
    assert time.monotonic() - started < 120
