"""Start, stop and probe the real Apache Kafka brokers (KRaft, 127.0.0.1): one, or a cluster of N.

    python -m infra.broker up | down | status | run  [--node I]

KAFKA_BROKERS nodes (1; 3 with CLUSTER=1), node i listening on KAFKA_PORT + 2i for clients and
KAFKA_CONTROLLER_PORT + 2i for the quorum. Every node is one process that is both broker and
controller, and all N are the voters of one KRaft quorum (static `controller.quorum.voters`):
three controllers living in the three brokers' JVMs, so three processes instead of six on this
2-core machine, and one node down leaves a majority of the quorum (2 of 3) and of every
partition's replicas (min ISR 2) standing. One cluster id (`kafka/cluster.properties`) is
formatted into every node's storage; node i's files are under the run folder's `kafka/node-<i>/`
(the single broker's older `kafka/data` is moved to `node-0` once, when it is stopped). Internal
topics (consumer offsets, transaction state, share coordinator) and topics created by the broker
itself get replication min(3, N) and min ISR min(2, N): with one node, the broker of before.
The heap is KAFKA_HEAP per node, a cluster's too (768m: three nodes may take 2.3 GB of heap;
KAFKA_HEAP=512m keeps them to 1.5 GB).

With KAFKA_BROKER_SASL_USERS=name:password[,name:password...] the client listener is SASL_PLAINTEXT
(mechanism PLAIN) accepting those users, the first being the brokers' own identity between
themselves; the controller listener stays plaintext on loopback. Clients then need
KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT, KAFKA_SASL_MECHANISM=PLAIN and KAFKA_SASL_USERNAME /
KAFKA_SASL_PASSWORD (infra.kafka_client). With KAFKA_BROKER_SSL_KEYSTORE (PKCS12, or JKS when its
name ends in .jks) and KAFKA_BROKER_SSL_KEYSTORE_PASSWORD the client listener is SSL, or SASL_SSL
with SASL users: its certificate must name 127.0.0.1 (subjectAltName IP:127.0.0.1), and the brokers
trust KAFKA_SSL_CAFILE between themselves, as the clients do (else the JVM's own CAs). The
passwords are in the nodes' server.properties, readable by their owner only. The brokers' own
readiness checks speak that listener's protocol (TLS without checking the certificate: they ask
only whether our broker is up; the clients' trust is checked by the clients and `kafka_client`).

`run` (the Procfile's line) starts the brokers, stays in the foreground, and stops them when it
is itself stopped. Each broker is a detached process of its own, so the supervisor's
`broker-down` fault can stop and restart one (`--node`) or all without honcho taking the whole
demo down.

`up` is idempotent: a broker of ours that already answers is left alone. With KAFKA_BOOTSTRAP set
nothing is started or stopped; that cluster is used as it is. Every failure is one clear sentence
and a non-zero exit.
"""
from __future__ import annotations

import base64
import dataclasses
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kafka.errors import KafkaError

from infra import daemons, jvm, kafka_client
from infra.config import ROOT, Settings, load
from infra.jars import is_complete
from infra.jvm import require_java
from infra.kafka_client import api_versions
from infra.topics import ensure_topics

TEMPLATE = ROOT / "infra" / "kafka" / "server.properties.template"
LOG4J = ROOT / "infra" / "kafka" / "log4j2.properties"
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30


class BrokerError(SystemExit):
    """A broker problem, said in one sentence."""


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# -- the pure part: what node i is ------------------------------------------------------------

def node_id(node: int) -> int:
    """Kafka's node.id of CardStream's node `node` (node 0 keeps the single broker's id, 1)."""
    return node + 1


def quorum_voters(s: Settings) -> str:
    """`controller.quorum.voters`: every node is a voter, id@host:controller port."""
    return ",".join(f"{node_id(i)}@127.0.0.1:{cport}" for i, (_, cport) in enumerate(s.kafka_node_ports))


def internal_replication(brokers: int) -> tuple[int, int]:
    """(replication, min ISR) of the internal topics on a cluster of `brokers` nodes."""
    return min(3, brokers), min(2, brokers)


def sasl_users(text: str | None) -> list[tuple[str, str]]:
    """KAFKA_BROKER_SASL_USERS ("name:password,...") as pairs; BrokerError when it cannot be one."""
    if not text:
        return []
    users = []
    for item in text.split(","):
        name, sep, password = item.strip().partition(":")
        if not sep or not name or not password or any(c in item for c in '"\\ '):
            raise BrokerError("KAFKA_BROKER_SASL_USERS must be name:password pairs separated by commas, "
                              "without quotes, backslashes or spaces.")
        users.append((name, password))
    return users


def client_listener(s: Settings) -> str:
    """The security protocol of the brokers' client listener: PLAINTEXT, SASL_PLAINTEXT, SSL or
    SASL_SSL (SASL users and a keystore, each or both)."""
    return ("SASL_" if s.kafka_broker_sasl_users else "") + ("SSL" if s.kafka_broker_ssl_keystore else "PLAINTEXT")


def ssl_properties(s: Settings) -> str:
    """The server.properties lines of an SSL client listener ("" without a keystore); BrokerError
    when the keystore or its password cannot be used."""
    if not s.kafka_broker_ssl_keystore:
        return ""
    keystore, password = Path(s.kafka_broker_ssl_keystore).resolve(), s.kafka_broker_ssl_keystore_password
    if not keystore.is_file():
        raise BrokerError(f"KAFKA_BROKER_SSL_KEYSTORE={s.kafka_broker_ssl_keystore} is not a file; "
                          f"make one with the JDK's keytool (docs/configuration.md, Kafka security).")
    if not password or any(c in password for c in "\\\n\r"):
        raise BrokerError("KAFKA_BROKER_SSL_KEYSTORE needs its password in KAFKA_BROKER_SSL_KEYSTORE_PASSWORD, "
                          "without backslashes or line breaks.")
    kind = "JKS" if keystore.suffix.lower() == ".jks" else "PKCS12"
    lines = [f"ssl.keystore.type={kind}", f"ssl.keystore.location={keystore}",
             f"ssl.keystore.password={password}", f"ssl.key.password={password}"]
    if s.kafka_ssl_cafile:  # what the brokers trust between themselves: what the clients trust
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={Path(s.kafka_ssl_cafile).resolve()}"]
    return "".join(f"{line}\n" for line in lines)


def render_properties(s: Settings, node: int, data_dir: Path, template: str | None = None) -> str:
    """Node `node`'s server.properties: its ports and id, the quorum, replication, security."""
    port, controller_port = s.kafka_node_ports[node]
    rf, min_isr = internal_replication(s.kafka_brokers)
    users = sasl_users(s.kafka_broker_sasl_users)
    listener = client_listener(s)
    security = ssl_properties(s)
    if users:
        (own, own_password), module = users[0], "org.apache.kafka.common.security.plain.PlainLoginModule"
        accepted = " ".join(f'user_{name}="{password}"' for name, password in users)
        security += ("sasl.enabled.mechanisms=PLAIN\nsasl.mechanism.inter.broker.protocol=PLAIN\n"
                     f'listener.name.{listener.lower()}.plain.sasl.jaas.config={module} required '
                     f'username="{own}" password="{own_password}" {accepted};\n')
    return (template or TEMPLATE.read_text()).format(
        node=node, node_id=node_id(node), voters=quorum_voters(s), port=port, controller_port=controller_port,
        listener=listener, data_dir=data_dir,
        partitions=s.topics.partitions, internal_rf=rf, internal_min_isr=min_isr, security=security)


def _own_tls(s: Settings) -> ssl.SSLContext | None:
    """TLS for asking our own brokers whether they are up (None on a plaintext listener): the
    certificate is not checked, since trust is the clients' question, not readiness's."""
    if not s.kafka_broker_ssl_keystore:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


def answers_here(s: Settings, port: int) -> int | None:
    """`api_versions` of our broker on 127.0.0.1:`port`, over its client listener's protocol."""
    return api_versions("127.0.0.1", port, tls=_own_tls(s))


# -- processes and folders ----------------------------------------------------------------------

def _paths(s: Settings, node: int = 0) -> dict[str, Path]:
    d = s.kafka_dir / f"node-{node}"
    return {"dir": d, "data": d / "data", "config": d / "server.properties",
            "pid": d / "broker.pid", "log": d / "broker.log"}


def data_dirs(s: Settings) -> list[Path]:
    """Every node's Kafka data folder, node 0 first (the housekeeper weighs them)."""
    return [_paths(s, i)["data"] for i in range(s.kafka_brokers)]


def _legacy(s: Settings) -> dict[str, Path]:
    """Where the single broker kept its files before there were nodes."""
    return {"data": s.kafka_dir / "data", "config": s.kafka_dir / "server.properties",
            "pid": s.kafka_dir / "broker.pid", "log": s.kafka_dir / "broker.log"}


def _nodes(s: Settings, node: int | None) -> list[int]:
    if node is None:
        return list(range(s.kafka_brokers))
    if not 0 <= node < s.kafka_brokers:
        n = s.kafka_brokers
        raise BrokerError(f"There is no broker node {node}: this cluster has {n} "
                          f"({f'nodes 0–{n - 1}' if n > 1 else 'node 0 only'}).")
    return [node]


def broker_pids(s: Settings, node: int | None = None) -> list[int]:
    """Pids of broker processes started from this run folder (found by their command line), node
    0 first; with `node`, that node's only."""
    configs = {str(_paths(s, i)["config"]).encode(): i for i in range(s.kafka_brokers)}
    configs[str(_legacy(s)["config"]).encode()] = 0  # a single broker started before nodes existed
    found = []
    for pid, cmd in daemons.command_lines():
        if b"kafka.Kafka" in cmd:
            i = next((configs[c] for c in cmd if c in configs), None)
            if i is not None and (node is None or i == node):
                found.append((i, pid))
    return [pid for _, pid in sorted(found)]


def _migrate(s: Settings) -> None:
    """Move a stopped single broker's files from `kafka/` into `kafka/node-0/` (its data kept)."""
    old, new = _legacy(s), _paths(s, 0)
    if not old["data"].exists() or new["data"].exists():
        return
    new["dir"].mkdir(parents=True, exist_ok=True)
    old["data"].rename(new["data"])
    if old["log"].exists():
        old["log"].rename(new["log"])
    old["config"].unlink(missing_ok=True)
    old["pid"].unlink(missing_ok=True)


def _cluster_id(s: Settings) -> str:
    """The one cluster id of this run folder's nodes; BrokerError when their data was formatted
    for a different number of brokers (a quorum cannot grow or shrink by editing its voters)."""
    path = s.kafka_dir / "cluster.properties"
    props = _properties(path)
    meta = _properties(_paths(s, 0)["data"] / "meta.properties")
    if not props and meta.get("cluster.id"):  # formatted by the single broker of before
        props = {"cluster.id": meta["cluster.id"], "brokers": "1"}
    if props:
        had = int(props.get("brokers", "1"))
        if had != s.kafka_brokers:
            raise BrokerError(f"The Kafka data in {s.kafka_dir} belongs to a cluster of {had} broker(s), not "
                              f"{s.kafka_brokers}; set KAFKA_BROKERS={had}, or remove that folder to start afresh.")
    else:
        props = {"cluster.id": base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="),
                 "brokers": str(s.kafka_brokers)}
    s.kafka_dir.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return props["cluster.id"]


def _properties(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    return dict(l.split("=", 1) for l in lines if "=" in l and not l.startswith("#"))


def _format_storage(p: dict[str, Path], cluster_id: str, classpath: str, archive_opts: list[str]) -> None:
    if (p["data"] / "meta.properties").exists():
        return
    proc = subprocess.run(["java", *archive_opts, "-cp", classpath, f"-Dlog4j2.configurationFile={LOG4J}",
                           "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(p["config"])],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BrokerError(f"Formatting the Kafka storage in {p['data']} failed: "
                          f"{(proc.stderr or proc.stdout).strip()[-300:]}")


def _broker_env() -> dict[str, str]:
    """The environment without CardStream's own settings: the broker outlives whoever started it
    (the supervisor restarts it after `broker-down`) and must not look like part of that run."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CARDSTREAM_")}


def _check_ports(s: Settings, node: int) -> None:
    for port in s.kafka_node_ports[node]:
        if _port_open(port):
            if answers_here(s, port):
                raise BrokerError(
                    f"A Kafka broker that CardStream did not start already listens on 127.0.0.1:{port}; "
                    f"stop it, or use it with KAFKA_BOOTSTRAP=127.0.0.1:{port}.")
            raise BrokerError(
                f"Port {port} on 127.0.0.1 is taken by another program, so the Kafka broker cannot "
                f"start; stop that program or pick free ports with KAFKA_PORT / KAFKA_CONTROLLER_PORT.")


def class_archive(s: Settings) -> Path | None:
    """The brokers' class archive (infra/jvm.py) for this checkout's Kafka jars and JDK."""
    return jvm.class_archive(s.jars_dir / "cds", "kafka-broker", sorted(s.kafka_jars.glob("*.jar")))


def _launch(s: Settings, node: int, cluster_id: str, classpath: str,
            archive_opts: list[str] | None = None) -> subprocess.Popen:
    p = _paths(s, node)
    p["data"].mkdir(parents=True, exist_ok=True)
    p["config"].touch(mode=0o600)  # it may hold SASL passwords
    p["config"].write_text(render_properties(s, node, p["data"]))
    if archive_opts is None:
        archive_opts = jvm.archive_options(class_archive(s), s.jvm_class_archives)
    _format_storage(p, cluster_id, classpath, archive_opts)
    with open(p["log"], "ab") as log:
        proc = subprocess.Popen(
            java_command(s, classpath, archive_opts, p["config"]),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=_broker_env())
    p["pid"].write_text(str(proc.pid))
    return proc


def java_command(s: Settings, classpath: str, archive_opts: list[str], config: Path) -> list[str]:
    """A broker's command line: the class archive, its heap, KAFKA_JVM_OPTS, then Kafka's main class."""
    return ["java", *archive_opts, f"-Xmx{s.kafka_heap}", f"-Xms{s.kafka_heap}", "-XX:+UseG1GC", *s.kafka_jvm_opts,
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={LOG4J}",
            "-cp", classpath, "kafka.Kafka", str(config)]


def _what(s: Settings, node: int | None) -> str:
    if node is not None and s.kafka_brokers > 1:
        return f"Kafka broker node {node}"
    return "Kafka broker" if s.kafka_brokers == 1 else f"Kafka cluster of {s.kafka_brokers} brokers"


def up(s: Settings | None = None, quiet: bool = False, node: int | None = None) -> str:
    """Start the brokers (or only `node`) not already running and answering; return the bootstrap."""
    s = s or load()
    if s.external_bootstrap:
        if not quiet:
            print(f"KAFKA_BOOTSTRAP={s.external_bootstrap}: using that cluster, starting nothing.")
        return s.external_bootstrap
    nodes = _nodes(s, node)
    what = _what(s, node)
    sasl_users(s.kafka_broker_sasl_users)  # a bad setting is one sentence before anything starts
    ssl_properties(s)
    ours = {i: broker_pids(s, i) for i in nodes}
    todo = [i for i in nodes if not (ours[i] and answers_here(s, s.kafka_node_ports[i][0]))]
    if not todo:
        if not quiet:
            pids = ", ".join(str(ours[i][0]) for i in nodes)
            print(f"{what} already running on {s.kafka_bootstrap} (pid {pids}).")
        return s.kafka_bootstrap
    for i in todo:
        if not ours[i]:
            _check_ports(s, i)
    require_java()
    if not is_complete(s.kafka_jars, "kafka"):
        raise BrokerError(f"The Kafka jars in {s.kafka_jars} are missing or incomplete; run `make setup`.")
    classpath = f"{s.kafka_jars}/*"
    procs: dict[int, subprocess.Popen | None] = {i: None for i in todo}
    pids = {i: ours[i][0] for i in todo if ours[i]}
    if any(not ours[i] for i in todo):
        if not broker_pids(s, 0):
            _migrate(s)
        cluster_id = _cluster_id(s)
        for i in todo:
            if not ours[i]:
                procs[i] = _launch(s, i, cluster_id, classpath)
                pids[i] = procs[i].pid
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = list(todo)
    while waiting and time.monotonic() < deadline:
        waiting = [i for i in waiting if not answers_here(s, s.kafka_node_ports[i][0])]
        for i in waiting:
            proc = procs[i]
            if proc is not None and proc.poll() is not None:
                log = _paths(s, i)["log"]
                raise BrokerError(f"The {_what(s, i if s.kafka_brokers > 1 else None)} exited during start-up "
                                  f"(code {proc.returncode}); {log} ends with: {daemons.tail(log)}")
        if waiting:
            time.sleep(0.3)
    if waiting:
        ports = ", ".join(f"127.0.0.1:{s.kafka_node_ports[i][0]}" for i in waiting)
        raise BrokerError(f"The {what} did not answer on {ports} within {START_TIMEOUT_S} s; "
                          f"see {_paths(s, waiting[0])['log']}.")
    if node is None and s.kafka_brokers > 1:
        _wait_for_members(s, deadline)
    if not quiet:
        where = s.kafka_bootstrap if node is None else f"127.0.0.1:{s.kafka_node_ports[node][0]}"
        logs = _paths(s, todo[0])["log"] if len(todo) == 1 else s.kafka_dir / "node-*" / "broker.log"
        print(f"{what} up on {where} (pid {', '.join(str(pids[i]) for i in todo)}, log {logs}).")
    return s.kafka_bootstrap


def _wait_for_members(s: Settings, deadline: float) -> None:
    """Wait until the cluster's metadata lists every node: a node answers before it is registered,
    and a topic of replication N cannot be created until N brokers are."""
    seen = 0
    while time.monotonic() < deadline:
        try:
            admin = kafka_client.admin(s, request_timeout_ms=5000)
            try:
                seen = len(admin.describe_cluster()["brokers"])
            finally:
                admin.close()
        except kafka_client.LoginRefused as exc:
            raise BrokerError(str(exc)) from None
        except KafkaError:  # while the brokers register: asked again
            seen = 0
        if seen >= s.kafka_brokers:
            return
        time.sleep(0.5)
    raise BrokerError(f"The Kafka cluster's metadata lists {seen} of its {s.kafka_brokers} brokers after "
                      f"{START_TIMEOUT_S} s; see the logs under {s.kafka_dir}.")


def down(s: Settings | None = None, quiet: bool = False, node: int | None = None) -> None:
    """Stop our brokers (or only `node`) cleanly (SIGTERM, controlled shutdown), SIGKILL only if
    they hang. A whole cluster gets its signals at once: stopped one after another, the last
    nodes would wait for a quorum that is already gone."""
    s = s or load()
    if s.external_bootstrap:
        if not quiet:
            print(f"KAFKA_BOOTSTRAP={s.external_bootstrap}: not ours to stop.")
        return
    nodes = _nodes(s, node)
    killed = daemons.stop(broker_pids(s, node), STOP_TIMEOUT_S)
    for i in nodes:
        _paths(s, i)["pid"].unlink(missing_ok=True)
    if node in (None, 0):
        _legacy(s)["pid"].unlink(missing_ok=True)
    if not quiet:
        print(f"{_what(s, node)} stopped." + (" (It had to be killed.)" if killed else ""))


def status(s: Settings | None = None) -> bool:
    """Say whether Kafka answers (each node, for a cluster); True when every node does."""
    s = s or load()
    if s.external_bootstrap or s.kafka_brokers == 1:
        host, _, port = s.kafka_bootstrap.split(",")[0].rpartition(":")
        apis = (api_versions(host, int(port), tls=kafka_client.tls_context(s)) if s.external_bootstrap
                else answers_here(s, int(port)))
        pids = [] if s.external_bootstrap else broker_pids(s)
        if apis:
            print(f"Kafka answers on {s.kafka_bootstrap}: ApiVersions lists {apis} APIs"
                  + (f"; broker pid {pids[0]}." if pids else "."))
            return True
        print(f"No Kafka broker answers on {s.kafka_bootstrap}.")
        return False
    answering = 0
    for i, (port, _) in enumerate(s.kafka_node_ports):
        apis, pids = answers_here(s, port), broker_pids(s, i)
        answering += bool(apis)
        print(f"node {i} on 127.0.0.1:{port}: " + (f"answers, ApiVersions lists {apis} APIs" if apis else "no answer")
              + (f"; pid {pids[0]}." if pids else "; not running."))
    print(f"{answering} of {s.kafka_brokers} Kafka brokers answer on {s.kafka_bootstrap}.")
    return answering == s.kafka_brokers


def run() -> None:
    s = load()
    up(s)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    while not stop:
        time.sleep(0.5)
    down(s)


def build_archive(s: Settings | None = None) -> Path | None:
    """Writes the brokers' class archive if this checkout has none: a scratch broker on free ports
    in a scratch folder starts, takes a topic, a transaction and a read, and writes the archive as
    it stops (SIGTERM: a clean exit). Without one the brokers start as before."""
    s = s or load()
    target = class_archive(s)
    if not s.jvm_class_archives or target is None or target.exists() or s.external_bootstrap:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.stem}.{os.getpid()}.partial")
    print("Writing the Kafka broker's class archive (once per checkout; under a minute) ...", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cardstream-broker-archive-") as tmp:
        ports = daemons.free_ports(2)
        scratch = dataclasses.replace(s, run_dir=Path(tmp), kafka_port=ports[0], kafka_controller_port=ports[1],
                                      kafka_brokers=1, kafka_broker_sasl_users=None, kafka_security_protocol="PLAINTEXT",
                                      kafka_sasl_mechanism=None, kafka_sasl_username=None, kafka_sasl_password=None,
                                      kafka_ssl_cafile=None, kafka_broker_ssl_keystore=None,
                                      kafka_broker_ssl_keystore_password=None)
        proc = _launch(scratch, 0, uuid.uuid4().hex[:22], f"{s.kafka_jars}/*", [f"-XX:ArchiveClassesAtExit={partial}"])
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not answers_here(scratch, ports[0]) and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.3)
            _exercise(scratch)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return jvm.finish_archive(partial, target, "the Kafka broker", proc.returncode, proc.returncode in (0, 143),
                              started)


def _exercise(s: Settings) -> None:
    """What a broker does in a run: a topic made, a transaction committed, a read_committed read."""
    ensure_topics(["archive"], s=s)
    producer = kafka_client.producer(s, transactional_id="archive", enable_idempotence=True)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(10):
        producer.send("archive", str(i).encode())
    producer.commit_transaction()
    producer.close()
    consumer = kafka_client.consumer(s, "archive", auto_offset_reset="earliest", consumer_timeout_ms=3_000,
                                     isolation_level="read_committed", group_id="archive")
    list(consumer)
    consumer.close()


USAGE = "usage: python -m infra.broker up|down|status|run|archive [--node I]"


def main(argv: list[str]) -> int:
    node = None
    if len(argv) == 3 and argv[1] == "--node" and argv[0] in ("up", "down"):
        if not argv[2].isdigit():
            print(f"--node must be a broker's number (0 first), not {argv[2]!r}.", file=sys.stderr)
            return 2
        node, argv = int(argv[2]), argv[:1]
    commands = {"up": lambda: up(node=node), "down": lambda: down(node=node), "status": lambda: status(), "run": run,
                "archive": lambda: build_archive() and None}
    if len(argv) != 1 or argv[0] not in commands:
        print(USAGE, file=sys.stderr)
        return 2
    result = commands[argv[0]]()
    return 1 if result is False else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
