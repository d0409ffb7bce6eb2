"""Every Kafka call the dashboard makes: is the broker up (and if not, what it did), where do its
topics end, and the newest records of a topic.

Built on `infra.kafka_client` (the one connection config: bootstrap, security, SASL, SSL), so the
dashboard reads a secured cluster the way every other client does. Each call is bounded in time:
a page must not hang on a broker that does not answer.

The probe (`probe`) tells apart what a user must not confuse: a broker that refuses the connection
(nothing listens: down), one that takes the connection but sends no answer within the probe's
timeout (busy or still starting, as while five JVMs start on two cores: not down), a connection
that is not even made within that time, a TLS handshake that fails (a certificate the clients do
not trust, a listener that is not SSL), and a listener that answers but not as a Kafka broker. It
asks over the configured protocol (`kafka_client.tls_context`: SSL and SASL_SSL make the clients'
TLS handshake first) and tries again before it says anything but "up".
"""
from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass

from infra import kafka_client

PROBE_TIMEOUT_S = 1.5   # each try's wait for the connection and for the ApiVersions answer
PROBE_TRIES = 3         # tries before the badge says anything but "up"
PROBE_PAUSE_S = 0.2     # between two tries

UP, REFUSED, SILENT, NO_CONNECTION, NOT_KAFKA, UNREACHABLE, TLS_FAILED = (
    "up", "refused", "silent", "no connection", "not kafka", "unreachable", "tls failed")


class BrokerDown(RuntimeError):
    """Kafka did not answer in time (the message says so in words)."""


@dataclass(frozen=True)
class Probe:
    """What the bootstrap brokers did when asked for their API versions: `state` (UP, REFUSED,
    SILENT: connection taken, no answer within `timeout_s`; NO_CONNECTION: none made within
    `timeout_s`; TLS_FAILED: the TLS handshake failed, `detail` says why; NOT_KAFKA: something
    answered or hung up, not as a Kafka broker; UNREACHABLE: the address cannot be reached, or
    KAFKA_SSL_CAFILE cannot be read, `detail` says why), the server it is about, the tries made."""
    state: str
    server: str
    timeout_s: float
    tries: int
    detail: str = ""

    @property
    def up(self) -> bool:
        return self.state == UP

    @property
    def down(self) -> bool:
        """Said in red: nothing listens there, or the address cannot be reached at all."""
        return self.state in (REFUSED, UNREACHABLE)

    @property
    def verdict(self) -> str:
        """What a user should make of it, in two words (the start of every message about it)."""
        return "broker down" if self.down else "unusable" if self.state == TLS_FAILED else "not answering"

    def says(self) -> str:
        """What the broker did, in words, after "Kafka at host:port"."""
        within = f"within {self.timeout_s:g} s"
        tries = f"{self.tries} {'try' if self.tries == 1 else 'tries'}"
        return {
            UP: "answers",
            REFUSED: f"refused the connection ({tries}): nothing listens there",
            SILENT: f"took the connection but sent no answer {within} ({tries}): busy or still starting, not refused",
            NO_CONNECTION: f"made no connection {within} ({tries}): an overloaded machine, a host that is "
                           "down, or a network that drops packets",
            TLS_FAILED: f"took the connection, but the TLS handshake failed: {self.detail} ({tries})",
            NOT_KAFKA: f"answered, but not as a Kafka broker ({self.detail or 'no ApiVersions answer'}; {tries})",
            UNREACHABLE: f"cannot be reached ({self.detail}; {tries})",
        }[self.state]


def probe_server(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S, tls=None) -> tuple[str, str]:
    """(state, detail) of one Kafka ApiVersions request to host:port (`infra.kafka_client.api_versions`,
    over TLS when `tls` is given) and, when it gets no answer, of a plain connection to tell why."""
    started = time.monotonic()
    if kafka_client.api_versions(host, port, timeout=timeout_s, tls=tls) is not None:
        return UP, ""
    waited = time.monotonic() - started >= timeout_s * 0.95  # the request waited its whole timeout
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        return REFUSED, ""
    except (socket.timeout, TimeoutError):
        return NO_CONNECTION, ""
    except socket.gaierror as exc:
        return UNREACHABLE, f"unknown host: {exc.strerror or exc}"
    except OSError as exc:
        return UNREACHABLE, exc.strerror or type(exc).__name__
    if waited:  # it takes connections and kept the request unanswered for the whole timeout
        return SILENT, ""
    refusal = kafka_client.tls_refusal(host, port, tls, timeout_s) if tls is not None else None
    if refusal:
        return TLS_FAILED, refusal
    return NOT_KAFKA, "it closed the connection, or its answer was not an ApiVersions one"


def probe(s, timeout_s: float = PROBE_TIMEOUT_S, tries: int = PROBE_TRIES, pause_s: float = PROBE_PAUSE_S) -> Probe:
    """Ask the bootstrap brokers until one answers, up to `tries` rounds (a cluster with one broker
    down still serves every client); when none does, what they did in the last round: the first
    that is alive (takes connections) if any, else the first."""
    servers = [x.strip() for x in s.kafka_bootstrap.split(",") if x.strip()]
    if not servers:
        return Probe(UNREACHABLE, "(none)", timeout_s, 0, "KAFKA_BOOTSTRAP names no server")
    try:
        tls = kafka_client.tls_context(s)
    except kafka_client.UnreadableCAFile as exc:
        return Probe(UNREACHABLE, servers[0], timeout_s, 0, str(exc))
    for attempt in range(1, tries + 1):
        said = []
        for server in servers:
            host, _, port = server.rpartition(":")
            try:
                state, detail = probe_server(host, int(port), timeout_s, tls)
            except ValueError:
                state, detail = UNREACHABLE, f"{port!r} is not a port number"
            if state == UP:
                return Probe(UP, server, timeout_s, attempt)
            said.append((server, state, detail))
        if attempt < tries:
            time.sleep(pause_s)
    alive = [x for x in said if x[1] not in (REFUSED, UNREACHABLE)]
    server, state, detail = (alive or said)[0]
    return Probe(state, server, timeout_s, tries, detail)


def answers(s, timeout_s: float = 0.5) -> bool:
    """Whether a bootstrap broker (any of them) answers a Kafka ApiVersions request right now, over the
    configured protocol (one try)."""
    return probe(s, timeout_s, tries=1).up


def _check(s, timeout_s: float) -> None:
    """BrokerDown, in words, unless a broker answers (one try of `timeout_s`)."""
    found = probe(s, timeout_s, tries=1)
    if not found.up:
        raise BrokerDown(f"{found.verdict}: Kafka at {found.server} {found.says()}")
def end_offsets(s, topics: list[str], timeout_s: float = 1.5) -> dict[str, dict[int, int]]:
    """{topic: {partition: end offset}} straight from the broker (topics it does not have are left
    out); BrokerDown when it does not answer."""
    from kafka.errors import KafkaError

    _check(s, timeout_s)
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


def newest_records(s, topic: str, parse, limit: int = 2000, timeout_s: float = 2.0) -> list:
    """parse(record) of the newest `limit` records of `topic` (spread over its partitions; the read
    stops `timeout_s` after the last record came, or 3 × `timeout_s` after it began); records
    `parse` turns into None, or fails on with TypeError, ValueError or KeyError, are left out. []
    when the topic holds none; BrokerDown when the broker does not answer."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    _check(s, timeout_s / 2)
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
        deadline = time.monotonic() + 3 * timeout_s
        for record in c:   # stops after consumer_timeout_ms without a record
            try:
                value = parse(record)
            except (TypeError, ValueError, KeyError):
                value = None
            if value is not None:
                out.append(value)
            tp = TopicPartition(record.topic, record.partition)
            if tp in todo and record.offset + 1 >= todo[tp]:
                del todo[tp]
            if not todo or time.monotonic() > deadline:
                break
        return out
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    finally:
        c.close()


LOG_APPEND_TIME = 1      # a record's timestamp type when the broker stamped it (infra/topics.py sets it)
TX_MARGIN_MS = 2_000     # read the transactions from this long before the oldest decision's produced_at


class NotAppendTime(RuntimeError):
    """A topic's records carry their producers' clocks, not the broker's append time."""


@dataclass(frozen=True)
class AppendLatencies:
    """The newest decisions of a topic, each as (its transaction's append time, its own append
    time) on the broker's clock (`pairs`, oldest decision first); `unmatched`: decisions whose
    transaction was not found in the part of the transactions topic read."""
    pairs: list[tuple[int, int]]
    unmatched: int


def _read_ranges(c, starts: dict, ends: dict, deadline: float, stop=None) -> list:
    """The records of each partition from its start offset up to its end offset (or to the first
    record `stop` says is past what is wanted), until `deadline` (monotonic)."""
    todo = {tp: end for tp, end in ends.items() if tp in starts and end > starts[tp]}
    if not todo:
        return []
    c.assign(list(todo))
    for tp in todo:
        c.seek(tp, starts[tp])
    out = []
    while todo and time.monotonic() < deadline:
        for tp, records in c.poll(timeout_ms=200, max_records=5_000).items():
            for r in records:
                if tp not in todo:
                    break
                if stop is not None and stop(r):
                    del todo[tp]
                    c.pause(tp)
                    break
                out.append(r)
        for tp in list(todo):  # a transactional topic ends on a commit marker, which is no record
            if c.position(tp) >= todo[tp]:
                del todo[tp]
    return out


def _stamped(record, topic: str) -> None:
    if record.timestamp_type != LOG_APPEND_TIME:
        raise NotAppendTime(f"`{topic}` is stamped with its producers' clocks, not the broker's append time "
                            "(message.timestamp.type=LogAppendTime, set by infra/topics.py)")


def _txn_id(record) -> str | None:
    try:
        value = json.loads(record.value)
        return str(value["txn_id"]) if isinstance(value, dict) and "txn_id" in value else None
    except (TypeError, ValueError, RecursionError):
        return None


def append_latencies(s, decisions_topic: str, transactions_topic: str, limit: int = 2000,
                     timeout_s: float = 2.0) -> AppendLatencies:
    """Decision latency as `bench latency` measures it: a decision's append time on its topic minus
    its transaction's append time on the transactions topic, both the broker's clock
    (LogAppendTime), for the newest `limit` decisions (read_committed: an exactly-once topic's
    aborted records are none). A txn_id decided twice counts its first decision; a transaction
    sent twice, its first append. The transactions are read from TX_MARGIN_MS before the oldest
    decision's produced_at up to the newest decision's append. BrokerDown when Kafka does not
    answer, NotAppendTime when a topic is stamped with the producers' clocks."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    _check(s, timeout_s)
    try:
        c = kafka_client.consumer(s, client_id="cardstream-dashboard", isolation_level="read_committed",
                                  request_timeout_ms=int(timeout_s * 1500), bootstrap_timeout_ms=int(timeout_s * 1000))
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    try:
        deadline = time.monotonic() + 3 * timeout_s
        dtps = [TopicPartition(decisions_topic, p) for p in kafka_client.partitions(c, decisions_topic, timeout_s / 4)]
        if not dtps:
            return AppendLatencies([], 0)
        first, ends = c.beginning_offsets(dtps), c.end_offsets(dtps)
        each = max(1, limit // len(dtps))
        decided: dict[str, tuple[int, int]] = {}   # txn_id -> (decision appended, produced_at)
        for r in _read_ranges(c, {tp: max(first[tp], ends[tp] - each) for tp in dtps}, ends, deadline):
            _stamped(r, decisions_topic)
            try:
                value = json.loads(r.value)
                txn, produced = str(value["txn_id"]), int(value["produced_at"])
            except (TypeError, ValueError, KeyError, RecursionError):
                continue
            if txn not in decided or r.timestamp < decided[txn][0]:
                decided[txn] = (r.timestamp, produced)
        if not decided:
            return AppendLatencies([], 0)
        since = min(p for _, p in decided.values()) - TX_MARGIN_MS
        until = max(t for t, _ in decided.values())
        ttps = [TopicPartition(transactions_topic, p)
                for p in kafka_client.partitions(c, transactions_topic, timeout_s / 4)]
        found = c.offsets_for_times({tp: since for tp in ttps}) if ttps else {}
        starts = {tp: o.offset for tp, o in found.items() if o is not None}
        appended: dict[str, int] = {}
        for r in _read_ranges(c, starts, c.end_offsets(list(starts)) if starts else {}, deadline,
                              stop=lambda r: r.timestamp > until):
            _stamped(r, transactions_topic)
            txn = _txn_id(r)
            if txn in decided:
                appended.setdefault(txn, r.timestamp)
        pairs = sorted((appended[t], d) for t, (d, _) in decided.items() if t in appended)
        return AppendLatencies(sorted(pairs, key=lambda p: p[1]), len(decided) - len(pairs))
    except KafkaError as exc:
        raise BrokerDown(f"broker down: {exc}") from None
    finally:
        c.close()


def recent_labels(s, topic: str, limit: int = 20_000, timeout_s: float = 3.0) -> list[tuple[str, int]]:
    """(txn_id, is_fraud 0/1) of the newest `limit` labels in `topic` (the simulator's ground truth,
    or a replayed history's, each in Kafka once it is known); the labels of malformed inputs
    (pattern "bad:<kind>": never decided) are left out."""
    def parse(record):
        value = json.loads(record.value)
        if str(value.get("pattern", "")).startswith("bad:") or value.get("is_fraud") is None:
            return None
        return str(value["txn_id"]), int(bool(value["is_fraud"]))

    return newest_records(s, topic, parse, limit, timeout_s)
