"""Create the Kafka topics CardStream uses: partitions, replication and retention from the settings.

Every topic stamps its records with the broker's clock (`message.timestamp.type=LogAppendTime`):
a decision's latency is then one clock's difference, the decision's append time minus its
transaction's, and the audit's lag in seconds is measured the same way.

Replication is TOPIC_REPLICATION with `min.insync.replicas` TOPIC_MIN_INSYNC (1 and 1 on one
broker, 3 and 2 on the local cluster): every producer that matters sends with acks=all, so a write
is acknowledged once that many replicas have it, and one broker of three can stop without a
write being lost or refused. A replication larger than the brokers that answer is refused in one
sentence before anything is created.

The markers topic of the exactly-once Kafka sinks (pipelines/fraud/sinks.py: one marker per
batch, keyed by stream and checkpoint) is compacted: a sink that opens reads the newest marker of
its key from the whole topic, and compaction keeps that marker however old it is (a quiet stream's
marker outlives any retention) while keeping the topic, and so the read, short however long the
jobs run. `segment.ms` rolls the active segment, which is never compacted, every 10 minutes.
"""
from __future__ import annotations

from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import TopicAlreadyExistsError

from infra import kafka_client
from infra.config import Settings, load


class TopicError(SystemExit):
    """A topic that cannot be created as configured, said in one sentence."""


def configs(s: Settings) -> dict[str, str]:
    return {"message.timestamp.type": "LogAppendTime",
            "retention.ms": str(int(s.topic_retention_hours * 3_600_000)),
            "min.insync.replicas": str(s.topic_min_insync)}


COMPACTED = {"cleanup.policy": "compact", "segment.ms": str(10 * 60_000), "min.cleanable.dirty.ratio": "0.1"}


def compacted_configs(s: Settings) -> dict[str, str]:
    return {**configs(s), **COMPACTED}


def ensure_compacted(name: str, s: Settings | None = None) -> None:
    """Make `name` a compacted topic: created so when missing, its cleanup policy changed when it
    was created otherwise (by an older version, or as a plain topic). Raises what the brokers said
    (an ACL refusing AlterConfigs, for one): the caller decides whether that stops it."""
    s = s or load()
    admin = kafka_client.admin(s)
    try:
        if name not in set(admin.list_topics()):
            check_replication(s, len(admin.describe_cluster()["brokers"]))
            try:
                admin.create_topics([NewTopic(name, s.topics.partitions, s.topic_replication,
                                              topic_configs=compacted_configs(s))])
                return
            except TopicAlreadyExistsError:
                pass
        resource = ConfigResource(ConfigResourceType.TOPIC, name, {"cleanup.policy": None})
        described = admin.describe_configs([resource], config_filter="all")
        entry = next(iter(next(iter(described.values())).values())).get("cleanup.policy") or {}
        if "compact" in str(entry.get("value") or ""):
            return
        result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, dict(COMPACTED))])
        said = next(iter(next(iter(result.values())).values()))
        if said != "OK":
            raise RuntimeError(f"the brokers did not make {name} compacted: {said}")
    finally:
        admin.close()


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
    compact = {t.markers}
    admin = kafka_client.admin(s)
    try:
        missing = [n for n in names if n not in set(admin.list_topics())]
        if missing:
            check_replication(s, len(admin.describe_cluster()["brokers"]))
            try:
                admin.create_topics([NewTopic(n, partitions or t.partitions, s.topic_replication,
                                              topic_configs=compacted_configs(s) if n in compact else configs(s))
                                     for n in missing])
            except TopicAlreadyExistsError:
                pass
        return missing
    finally:
        admin.close()
