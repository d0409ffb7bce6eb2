"""Every Kafka call the dashboard makes: is the broker up, and where do its topics end.

Built on `infra.kafka_client` (the one connection config: bootstrap, security, SASL, SSL), so the
dashboard reads a secured cluster the way every other client does. Each call is bounded in time:
a page must not hang on a broker that does not answer.
"""
from __future__ import annotations

from infra import kafka_client


class BrokerDown(RuntimeError):
    """Kafka did not answer in time (the message says so in words)."""


def answers(s, timeout_s: float = 0.5) -> bool:
    """Whether a bootstrap broker (any of them) answers a Kafka ApiVersions request right now."""
    try:
        return kafka_client.answers(s, timeout=timeout_s)
    except (OSError, ValueError):
        return False


def end_offsets(s, topics: list[str], timeout_s: float = 1.5) -> dict[str, dict[int, int]]:
    """{topic: {partition: end offset}} straight from the broker (topics it does not have are left
    out); BrokerDown when it does not answer."""
    from kafka.errors import KafkaError

    if not answers(s, timeout_s):
        raise BrokerDown(f"broker down: Kafka at {s.kafka_bootstrap} does not answer")
    try:
        consumer = kafka_client.consumer(s, client_id="cardstream-dashboard",
                                         request_timeout_ms=int(timeout_s * 1500),
                                         bootstrap_timeout_ms=int(timeout_s * 1000))
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    try:
        out = {}
        for topic in topics:
            ends = kafka_client.end_offsets(topic, s, c=consumer, wait_s=timeout_s / max(1, len(topics)))
            if ends:
                out[topic] = {int(p): int(o) for p, o in ends.items()}
        return out
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    finally:
        consumer.close()


def recent_latencies(s, topic: str, limit: int = 2000, timeout_s: float = 2.0) -> list[tuple[int, int]]:
    """(produced_at, decided_at) of the newest `limit` decisions in `topic` (spread over its
    partitions), read from the records' JSON: the real-time path's decisions live only in Kafka
    (decisions-rt). [] when the topic holds none; BrokerDown when the broker does not answer."""
    import json

    from kafka import TopicPartition
    from kafka.errors import KafkaError

    if not answers(s, timeout_s / 2):
        raise BrokerDown(f"broker down: Kafka at {s.kafka_bootstrap} does not answer")
    try:
        c = kafka_client.consumer(s, client_id="cardstream-dashboard", request_timeout_ms=int(timeout_s * 1500),
                                  bootstrap_timeout_ms=int(timeout_s * 1000), consumer_timeout_ms=int(timeout_s * 1000))
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    try:
        parts = kafka_client.partitions(c, topic, wait_s=timeout_s / 4)
        if not parts:
            return []
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        starts, ends = c.beginning_offsets(tps), c.end_offsets(tps)
        each = max(1, limit // len(tps))
        todo = {}
        for tp in tps:
            if ends[tp] > starts[tp]:
                c.seek(tp, max(starts[tp], ends[tp] - each))
                todo[tp] = ends[tp]
        out = []
        for record in c:   # stops after consumer_timeout_ms without a record
            try:
                value = json.loads(record.value)
                out.append((int(value["produced_at"]), int(value["decided_at"])))
            except (TypeError, ValueError, KeyError):
                pass
            tp = TopicPartition(record.topic, record.partition)
            if tp in todo and record.offset + 1 >= todo[tp]:
                del todo[tp]
            if not todo:
                break
        return out
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    finally:
        c.close()
