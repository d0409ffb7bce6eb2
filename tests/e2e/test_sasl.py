"""A real broker whose only client listener is SASL_SSL: SASL/PLAIN logins over TLS, its keystore
made with the JDK's keytool in the test, and the one connection config (`infra.kafka_client`)
carrying the credentials and the CA file to every client: the simulator, the fraud job, the usage
job, the auditor, the dashboard's Kafka reads and badge probe, the supervisor's readiness probe,
and Spark's Kafka source and sink; and a wrong password said in one sentence, at once, instead of
a client retrying until it times out. One broker tests both SASL and SSL (issue 36 item 12).

The broker has its own run folder and ports (29120-29121), so its topics, store and checkpoints
are this module's alone under their default names; clients get KAFKA_SECURITY_PROTOCOL=SASL_SSL,
KAFKA_SASL_* and KAFKA_SSL_CAFILE as any deployment would.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.harness.jobs import JobProcess, counts, job_env, wait_for
from controlplane.store import connect
from dashboard.data import kafka as dashboard_kafka
from infra import broker, kafka_client
from infra.config import ROOT, load
from infra.topics import ensure_topics
from pipelines.audit import snapshot
from pipelines.audit.topics import TopicIndex

PORT, CONTROLLER_PORT = 29120, 29121
SENT = 300
REFUSED = "refused the SASL login of user 'app'"


def keytool() -> str:
    """The JDK's keytool beside the `java` on the PATH (a test needing it fails loudly without it)."""
    java = shutil.which("java")
    assert java, "these tests need a JDK (`java` and `keytool`) on the PATH"
    tool = shutil.which("keytool") or str(Path(java).resolve().parent / "keytool")
    assert Path(tool).exists(), f"no keytool beside {java}: install a full JDK"
    return tool


def make_keystore(folder: Path) -> tuple[Path, Path]:
    """(PKCS12 keystore, its certificate as PEM) of a self-signed key for 127.0.0.1: the broker's
    identity, and the CA file every client (kafka-python and Spark's Java client) trusts. An EC key,
    and keytool's JVM on C1: 1.2 s for both commands where RSA 2048 took 2.5 s."""
    keystore, ca = folder / "broker.p12", folder / "ca.pem"
    common = ["-keystore", str(keystore), "-storepass", "ks-secret", "-alias", "broker",
              "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC"]
    for args in (["-genkeypair", "-storetype", "PKCS12", "-keyalg", "EC", "-groupname", "secp256r1",
                  "-validity", "2", "-dname", "CN=127.0.0.1", "-ext", "SAN=ip:127.0.0.1,dns:localhost"],
                 ["-exportcert", "-rfc", "-file", str(ca)]):
        proc = subprocess.run([keytool(), *args, *common], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr or proc.stdout
    return keystore, ca


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """(settings, env) of clients logging in as `app` over TLS to a broker that takes SASL_SSL only."""
    run_dir = tmp_path_factory.mktemp("kafka-sasl-ssl")
    keystore, ca = make_keystore(run_dir)
    env = {"CARDSTREAM_RUN_DIR": str(run_dir), "KAFKA_PORT": str(PORT), "KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT),
           "KAFKA_BROKER_SASL_USERS": "cardstream:broker-pw,app:app-pw", "KAFKA_BROKER_SSL_KEYSTORE": str(keystore),
           "KAFKA_BROKER_SSL_KEYSTORE_PASSWORD": "ks-secret", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "KAFKA_SSL_CAFILE": str(ca), "KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "app",
           "KAFKA_SASL_PASSWORD": "app-pw", "TOPIC_PARTITIONS": "2"}
    s = load(env)
    try:
        broker.up(s, quiet=True)
        yield s, env
    finally:
        broker.down(s, quiet=True)


class Jobs:
    """The fraud job (`--available-now`: it decides what `transactions` holds, then exits) and the
    usage job (counting the fraud job's decisions as they come), started together in the
    background, so their JVMs start while the module's other tests run."""

    def __init__(self, s, env: dict):
        env = job_env(s.run_dir, s.topics.decisions, env)
        self.usage = JobProcess(env)
        self.usage_started = ThreadPoolExecutor(1).submit(self.usage.start, 180)
        self.fraud_log = s.run_dir / "fraud.log"  # a file: a pipe nobody reads yet would fill and block it
        with open(self.fraud_log, "wb") as log:
            self.fraud = subprocess.Popen([sys.executable, "-m", "pipelines.fraud", "--available-now",
                                           "--trigger-seconds", "0.5"], cwd=ROOT, env=env,
                                          stdout=log, stderr=subprocess.STDOUT)

    def fraud_output(self) -> str:
        return self.fraud_log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.fraud.poll() is None:
            self.fraud.kill()
            self.fraud.wait(30)
        with contextlib.suppress(Exception):
            self.usage_started.result(timeout=200)
        self.usage.stop()


@pytest.fixture(scope="module")
def sent(secured):
    """The `transactions` topic the real simulator filled with SENT transactions, over SASL_SSL,
    and both jobs started on it in the background (`Jobs`)."""
    s, env = secured
    proc = subprocess.run([sys.executable, "-m", "simulator", "--count", str(SENT), "--seed", "5", "--no-control",
                           "--progress-seconds", "0"],
                          cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    totals = json.loads(proc.stdout.strip().splitlines()[-1])
    assert totals["sent"] == SENT and totals["failed"] == 0
    jobs = Jobs(s, env)
    try:
        yield s.topics.transactions, jobs
    finally:
        jobs.stop()


def wrong(env: dict, **changes):
    """The same settings with a wrong password (or other changes)."""
    return load({**env, "KAFKA_SASL_PASSWORD": "not-the-password", **changes})


def test_the_broker_takes_sasl_logins_over_tls_only_and_the_probes_speak_it(secured):
    s, env = secured
    props = (s.kafka_dir / "node-0" / "server.properties")
    assert "SASL_SSL://127.0.0.1:29120" in props.read_text() and props.stat().st_mode & 0o077 == 0
    # the probe of before: a plaintext ApiVersions request gets no answer from a TLS listener
    assert kafka_client.api_versions("127.0.0.1", PORT, timeout=2.0) is None
    # what the supervisor asks before every job start, and the dashboard's badge: over TLS, it answers
    assert kafka_client.answers(s)
    found = dashboard_kafka.probe(s)
    assert found.up, found.says()
    tls = kafka_client.tls_context(s)
    assert kafka_client.api_versions("127.0.0.1", PORT, tls=tls) > 40
    assert kafka_client.sasl_plain("127.0.0.1", PORT, "app", "app-pw", tls=tls) == (0, "")
    code, message = kafka_client.sasl_plain("127.0.0.1", PORT, "app", "nope", tls=tls)
    assert code == 58 and "Authentication failed" in message  # SASL_AUTHENTICATION_FAILED
    assert kafka_client.login_error(s) is None

    # a client that does not trust the broker's certificate (the system's CAs only) is told why
    untrusting = load({k: v for k, v in env.items() if k != "KAFKA_SSL_CAFILE"})
    assert not kafka_client.answers(untrusting)
    found = dashboard_kafka.probe(untrusting, timeout_s=2.0, tries=1)
    assert found.state == dashboard_kafka.TLS_FAILED and not found.up
    assert "its certificate is not trusted (self" in found.says()  # OpenSSL: "self-signed certificate"
    assert "check KAFKA_SSL_CAFILE" in found.says()
    # and one expecting plaintext where TLS is spoken gets no ApiVersions answer either: not "up"
    assert not dashboard_kafka.probe(load({**env, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}),
                                     timeout_s=1.0, tries=1).up


def test_the_simulator_audit_and_dashboard_log_in(secured, sent):
    s, _ = secured
    sent, _ = sent
    index = TopicIndex(s, sent).read()
    assert index.records == SENT
    ends = dashboard_kafka.end_offsets(s, [sent])
    assert sum(ends[sent].values()) == SENT


def test_a_wrong_password_is_one_sentence_not_a_hang(secured):
    s, env = secured
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


def test_spark_reads_and_writes_kafka_over_sasl_ssl(secured, sent, spark):
    s, env = secured
    sent, _ = sent
    opts = kafka_client.spark_options(s)
    assert opts["kafka.security.protocol"] == "SASL_SSL" and opts["kafka.sasl.mechanism"] == "PLAIN"
    assert opts["kafka.ssl.truststore.type"] == "PEM"  # the CA file kafka-python trusts, read by Java too
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


def test_both_jobs_decide_and_count_over_sasl_ssl_and_the_auditor_agrees(secured, sent):
    """The fraud job decides the simulator's transactions (Spark's Kafka source; its decisions in a
    Kafka transaction), the usage job counts those decisions as they come, and the consistent-cut
    audit finds nothing lost or twice in either, all over SASL_SSL. Last in the module: the jobs
    started with `sent`."""
    s, _ = secured
    _, jobs = sent
    jobs.usage_started.result(timeout=200)
    assert jobs.fraud.wait(240) == 0, jobs.fraud_output()
    db = connect(s.store_path)
    try:
        decided, flagged = db.execute("SELECT count(*), coalesce(sum(is_fraud), 0) FROM decisions").fetchone()
        assert decided > SENT * 0.8, (decided, jobs.fraud_output())  # the rest: the simulator's malformed inputs

        def counted():
            c = counts(db)
            return c if c["exactly-once"]["processed"] >= decided else None

        got = wait_for(counted, 120, f"the usage job to count the fraud job's {decided} decisions")
        assert got["exactly-once"] == {"processed": decided, "fraud": flagged}, got

        def audited():  # the cut moves once Spark has logged the batch's commit, just after its sink
            cut = snapshot(s, db)
            return cut if cut["usage"]["exactly-once"]["truth"] >= decided else None

        audit = wait_for(audited, 60, "the audit's cut to take in the usage job's committed batches", interval=0.5)
    finally:
        db.conn.close()
    f = audit["fraud"]
    assert (f["truth"], f["observed"], f["lost"], f["topic_lost"], f["duplicated"]) == (decided, decided, 0, 0, 0), f
    u = audit["usage"]["exactly-once"]
    assert (u["truth"], u["lost"], u["duplicated"]) == (decided, 0, 0), u
