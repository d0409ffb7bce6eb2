"""Create the Kafka topics CardStream uses, with the configured partition count."""
from __future__ import annotations

from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from infra import kafka_client
from infra.config import Settings, load


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
                admin.create_topics([NewTopic(n, partitions or t.partitions, 1) for n in missing])
            except TopicAlreadyExistsError:
                pass
        return missing
    finally:
        admin.close()
