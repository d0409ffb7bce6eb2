"""Start, stop and probe the real Apache Kafka broker (KRaft, single node, 127.0.0.1).

    python -m infra.broker up | down | status | run

`run` (the Procfile's line) starts the broker, stays in the foreground, and stops the broker when
it is itself stopped. The broker is a detached process of its own, so the supervisor's
`broker-down` fault can stop and restart it without honcho taking the whole demo down.

`up` is idempotent: a broker of ours that already answers is left alone. With KAFKA_BOOTSTRAP set
nothing is started or stopped; that cluster is used as it is. Every failure is one clear sentence
and a non-zero exit.
"""
from __future__ import annotations

import base64
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

from infra.config import ROOT, Settings, load
from infra.jars import is_complete
from infra.jvm import require_java

TEMPLATE = ROOT / "infra" / "kafka" / "server.properties.template"
LOG4J = ROOT / "infra" / "kafka" / "log4j2.properties"
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30


class BrokerError(SystemExit):
    """A broker problem, said in one sentence."""


def api_versions(host: str, port: int, timeout: float = 2.0) -> int | None:
    """Number of APIs the broker at host:port announces in its ApiVersions answer, or None.

    A raw ApiVersions v0 request: it tells a real, ready Kafka broker from any other listener.
    """
    client = b"cardstream-probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client)) + client
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _read(sock, 4)
            payload = _read(sock, struct.unpack(">i", header)[0])
    except (OSError, struct.error):
        return None
    correlation, error, count = struct.unpack(">ihi", payload[:10])
    if correlation != 7 or error != 0:
        return None
    return count


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _paths(s: Settings) -> dict[str, Path]:
    return {"dir": s.kafka_dir, "data": s.kafka_dir / "data", "config": s.kafka_dir / "server.properties",
            "pid": s.kafka_dir / "broker.pid", "log": s.kafka_dir / "broker.log"}


def broker_pids(s: Settings) -> list[int]:
    """Pids of broker processes started from this run folder (found by their command line)."""
    config = str(_paths(s)["config"])
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kafka.Kafka" in cmd and config.encode() in cmd:
            pids.append(int(proc.name))
    return pids


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    interesting = [l for l in text if " ERROR " in l or "Exception" in l] or text
    return " | ".join(interesting[-lines:])[:500]


def _format_storage(s: Settings, classpath: str) -> None:
    p = _paths(s)
    if (p["data"] / "meta.properties").exists():
        return
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    proc = subprocess.run(["java", "-cp", classpath, f"-Dlog4j2.configurationFile={LOG4J}",
                           "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(p["config"])],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BrokerError(f"Formatting the Kafka storage in {p['data']} failed: "
                          f"{(proc.stderr or proc.stdout).strip()[-300:]}")


def _broker_env() -> dict[str, str]:
    """The environment without CardStream's own settings: the broker outlives whoever started it
    (the supervisor restarts it after `broker-down`) and must not look like part of that run."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CARDSTREAM_")}


def up(s: Settings | None = None, quiet: bool = False) -> str:
    """Start the broker if it is not already running and answering; return the bootstrap address."""
    s = s or load()
    if s.external_bootstrap:
        if not quiet:
            print(f"KAFKA_BOOTSTRAP={s.external_bootstrap}: using that cluster, starting nothing.")
        return s.external_bootstrap
    p = _paths(s)
    ours = broker_pids(s)
    if ours and api_versions("127.0.0.1", s.kafka_port):
        if not quiet:
            print(f"Kafka broker already running on {s.kafka_bootstrap} (pid {ours[0]}).")
        return s.kafka_bootstrap
    if not ours:
        for port in (s.kafka_port, s.kafka_controller_port):
            if _port_open(port):
                if api_versions("127.0.0.1", port):
                    raise BrokerError(
                        f"A Kafka broker that CardStream did not start already listens on 127.0.0.1:{port}; "
                        f"stop it, or use it with KAFKA_BOOTSTRAP=127.0.0.1:{port}.")
                raise BrokerError(
                    f"Port {port} on 127.0.0.1 is taken by another program, so the Kafka broker cannot "
                    f"start; stop that program or pick free ports with KAFKA_PORT / KAFKA_CONTROLLER_PORT.")
    require_java()
    if not is_complete(s.kafka_jars, "kafka"):
        raise BrokerError(f"The Kafka jars in {s.kafka_jars} are missing or incomplete; run `make setup`.")
    classpath = f"{s.kafka_jars}/*"
    if not ours:
        p["data"].mkdir(parents=True, exist_ok=True)
        p["config"].write_text(TEMPLATE.read_text().format(
            port=s.kafka_port, controller_port=s.kafka_controller_port, data_dir=p["data"],
            partitions=s.topics.partitions))
        _format_storage(s, classpath)
        with open(p["log"], "ab") as log:
            proc = subprocess.Popen(
                ["java", f"-Xmx{s.kafka_heap}", f"-Xms{s.kafka_heap}", "-XX:+UseG1GC",
                 "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={LOG4J}",
                 "-cp", classpath, "kafka.Kafka", str(p["config"])],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env=_broker_env())
        p["pid"].write_text(str(proc.pid))
        pid = proc.pid
    else:
        proc, pid = None, ours[0]
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if api_versions("127.0.0.1", s.kafka_port):
            if not quiet:
                print(f"Kafka broker up on {s.kafka_bootstrap} (pid {pid}, log {p['log']}).")
            return s.kafka_bootstrap
        if proc is not None and proc.poll() is not None:
            raise BrokerError(f"The Kafka broker exited during start-up (code {proc.returncode}); "
                              f"{p['log']} ends with: {_tail(p['log'])}")
        time.sleep(0.3)
    raise BrokerError(f"The Kafka broker did not answer on {s.kafka_bootstrap} within "
                      f"{START_TIMEOUT_S} s; see {p['log']}.")


def down(s: Settings | None = None, quiet: bool = False) -> None:
    """Stop our broker cleanly (SIGTERM, controlled shutdown), SIGKILL only if it hangs."""
    s = s or load()
    if s.external_bootstrap:
        if not quiet:
            print(f"KAFKA_BOOTSTRAP={s.external_bootstrap}: not ours to stop.")
        return
    pids = broker_pids(s)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _alive(pid)]
        time.sleep(0.2)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    _paths(s)["pid"].unlink(missing_ok=True)
    if not quiet:
        print("Kafka broker stopped." + (" (It had to be killed.)" if pids else ""))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def status(s: Settings | None = None) -> bool:
    s = s or load()
    host, _, port = s.kafka_bootstrap.split(",")[0].rpartition(":")
    apis = api_versions(host, int(port))
    pids = [] if s.external_bootstrap else broker_pids(s)
    if apis:
        print(f"Kafka answers on {s.kafka_bootstrap}: ApiVersions lists {apis} APIs"
              + (f"; broker pid {pids[0]}." if pids else "."))
        return True
    print(f"No Kafka broker answers on {s.kafka_bootstrap}.")
    return False


def run() -> None:
    s = load()
    up(s)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    while not stop:
        time.sleep(0.5)
    down(s)


def main(argv: list[str]) -> int:
    commands = {"up": lambda: up(), "down": lambda: down(), "status": lambda: status(), "run": run}
    if len(argv) != 1 or argv[0] not in commands:
        print("usage: python -m infra.broker up|down|status|run", file=sys.stderr)
        return 2
    result = commands[argv[0]]()
    return 1 if result is False else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
