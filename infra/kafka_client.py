"""The one way CardStream talks to Kafka: one connection config for every client.

kafka-python clients (simulator, fraud sinks, audit, dashboard, tests, benches) are built here,
and the same settings go to Spark's Kafka source and sink as `kafka.*` options, so pointing
CardStream at a secured cluster (KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_CAFILE) is
one set of environment variables. End offsets and the wire probes (`api_versions`, `sasl_plain`:
raw Kafka requests that tell a ready broker, and a refused login, at once) are written here once,
and a refused SASL/PLAIN login is said in one sentence when a client is built (`LoginRefused`).
The probes speak the configured protocol: over SSL and SASL_SSL they first make the TLS handshake
the clients make (`tls_context`: same CA file, same host-name check), so "the broker answers"
means it answers the clients as they are configured.
"""
from __future__ import annotations

import functools
import socket
import ssl
import struct
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError

from infra.config import Settings, load


class LoginRefused(KafkaError):
    """The brokers refused the configured SASL login (the message is one sentence)."""

    def __str__(self) -> str:
        return str(self.args[0])


class UnreadableCAFile(KafkaError):
    """KAFKA_SSL_CAFILE cannot be read as PEM certificates (the message is one sentence)."""

    def __str__(self) -> str:
        return str(self.args[0])


TLS_PROTOCOLS = ("SSL", "SASL_SSL")


def client_config(s: Settings | None = None) -> dict:
    """kafka-python keyword arguments: bootstrap servers and security."""
    s = s or load()
    cfg = {"bootstrap_servers": s.kafka_bootstrap.split(","), "security_protocol": s.kafka_security_protocol}
    if s.kafka_sasl_mechanism:
        cfg.update(sasl_mechanism=s.kafka_sasl_mechanism, sasl_plain_username=s.kafka_sasl_username,
                   sasl_plain_password=s.kafka_sasl_password)
    if s.kafka_ssl_cafile:
        cfg["ssl_cafile"] = s.kafka_ssl_cafile
    return cfg


def spark_options(s: Settings | None = None) -> dict[str, str]:
    """The same connection as Spark `kafka.*` options (Kafka's Java client names)."""
    s = s or load()
    opts = {"kafka.bootstrap.servers": s.kafka_bootstrap, "kafka.security.protocol": s.kafka_security_protocol}
    if s.kafka_sasl_mechanism:
        module = ("org.apache.kafka.common.security.scram.ScramLoginModule"
                  if s.kafka_sasl_mechanism.startswith("SCRAM")
                  else "org.apache.kafka.common.security.plain.PlainLoginModule")
        opts["kafka.sasl.mechanism"] = s.kafka_sasl_mechanism
        opts["kafka.sasl.jaas.config"] = (f'{module} required username="{s.kafka_sasl_username}" '
                                          f'password="{s.kafka_sasl_password}";')
    if s.kafka_ssl_cafile:
        opts["kafka.ssl.truststore.type"] = "PEM"
        opts["kafka.ssl.truststore.location"] = s.kafka_ssl_cafile
    return opts


def tls_context(s: Settings | None = None) -> ssl.SSLContext | None:
    """The TLS the configured clients speak, for the raw probes: None unless the protocol is SSL or
    SASL_SSL; else a context as kafka-python builds one from the same settings (TLS 1.2 at least,
    the broker's certificate checked against KAFKA_SSL_CAFILE, or the system's CAs, and against
    the host name). UnreadableCAFile when that file cannot be read."""
    s = s or load()
    if s.kafka_security_protocol not in TLS_PROTOCOLS:
        return None
    return _client_tls(s.kafka_ssl_cafile)


@functools.lru_cache(maxsize=4)
def _client_tls(cafile: str | None) -> ssl.SSLContext:
    """One context per CA file for the process: the probes run every second or so."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname, as kafka-python's
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not cafile:
        ctx.load_default_certs()
        return ctx
    try:
        ctx.load_verify_locations(cafile)
    except (OSError, ssl.SSLError) as exc:
        raise UnreadableCAFile(f"KAFKA_SSL_CAFILE={cafile} cannot be read as PEM certificates "
                               f"({getattr(exc, 'strerror', None) or exc}).") from None
    return ctx


def login_error(s: Settings | None = None) -> str | None:
    """One sentence when the brokers refuse this configuration's SASL/PLAIN login, else None.

    kafka-python retries a refused login until its bootstrap timeout and then says only that it
    could not bootstrap; this asks the first broker that answers directly (SASL_PLAINTEXT or
    SASL_SSL with PLAIN only: other mechanisms are left to the client's own errors)."""
    s = s or load()
    if s.kafka_security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL") or s.kafka_sasl_mechanism != "PLAIN":
        return None
    tls = tls_context(s)
    for server in s.kafka_bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        answer = sasl_plain(host, int(port), s.kafka_sasl_username or "", s.kafka_sasl_password or "", tls=tls)
        if answer is not None:
            code, message = answer
            if code == 0:
                return None
            return (f"The Kafka broker at {host}:{port} refused the SASL login of user {s.kafka_sasl_username!r} "
                    f"({message or f'error {code}'}); check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD.")
    return None


def _checked(s: Settings | None) -> dict:
    """client_config, after a refused SASL login has been said in one sentence (LoginRefused)."""
    refused = login_error(s)
    if refused:
        raise LoginRefused(refused)
    return client_config(s)


def producer(s: Settings | None = None, **overrides):
    return KafkaProducer(**{**_checked(s), **overrides})


def consumer(s: Settings | None = None, *topics: str, **overrides):
    return KafkaConsumer(*topics, **{**_checked(s), "enable_auto_commit": False, **overrides})


def admin(s: Settings | None = None, **overrides):
    return KafkaAdminClient(**{**_checked(s), "client_id": "cardstream-admin", **overrides})


def partitions(c, topic: str, wait_s: float = 5.0) -> list[int]:
    """The topic's partitions as `c` (a consumer) sees them, waiting a moment for fresh metadata."""
    deadline = time.monotonic() + wait_s
    while True:
        parts = c.partitions_for_topic(topic)
        if parts or time.monotonic() >= deadline:
            return sorted(parts or ())
        time.sleep(0.1)


def end_offsets(topic: str, s: Settings | None = None, c=None, wait_s: float = 5.0) -> dict[int, int]:
    """{partition: end offset} of `topic` now (empty when the topic has no partitions yet)."""
    own = c is None
    c = c or consumer(s)
    try:
        parts = partitions(c, topic, wait_s)
        if not parts:
            return {}
        ends = c.end_offsets([TopicPartition(topic, p) for p in parts])
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        if own:
            c.close()


def read_to_end(topic: str, s: Settings | None = None, timeout_s: float = 60.0, **overrides) -> list:
    """Every record of `topic` from its start to the end offsets taken as it begins, read_committed
    unless `overrides` say otherwise (the end is then the last stable offset: all a committed read
    can reach). Done when each partition is read to its end, not after seconds of silence (which
    is what a consumer_timeout_ms read waits every time); TimeoutError when not within `timeout_s`."""
    c = consumer(s, **{"group_id": None, "isolation_level": "read_committed", "max_poll_records": 10_000,
                       **overrides})
    try:
        tps = [TopicPartition(topic, p) for p in partitions(c, topic)]
        if not tps:
            return []
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        records, deadline = [], time.monotonic() + timeout_s
        while any(c.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() >= deadline:
                at = {tp.partition: f"{c.position(tp)}/{ends[tp]}" for tp in tps}
                raise TimeoutError(f"{topic} not read to its end in {timeout_s:.0f} s (partition: at/end {at})")
            for tp, batch in c.poll(timeout_ms=500).items():
                records.extend(r for r in batch if r.offset < ends[tp])
        return records
    finally:
        c.close()


def answers(s: Settings | None = None, timeout: float = 1.0) -> bool:
    """Whether a bootstrap broker answers a Kafka ApiVersions request right now, over the configured
    protocol (`tls_context`): any one of them, since a cluster with one broker down still serves
    every client. UnreadableCAFile when KAFKA_SSL_CAFILE cannot be read."""
    s = s or load()
    tls = tls_context(s)
    for server in s.kafka_bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if api_versions(host, int(port), timeout=timeout, tls=tls):
            return True
    return False


# ------------------------------------------------------------------ the wire probes

def _connect(host: str, port: int, timeout: float, tls: ssl.SSLContext | None) -> socket.socket:
    """A connection to host:port, TLS (handshake made) when `tls` is given; each wait ≤ `timeout`."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.settimeout(timeout)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def tls_refusal(host: str, port: int, tls: ssl.SSLContext, timeout: float = 2.0) -> str | None:
    """Why the TLS handshake with host:port fails, in words, or None when it succeeds (or no
    connection is made at all: that is said by who asks)."""
    try:
        with _connect(host, port, timeout, tls):
            return None
    except ssl.SSLCertVerificationError as exc:
        return f"its certificate is not trusted ({exc.verify_message}); check KAFKA_SSL_CAFILE"
    except ssl.SSLError as exc:
        return f"TLS failed ({exc.reason or exc}); is that listener SSL? check KAFKA_SECURITY_PROTOCOL"
    except OSError:
        return None


def api_versions(host: str, port: int, timeout: float = 2.0, tls: ssl.SSLContext | None = None) -> int | None:
    """Number of APIs the broker at host:port announces in its ApiVersions answer, or None.

    A raw ApiVersions v0 request (over TLS when `tls` is given): it tells a real, ready Kafka
    broker from any other listener. A SASL listener answers it before any login.
    """
    client = b"cardstream-probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client)) + client
    try:
        with _connect(host, port, timeout, tls) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _read(sock, 4)
            payload = _read(sock, struct.unpack(">i", header)[0])
    except (OSError, struct.error):
        return None
    correlation, error, count = struct.unpack(">ihi", payload[:10])
    if correlation != 7 or error != 0:
        return None
    return count


def sasl_plain(host: str, port: int, username: str, password: str, timeout: float = 2.0,
               tls: ssl.SSLContext | None = None) -> tuple[int, str] | None:
    """(error code, message) of the broker's answer to a SASL/PLAIN login at host:port (0: accepted),
    or None when no Kafka SASL listener answers there.

    Raw SaslHandshake v1 and SaslAuthenticate v0 (over TLS when `tls` is given), like
    `api_versions`: a refused login is then said at once, where a client library retries it
    until its own timeout.
    """
    client = b"cardstream-probe"

    def request(api_key: int, correlation: int, body: bytes) -> bytes:
        msg = struct.pack(">hhih", api_key, 0 if api_key == 36 else 1, correlation, len(client)) + client + body
        sock.sendall(struct.pack(">i", len(msg)) + msg)
        return _read(sock, struct.unpack(">i", _read(sock, 4))[0])

    token = b"\0" + username.encode() + b"\0" + password.encode()
    try:
        with _connect(host, port, timeout, tls) as sock:
            answer = request(17, 1, struct.pack(">h", 5) + b"PLAIN")
            if struct.unpack(">ih", answer[:6]) != (1, 0):
                return None
            answer = request(36, 2, struct.pack(">i", len(token)) + token)
    except (OSError, struct.error):
        return None
    correlation, error, length = struct.unpack(">ihh", answer[:8])
    if correlation != 2:
        return None
    return error, answer[8:8 + length].decode(errors="replace") if length > 0 else ""


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data
