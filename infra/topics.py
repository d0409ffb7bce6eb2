"""Create the Kafka topics CardStream uses: partitions, replication and retention from the settings.

Every topic stamps its records with the broker's clock (`message.timestamp.type=LogAppendTime`):
a decision's latency is then one clock's difference, the decision's append time minus its
transaction's, and the audit's lag in seconds is measured the same way.
"""
from __future__ import annotations

from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from infra import kafka_client
from infra.config import Settings, load


def configs(s: Settings) -> dict[str, str]:
    return {"message.timestamp.type": "LogAppendTime",
            "retention.ms": str(int(s.topic_retention_hours * 3_600_000))}


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
            try:
                admin.create_topics([NewTopic(n, partitions or t.partitions, s.topic_replication, topic_configs=configs(s))
                                     for n in missing])
            except TopicAlreadyExistsError:
                pass
        return missing
    finally:
        admin.close()
