"""The one way CardStream talks to Kafka: one connection config for every client.

kafka-python clients (simulator, fraud sinks, audit, dashboard, tests, benches) are built here,
and the same settings go to Spark's Kafka source and sink as `kafka.*` options, so pointing
CardStream at a secured cluster (KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_CAFILE) is
one set of environment variables. End offsets and the broker probe are written here once.
"""
from __future__ import annotations

import time

from infra.config import Settings, load


def client_config(s: Settings | None = None) -> dict:
    """kafka-python keyword arguments: bootstrap servers and security."""
    s = s or load()
    cfg = {"bootstrap_servers": s.kafka_bootstrap.split(","), "security_protocol": s.kafka_security_protocol}
    if s.kafka_sasl_mechanism:
        cfg.update(sasl_mechanism=s.kafka_sasl_mechanism, sasl_plain_username=s.kafka_sasl_username,
                   sasl_plain_password=s.kafka_sasl_password)
    if s.kafka_ssl_cafile:
        cfg["ssl_cafile"] = s.kafka_ssl_cafile
    return cfg


def spark_options(s: Settings | None = None) -> dict[str, str]:
    """The same connection as Spark `kafka.*` options (Kafka's Java client names)."""
    s = s or load()
    opts = {"kafka.bootstrap.servers": s.kafka_bootstrap, "kafka.security.protocol": s.kafka_security_protocol}
    if s.kafka_sasl_mechanism:
        module = ("org.apache.kafka.common.security.scram.ScramLoginModule"
                  if s.kafka_sasl_mechanism.startswith("SCRAM")
                  else "org.apache.kafka.common.security.plain.PlainLoginModule")
        opts["kafka.sasl.mechanism"] = s.kafka_sasl_mechanism
        opts["kafka.sasl.jaas.config"] = (f'{module} required username="{s.kafka_sasl_username}" '
                                          f'password="{s.kafka_sasl_password}";')
    if s.kafka_ssl_cafile:
        opts["kafka.ssl.truststore.type"] = "PEM"
        opts["kafka.ssl.truststore.location"] = s.kafka_ssl_cafile
    return opts


def producer(s: Settings | None = None, **overrides):
    from kafka import KafkaProducer

    return KafkaProducer(**{**client_config(s), **overrides})


def consumer(s: Settings | None = None, *topics: str, **overrides):
    from kafka import KafkaConsumer

    return KafkaConsumer(*topics, **{**client_config(s), "enable_auto_commit": False, **overrides})


def admin(s: Settings | None = None, **overrides):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(**{**client_config(s), "client_id": "cardstream-admin", **overrides})


def partitions(c, topic: str, wait_s: float = 5.0) -> list[int]:
    """The topic's partitions as `c` (a consumer) sees them, waiting a moment for fresh metadata."""
    deadline = time.monotonic() + wait_s
    while True:
        parts = c.partitions_for_topic(topic)
        if parts or time.monotonic() >= deadline:
            return sorted(parts or ())
        time.sleep(0.1)


def end_offsets(topic: str, s: Settings | None = None, c=None, wait_s: float = 5.0) -> dict[int, int]:
    """{partition: end offset} of `topic` now (empty when the topic has no partitions yet)."""
    from kafka import TopicPartition

    own = c is None
    c = c or consumer(s)
    try:
        parts = partitions(c, topic, wait_s)
        if not parts:
            return {}
        ends = c.end_offsets([TopicPartition(topic, p) for p in parts])
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        if own:
            c.close()


def answers(s: Settings | None = None, timeout: float = 1.0) -> bool:
    """Whether the first bootstrap broker answers a Kafka ApiVersions request right now."""
    from infra.broker import api_versions

    s = s or load()
    host, _, port = s.kafka_bootstrap.split(",")[0].rpartition(":")
    return bool(api_versions(host, int(port), timeout=timeout))
