"""What the benches and the simulator share that needs a broker, on the session's real one: the
LogAppendTime reader (bench/common.append_stamped) and the simulator's topics (command.make_topics)."""
from __future__ import annotations

import uuid

import pytest
from kafka.admin import NewTopic

from bench import common
from infra import kafka_client
from simulator.command import make_topics


def send(settings, topic: str, n: int) -> None:
    prod = kafka_client.producer(settings)
    for i in range(n):
        prod.send(topic, value=b'{"i": %d}' % i)
    prod.flush()
    prod.close()


def test_records_stamped_by_the_broker_are_read_to_the_end(kafka, settings, topic):
    name = topic("stamped", partitions=1)
    send(settings, name, 3)
    got = list(common.append_stamped(settings, name, RuntimeError, 3_000))
    assert len(got) == 3 and all(m.timestamp_type == common.LOG_APPEND_TIME for m in got)


def test_a_topic_the_producer_stamps_is_refused_as_the_caller_says(kafka, settings):
    name = f"create-time-{uuid.uuid4().hex[:10]}"
    admin = kafka_client.admin(settings)
    admin.create_topics([NewTopic(name, 1, 1, topic_configs={"message.timestamp.type": "CreateTime"})])
    admin.close()
    send(settings, name, 2)
    with pytest.raises(SystemExit, match=f"topic {name} is not stamped"):
        list(common.append_stamped(settings, name, lambda t: SystemExit(f"topic {t} is not stamped"), 3_000))


def test_the_simulator_makes_its_topics_on_the_run_s_broker(kafka, settings):
    tx, lb = (f"{p}-{uuid.uuid4().hex[:10]}" for p in ("sim-tx", "sim-lb"))
    make_topics(settings, settings.kafka_bootstrap, tx, lb)
    admin = kafka_client.admin(settings)
    try:
        assert {tx, lb} <= set(admin.list_topics())
    finally:
        admin.close()
    send(settings, tx, 1)  # made as every CardStream topic is: stamped by the broker
    assert len(list(common.append_stamped(settings, tx, RuntimeError, 3_000))) == 1
