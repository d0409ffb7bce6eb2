"""What each broker node is (`infra.broker`'s pure part): its server.properties, the quorum, the
internal topics' replication, SASL users; and the topics' replication checks (`infra.topics`).
No broker is started here."""
from __future__ import annotations

import pytest

from controlplane import faults
from infra import broker
from infra.config import load
from infra.topics import TopicError, check_replication, configs


def props(text: str) -> dict[str, str]:
    return dict(l.split("=", 1) for l in text.splitlines() if "=" in l and not l.startswith("#"))


def test_a_single_broker_is_the_broker_of_before(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_PORT": "9092", "KAFKA_CONTROLLER_PORT": "9093"})
    p = props(broker.render_properties(s, 0, tmp_path / "data"))
    assert p["node.id"] == "1" and p["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert p["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert p["inter.broker.listener.name"] == "PLAINTEXT" and p["log.dirs"] == str(tmp_path / "data")
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr", "share.coordinator.state.topic.replication.factor",
                "default.replication.factor", "min.insync.replicas"):
        assert p[key] == "1", key
    assert not any(k.startswith("sasl") or "jaas" in k for k in p)


def test_node_i_of_three_has_its_ports_and_every_node_is_a_voter(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_PORT": "29110", "KAFKA_CONTROLLER_PORT": "29111",
              "CLUSTER": "1"})
    assert s.kafka_brokers == 3 and s.topic_replication == 3 and s.topic_min_insync == 2
    assert broker.quorum_voters(s) == "1@127.0.0.1:29111,2@127.0.0.1:29113,3@127.0.0.1:29115"
    p = props(broker.render_properties(s, 2, tmp_path / "node-2" / "data"))
    assert p["node.id"] == "3" and p["controller.quorum.voters"] == broker.quorum_voters(s)
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:29114,CONTROLLER://127.0.0.1:29115"
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:29114"
    assert p["offsets.topic.replication.factor"] == p["transaction.state.log.replication.factor"] == "3"
    assert p["transaction.state.log.min.isr"] == p["share.coordinator.state.topic.min.isr"] == "2"
    assert broker.data_dirs(s) == [tmp_path / "kafka" / f"node-{i}" / "data" for i in range(3)]


@pytest.mark.parametrize("brokers, want", [(1, (1, 1)), (2, (2, 2)), (3, (3, 2)), (5, (3, 2))])
def test_internal_topics_replicate_to_three_at_most_and_need_two_in_sync(brokers, want):
    assert broker.internal_replication(brokers) == want


def test_sasl_users_make_the_client_listener_sasl_plain_with_the_first_user_as_the_brokers_own(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_PORT": "29120", "KAFKA_CONTROLLER_PORT": "29121",
              "KAFKA_BROKER_SASL_USERS": "broker:b-secret,app:a-secret"})
    p = props(broker.render_properties(s, 0, tmp_path / "data"))
    assert p["listeners"] == "SASL_PLAINTEXT://127.0.0.1:29120,CONTROLLER://127.0.0.1:29121"
    assert p["listener.security.protocol.map"] == "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert p["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert p["sasl.enabled.mechanisms"] == p["sasl.mechanism.inter.broker.protocol"] == "PLAIN"
    jaas = p["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert 'username="broker" password="b-secret"' in jaas
    assert 'user_broker="b-secret"' in jaas and 'user_app="a-secret"' in jaas and jaas.endswith(";")


def test_a_keystore_makes_the_client_listener_ssl_trusting_the_clients_ca_between_brokers(tmp_path):
    keystore, ca = tmp_path / "broker.p12", tmp_path / "ca.pem"
    keystore.write_bytes(b"made by keytool")
    env = {"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_PORT": "29120", "KAFKA_CONTROLLER_PORT": "29121",
           "KAFKA_BROKER_SSL_KEYSTORE": str(keystore), "KAFKA_BROKER_SSL_KEYSTORE_PASSWORD": "ks-pw",
           "KAFKA_SSL_CAFILE": str(ca)}
    s = load(env)
    assert broker.client_listener(s) == "SSL"
    p = props(broker.render_properties(s, 0, tmp_path / "data"))
    assert p["listeners"] == "SSL://127.0.0.1:29120,CONTROLLER://127.0.0.1:29121"
    assert p["listener.security.protocol.map"] == "SSL:SSL,CONTROLLER:PLAINTEXT"
    assert p["inter.broker.listener.name"] == "SSL"
    assert (p["ssl.keystore.type"], p["ssl.keystore.location"]) == ("PKCS12", str(keystore))
    assert p["ssl.keystore.password"] == p["ssl.key.password"] == "ks-pw"
    assert (p["ssl.truststore.type"], p["ssl.truststore.location"]) == ("PEM", str(ca))
    assert not any(k.startswith("sasl") or "jaas" in k for k in p)

    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"made by keytool")
    s = load({**env, "KAFKA_BROKER_SSL_KEYSTORE": str(jks), "KAFKA_BROKER_SASL_USERS": "broker:b,app:a"})
    assert broker.client_listener(s) == "SASL_SSL"
    p = props(broker.render_properties(s, 0, tmp_path / "data"))
    assert p["listeners"] == "SASL_SSL://127.0.0.1:29120,CONTROLLER://127.0.0.1:29121"
    assert p["inter.broker.listener.name"] == "SASL_SSL" and p["ssl.keystore.type"] == "JKS"
    assert 'username="broker" password="b"' in p["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert p["sasl.enabled.mechanisms"] == "PLAIN"


@pytest.mark.parametrize("keystore, password, said", [
    ("missing.p12", "pw", "KAFKA_BROKER_SSL_KEYSTORE={} is not a file; make one with the JDK's keytool"),
    ("broker.p12", None, "KAFKA_BROKER_SSL_KEYSTORE needs its password in KAFKA_BROKER_SSL_KEYSTORE_PASSWORD"),
    ("broker.p12", "a\\b", "KAFKA_BROKER_SSL_KEYSTORE needs its password in KAFKA_BROKER_SSL_KEYSTORE_PASSWORD"),
])
def test_an_unusable_keystore_setting_is_one_sentence_before_anything_starts(tmp_path, keystore, password, said):
    (tmp_path / "broker.p12").write_bytes(b"made by keytool")
    env = {"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_PORT": "29120", "KAFKA_CONTROLLER_PORT": "29121",
           "KAFKA_BROKER_SSL_KEYSTORE": str(tmp_path / keystore)}
    if password:
        env["KAFKA_BROKER_SSL_KEYSTORE_PASSWORD"] = password
    with pytest.raises(broker.BrokerError) as err:
        broker.up(load(env), quiet=True)
    assert str(err.value.code).startswith(said.format(tmp_path / keystore))
    assert not (tmp_path / "kafka").exists()


@pytest.mark.parametrize("text", ["app", "app:", ":pw", 'app:"x"', "app:a b", "app:pw,"])
def test_a_bad_sasl_users_setting_is_one_sentence(text):
    with pytest.raises(broker.BrokerError) as err:
        broker.sasl_users(text)
    assert str(err.value.code).startswith("KAFKA_BROKER_SASL_USERS must be name:password pairs")


def test_a_node_outside_the_cluster_is_refused_in_one_sentence(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_BROKERS": "3"})
    assert broker._nodes(s, None) == [0, 1, 2] and broker._nodes(s, 1) == [1]
    with pytest.raises(broker.BrokerError) as err:
        broker.up(s, quiet=True, node=3)
    assert err.value.code == "There is no broker node 3: this cluster has 3 (nodes 0–2)."


def test_a_cluster_s_data_is_not_reused_for_another_number_of_brokers(tmp_path):
    three = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_BROKERS": "3"})
    cid = broker._cluster_id(three)
    assert broker._cluster_id(three) == cid  # one id, kept
    with pytest.raises(broker.BrokerError) as err:
        broker._cluster_id(load({"CARDSTREAM_RUN_DIR": str(tmp_path)}))
    assert "belongs to a cluster of 3 broker(s), not 1" in str(err.value.code)


def test_a_stopped_single_broker_s_files_move_to_node_0(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path)})
    old = tmp_path / "kafka"
    (old / "data").mkdir(parents=True)
    (old / "data" / "meta.properties").write_text("cluster.id=abc\nnode.id=1\n")
    (old / "broker.log").write_text("log\n")
    (old / "server.properties").write_text("x=1\n")
    broker._migrate(s)
    assert (old / "node-0" / "data" / "meta.properties").exists() and (old / "node-0" / "broker.log").exists()
    assert not (old / "data").exists() and not (old / "server.properties").exists()
    assert broker._cluster_id(s) == "abc"


def test_topics_carry_min_insync_and_refuse_more_replicas_than_brokers(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "CLUSTER": "1", "KAFKA_PORT": "29110"})
    assert configs(s)["min.insync.replicas"] == "2"
    check_replication(s, 3)
    with pytest.raises(TopicError) as err:
        check_replication(s, 1)
    assert err.value.code.startswith("Topics need 3 replicas (TOPIC_REPLICATION) but the Kafka cluster at "
                                     "127.0.0.1:29110,127.0.0.1:29112,127.0.0.1:29114 has 1 broker(s) answering")
    with pytest.raises(TopicError, match="cannot exceed TOPIC_REPLICATION"):
        check_replication(load({"TOPIC_REPLICATION": "1", "TOPIC_MIN_INSYNC": "2"}), 3)


def test_broker_down_takes_an_optional_node():
    assert faults.resolve("broker-down", None, {"node": "1"}) == (None, {"seconds": 10.0, "node": 1})
    assert faults.resolve("broker-down", None, {}) == (None, {"seconds": 10.0})
    with pytest.raises(faults.Refused, match="node must be a whole number"):
        faults.resolve("broker-down", None, {"node": 1.5})
    with pytest.raises(faults.Refused, match="node must be at least 0"):
        faults.resolve("broker-down", None, {"node": "-1"})


def test_kafka_jvm_opts_go_on_the_broker_s_command_line_before_its_main_class(tmp_path):
    s = load({"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_JVM_OPTS": "-XX:TieredStopAtLevel=1 '-Dx=a b'"})
    cmd = broker.java_command(s, "cp", [], tmp_path / "server.properties")
    assert s.kafka_jvm_opts == ("-XX:TieredStopAtLevel=1", "-Dx=a b")
    main = cmd.index("kafka.Kafka")
    assert cmd.index("-XX:TieredStopAtLevel=1") < main and cmd.index("-Dx=a b") < main
    assert cmd[-1] == str(tmp_path / "server.properties")
    assert not load({"CARDSTREAM_RUN_DIR": str(tmp_path)}).kafka_jvm_opts  # none by default


def test_a_badly_quoted_kafka_jvm_opts_is_one_sentence(tmp_path):
    with pytest.raises(SystemExit, match="KAFKA_JVM_OPTS is not a valid list of options"):
        load({"CARDSTREAM_RUN_DIR": str(tmp_path), "KAFKA_JVM_OPTS": "-Dx='unclosed"})
