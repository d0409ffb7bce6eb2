"""A topic read back whole by the Kafka tests: what a run wrote, in the broker's order."""
from __future__ import annotations

import time

from kafka import TopicPartition

from infra import kafka_client


def read_all(topic: str, timeout: float = 60.0) -> list:
    """Every record of the topic up to its end offsets now, partition by partition in offset order
    (a test compares them with what was sent; `timeout` bounds the wait for a slow broker)."""
    consumer = kafka_client.consumer()
    try:
        parts = [TopicPartition(topic, p) for p in kafka_client.partitions(consumer, topic)]
        end = consumer.end_offsets(parts)
        consumer.assign(parts)
        consumer.seek_to_beginning()
        records, deadline = [], time.monotonic() + timeout
        while any(consumer.position(tp) < end[tp] for tp in parts) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
