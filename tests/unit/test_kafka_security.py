"""The one connection config over SSL and SASL_SSL (`infra.kafka_client`): what kafka-python and
Spark's Java client get, the TLS the probes speak (the clients' own: same CA file, same checks),
and the probe on real sockets keeping its words under TLS (issue 36 items 8 and 12). No broker."""
from __future__ import annotations

import contextlib
import ssl

import certifi
import pytest
from kafka.net.transport import KafkaSSLTransport

from dashboard.data import kafka as dashboard_kafka
from infra import kafka_client
from infra.config import load
from tests.unit.test_dashboard_pages import closed_port
from tests.unit.test_dashboard_probe import accepting_listener, sidebar_of, silent_listener

CA = certifi.where()  # any PEM bundle: nothing here needs a broker's certificate


def secured(protocol: str = "SASL_SSL", cafile: str | None = CA, port: int = 29130) -> object:
    env = {"KAFKA_BOOTSTRAP": f"127.0.0.1:{port}", "KAFKA_SECURITY_PROTOCOL": protocol}
    if protocol.startswith("SASL"):
        env.update(KAFKA_SASL_MECHANISM="PLAIN", KAFKA_SASL_USERNAME="app", KAFKA_SASL_PASSWORD="pw")
    if cafile:
        env["KAFKA_SSL_CAFILE"] = cafile
    return load(env)


def test_kafka_python_and_spark_get_the_same_sasl_ssl_connection():
    s = secured()
    assert kafka_client.client_config(s) == {
        "bootstrap_servers": ["127.0.0.1:29130"], "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "app", "sasl_plain_password": "pw", "ssl_cafile": CA}
    opts = kafka_client.spark_options(s)
    assert opts["kafka.security.protocol"] == "SASL_SSL" and opts["kafka.sasl.mechanism"] == "PLAIN"
    # Kafka's Java client reads a PEM CA file itself (KIP-651): no JKS truststore to make
    assert (opts["kafka.ssl.truststore.type"], opts["kafka.ssl.truststore.location"]) == ("PEM", CA)
    assert opts["kafka.sasl.jaas.config"] == ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                              'username="app" password="pw";')


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_plaintext_protocols_probe_without_tls(protocol):
    assert kafka_client.tls_context(secured(protocol)) is None


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_the_probes_tls_is_the_one_kafka_python_builds_from_the_same_settings(protocol):
    s = secured(protocol)
    ours = kafka_client.tls_context(s)
    theirs = KafkaSSLTransport._build_ssl_context({**KafkaSSLTransport.DEFAULT_CONFIG,
                                                   "ssl_cafile": kafka_client.client_config(s)["ssl_cafile"]})
    assert ours.verify_mode == theirs.verify_mode == ssl.CERT_REQUIRED
    assert ours.check_hostname and theirs.check_hostname
    assert ours.minimum_version == theirs.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ours.get_ca_certs() == theirs.get_ca_certs() and len(ours.get_ca_certs()) > 10
    assert kafka_client.tls_context(s) is ours  # built once per CA file: the probe runs every second


def test_without_a_ca_file_the_system_cas_are_trusted():
    ctx = kafka_client.tls_context(secured("SSL", cafile=None))
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_an_unreadable_ca_file_is_one_sentence(tmp_path):
    missing = tmp_path / "nope.pem"
    with pytest.raises(kafka_client.UnreadableCAFile) as err:
        kafka_client.tls_context(secured("SSL", cafile=str(missing)))
    assert str(err.value) == f"KAFKA_SSL_CAFILE={missing} cannot be read as PEM certificates (No such file or directory)."
    found = dashboard_kafka.probe(secured("SSL", cafile=str(missing)), timeout_s=0.2, tries=1)
    assert found.state == dashboard_kafka.UNREACHABLE and found.down
    assert f"KAFKA_SSL_CAFILE={missing} cannot be read" in found.says()


def _read_then_hang_up(conn):
    conn.settimeout(1)
    with contextlib.suppress(OSError):
        conn.recv(1024)


def plaintext_kafka_like_listener():
    """Accepts each connection, reads what comes, and hangs up, as a plaintext Kafka listener does
    with a TLS ClientHello (its first bytes read as an absurd request size)."""
    return accepting_listener(_read_then_hang_up)


def test_over_tls_the_probe_keeps_refused_and_not_answering_apart():
    port = closed_port()
    found = dashboard_kafka.probe(secured("SSL", port=port), timeout_s=0.3, tries=1)
    assert found.state == dashboard_kafka.REFUSED and found.down
    assert not kafka_client.answers(secured("SASL_SSL", port=port), timeout=0.3)
    assert kafka_client.login_error(secured("SASL_SSL", port=port)) is None  # nobody to ask: the client says
    with silent_listener() as port:  # the TLS handshake waits for an answer that never comes: busy, not down
        found = dashboard_kafka.probe(secured("SSL", port=port), timeout_s=0.3, tries=2, pause_s=0.05)
    assert found.state == dashboard_kafka.SILENT and not found.down and found.verdict == "not answering"
    assert found.says().startswith("took the connection but sent no answer within 0.3 s (2 tries)")


def test_tls_to_a_listener_that_is_not_ssl_is_said_as_such():
    with plaintext_kafka_like_listener() as port:
        assert kafka_client.api_versions("127.0.0.1", port, 1.0, kafka_client.tls_context(secured("SSL"))) is None
        found = dashboard_kafka.probe(secured("SSL", port=port), timeout_s=1.0, tries=1)
        assert found.state == dashboard_kafka.TLS_FAILED and not found.down and not found.up
        assert found.verdict == "unusable"  # the word every message about it starts with
        assert found.says().startswith("took the connection, but the TLS handshake failed: TLS failed (")
        assert found.says().endswith("is that listener SSL? check KAFKA_SECURITY_PROTOCOL (1 try)")
        with pytest.raises(dashboard_kafka.BrokerDown, match=rf"^unusable: Kafka at 127.0.0.1:{port} took the "
                                                             "connection, but the TLS handshake failed"):
            dashboard_kafka.end_offsets(secured("SSL", port=port), ["decisions"], timeout_s=0.5)


def test_the_badge_says_a_failed_tls_handshake_in_red_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("KAFKA_SSL_CAFILE", CA)
    with plaintext_kafka_like_listener() as port:
        up, amber, red = sidebar_of(port, monkeypatch, tmp_path)
    assert up == [] and amber == []
    [said] = red
    assert said.startswith(f"Kafka unusable · 127.0.0.1:{port} took the connection, but the TLS handshake failed: ")
    assert said.endswith(f"check KAFKA_SECURITY_PROTOCOL ({dashboard_kafka.PROBE_TRIES} tries)")
