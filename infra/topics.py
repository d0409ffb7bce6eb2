"""Create the Kafka topics CardStream uses: partitions, replication and retention from the settings.

Every topic stamps its records with the broker's clock (`message.timestamp.type=LogAppendTime`):
a decision's latency is then one clock's difference, the decision's append time minus its
transaction's, and the audit's lag in seconds is measured the same way.

Replication is TOPIC_REPLICATION with `min.insync.replicas` TOPIC_MIN_INSYNC (1 and 1 on one
broker, 3 and 2 on the local cluster): every producer that matters sends with acks=all, so a write
is acknowledged once that many replicas have it, and one broker of three can stop without a
write being lost or refused. A replication larger than the brokers that answer is refused in one
sentence before anything is created.
"""
from __future__ import annotations

from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from infra import kafka_client
from infra.config import Settings, load


class TopicError(SystemExit):
    """A topic that cannot be created as configured, said in one sentence."""


def configs(s: Settings) -> dict[str, str]:
    return {"message.timestamp.type": "LogAppendTime",
            "retention.ms": str(int(s.topic_retention_hours * 3_600_000)),
            "min.insync.replicas": str(s.topic_min_insync)}


def check_replication(s: Settings, brokers: int) -> None:
    """TopicError when topics of TOPIC_REPLICATION / TOPIC_MIN_INSYNC cannot live on `brokers`."""
    if s.topic_min_insync > s.topic_replication:
        raise TopicError(f"TOPIC_MIN_INSYNC ({s.topic_min_insync}) cannot exceed TOPIC_REPLICATION "
                         f"({s.topic_replication}): no write would ever be acknowledged.")
    if s.topic_replication > brokers:
        raise TopicError(f"Topics need {s.topic_replication} replicas (TOPIC_REPLICATION) but the Kafka cluster at "
                         f"{s.kafka_bootstrap} has {brokers} broker(s) answering; start more brokers "
                         f"(KAFKA_BROKERS) or lower TOPIC_REPLICATION.")


def ensure_topics(names: list[str] | None = None, partitions: int | None = None,
                  s: Settings | None = None) -> list[str]:
    """Create any of `names` (default: all CardStream topics) that do not exist yet."""
    s = s or load()
    t = s.topics
    names = names or [t.transactions, t.labels, t.decisions, t.dead_letters, t.markers, t.decisions_rt]
    admin = kafka_client.admin(s)
    try:
        missing = [n for n in names if n not in set(admin.list_topics())]
        if missing:
            check_replication(s, len(admin.describe_cluster()["brokers"]))
            try:
                admin.create_topics([NewTopic(n, partitions or t.partitions, s.topic_replication, topic_configs=configs(s))
                                     for n in missing])
            except TopicAlreadyExistsError:
                pass
        return missing
    finally:
        admin.close()
