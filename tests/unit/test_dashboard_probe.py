"""The dashboard's Kafka probe on real sockets (issue 36 item 8): a closed port refuses, a listener
that takes the connection and never answers is "not answering within N s" (busy or starting, not
down), a listener that hangs up is not a Kafka broker; each said in words, red only when refused;
and the sidebar badge under Streamlit's AppTest says which."""
from __future__ import annotations

import contextlib
import socket
import threading
import pytest
from streamlit.testing.v1 import AppTest

from dashboard.data import kafka
from infra.config import load
from tests.unit.test_dashboard_pages import APP, closed_port


@pytest.fixture
def settings(monkeypatch):
    def at(port) -> object:
        monkeypatch.setenv("KAFKA_BOOTSTRAP", f"127.0.0.1:{port}")
        return load()
    return at


@contextlib.contextmanager
def silent_listener():
    """A socket that listens and never accepts: the kernel completes the connection (backlog), the
    ApiVersions request is sent, and no answer ever comes, like a broker too busy to answer."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@contextlib.contextmanager
def accepting_listener(handle):
    """A socket that accepts each connection, hands it to `handle(conn)`, and closes it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def serve():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                handle(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


def hanging_up_listener():
    """A socket that accepts each connection and closes it at once, answering nothing."""
    return accepting_listener(lambda conn: None)


def test_a_closed_port_refuses(settings):
    port = closed_port()
    found = kafka.probe(settings(port), timeout_s=0.5, tries=2, pause_s=0.05)
    assert (found.state, found.server, found.tries) == (kafka.REFUSED, f"127.0.0.1:{port}", 2)
    assert found.down and not found.up
    assert found.says() == "refused the connection (2 tries): nothing listens there"
    with pytest.raises(kafka.BrokerDown, match=rf"^broker down: Kafka at 127.0.0.1:{port} refused the connection"):
        kafka.end_offsets(settings(port), ["decisions"], timeout_s=0.3)


def test_a_listener_that_never_answers_is_not_answering_not_down(settings):
    with silent_listener() as port:
        found = kafka.probe(settings(port), timeout_s=0.3, tries=2, pause_s=0.05)
        assert found.state == kafka.SILENT and not found.down and not found.up
        assert found.says() == ("took the connection but sent no answer within 0.3 s (2 tries): busy or still "
                                "starting, not refused")
        with pytest.raises(kafka.BrokerDown, match=rf"^not answering: Kafka at 127.0.0.1:{port} took the connection"):
            kafka.end_offsets(settings(port), ["decisions"], timeout_s=0.3)


def test_a_listener_that_hangs_up_is_not_a_kafka_broker(settings):
    with hanging_up_listener() as port:
        found = kafka.probe(settings(port), timeout_s=2.0, tries=1)
    assert found.state == kafka.NOT_KAFKA and not found.down
    assert found.says().startswith("answered, but not as a Kafka broker (it closed the connection")


def test_of_several_servers_the_one_alive_is_said_and_a_bad_address_too(settings):
    with silent_listener() as port:
        found = kafka.probe(settings(f"{closed_port()},127.0.0.1:{port}"), timeout_s=0.2, tries=1)
    # the first refused, the second took the connection and kept silent: a broker is there, busy
    assert (found.state, found.server) == (kafka.SILENT, f"127.0.0.1:{port}")
    found = kafka.probe(settings(closed_port()), timeout_s=0.2, tries=1)
    assert found.state == kafka.REFUSED
    found = kafka.probe(settings("notaport"), timeout_s=0.2, tries=1)
    assert found.state == kafka.UNREACHABLE and found.down and "'notaport' is not a port number" in found.says()


def sidebar_of(port: int, monkeypatch, tmp_path) -> tuple[list[str], list[str], list[str]]:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", f"127.0.0.1:{port}")
    monkeypatch.setenv("CARDSTREAM_DB", str(tmp_path / "dash.db"))
    monkeypatch.setenv("CHECKPOINT_ROOT", str(tmp_path / "checkpoints"))
    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return ([e.value for e in at.sidebar.success], [e.value for e in at.sidebar.warning],
            [e.value for e in at.sidebar.error])


def test_the_badge_is_red_only_when_refused(monkeypatch, tmp_path):
    port = closed_port()
    up, amber, red = sidebar_of(port, monkeypatch, tmp_path)
    assert up == [] and amber == []
    assert red == [f"Kafka broker down · 127.0.0.1:{port} refused the connection ({kafka.PROBE_TRIES} tries): "
                   "nothing listens there"]


def test_the_badge_says_not_answering_in_amber(monkeypatch, tmp_path):
    with silent_listener() as port:
        up, amber, red = sidebar_of(port, monkeypatch, tmp_path)
    assert up == [] and red == []
    t = f"{kafka.PROBE_TIMEOUT_S:g}"
    assert amber == [f"Kafka not answering within {t} s · 127.0.0.1:{port} took the connection but sent no answer "
                     f"within {t} s ({kafka.PROBE_TRIES} tries): busy or still starting, not refused"]
