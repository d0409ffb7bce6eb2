"""HDFS on loopback for the local cluster: one NameNode and one DataNode from Hadoop's own jars.

    python -m infra.hdfs up | down | status

`make cluster-up` starts it (infra.cluster) and `make cluster-down` stops it; with CLUSTER=1 every
checkpoint and state store of both jobs lives on it (infra.config: the checkpoint root is
hdfs://127.0.0.1:HDFS_PORT/cardstream/checkpoints). The jars are Maven Central's
hadoop-client-minicluster at PySpark's Hadoop version (infra/hadoop/pom.xml, fetched by
`make setup`): the NameNode's and DataNode's own main classes, each a detached JVM of its own
session, like the brokers, so a test or a fault can stop one without the other.

Everything is under the run folder's `hdfs/`: `conf/` (core-site.xml and hdfs-site.xml, first on
the class path, which is also how our processes are found by their command line), `name/` (the
NameNode's metadata, formatted on the first start), `data/` (the DataNode's blocks) and one log
per daemon. Ports: HDFS_PORT (the NameNode's RPC, the file system URI's), HDFS_PORT + 1 (the
NameNode's web UI and WebHDFS, which the Python side reads checkpoints through), HDFS_PORT + 2..4
(the DataNode's data transfer, HTTP and IPC). All bind to 127.0.0.1; permissions are off (one
user, loopback only) and blocks are kept once (one DataNode).

`up` returns once the NameNode has left safe mode and lists the DataNode live; it is idempotent.
`down` stops both (SIGTERM, then SIGKILL if they hang). Each failure is one sentence.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

from infra import daemons
from infra.config import Settings, load
from infra.jars import is_complete
from infra.jvm import require_java

NAMENODE_CLASS = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE_CLASS = "org.apache.hadoop.hdfs.server.datanode.DataNode"
DAEMONS = {"namenode": NAMENODE_CLASS, "datanode": DATANODE_CLASS}
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 20


class HdfsError(SystemExit):
    """An HDFS problem, said in one sentence."""


# -- pure: ports, configuration, commands ------------------------------------------------------------
def ports(s: Settings) -> dict[str, int]:
    """Every port the local HDFS listens on, by what it is."""
    p = s.hdfs_port
    return {"namenode rpc": p, "namenode http": p + 1, "datanode data": p + 2, "datanode http": p + 3,
            "datanode ipc": p + 4}


def web_url(s: Settings) -> str:
    """The NameNode's web address (its UI, JMX and WebHDFS)."""
    return f"http://127.0.0.1:{ports(s)['namenode http']}"


def conf_dir(s: Settings) -> Path:
    return s.hdfs_dir / "conf"


def site_properties(s: Settings) -> dict[str, dict[str, str]]:
    """core-site.xml's and hdfs-site.xml's properties: loopback ports, folders under the run folder,
    and what a single-DataNode file system on a small machine needs."""
    pt, d = ports(s), s.hdfs_dir
    core = {"fs.defaultFS": s.hdfs_uri, "hadoop.tmp.dir": str(d / "tmp")}
    hdfs = {
        "dfs.namenode.name.dir": str(d / "name"), "dfs.datanode.data.dir": str(d / "data"),
        "dfs.namenode.rpc-address": f"127.0.0.1:{pt['namenode rpc']}",
        "dfs.namenode.http-address": f"127.0.0.1:{pt['namenode http']}",
        "dfs.datanode.address": f"127.0.0.1:{pt['datanode data']}",
        "dfs.datanode.http.address": f"127.0.0.1:{pt['datanode http']}",
        "dfs.datanode.ipc.address": f"127.0.0.1:{pt['datanode ipc']}",
        "dfs.datanode.hostname": "127.0.0.1",
        "dfs.namenode.secondary.http-address": "127.0.0.1:0",
        "dfs.replication": "1", "dfs.permissions.enabled": "false", "dfs.webhdfs.enabled": "true",
        # out of safe mode as soon as the DataNode has reported its blocks, not 30 s later
        "dfs.namenode.safemode.extension": "0", "dfs.namenode.safemode.min.datanodes": "1",
        "dfs.heartbeat.interval": "1", "dfs.namenode.handler.count": "10", "dfs.datanode.handler.count": "4",
    }
    return {"core-site.xml": core, "hdfs-site.xml": hdfs}


def site_xml(props: dict[str, str]) -> str:
    """Hadoop's configuration file format for `props`."""
    rows = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                   for k, v in props.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


def classpath(s: Settings) -> str:
    """Our configuration first (Hadoop reads *-site.xml from the class path), then the jars."""
    return f"{conf_dir(s)}:{s.jars_dir / 'hadoop'}/*"


def command(s: Settings, main_class: str, *args: str) -> list[str]:
    return ["java", f"-Xmx{s.hdfs_heap}", *s.hdfs_jvm_opts, "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath(s), main_class, *args]


def client_conf(s: Settings) -> dict[str, str]:
    """What a Spark application writing to this HDFS sets: blocks kept once (one DataNode), and a
    write pipeline that does not look for a second DataNode to replace a failed one."""
    return {"spark.hadoop.dfs.replication": "1",
            "spark.hadoop.dfs.client.block.write.replace-datanode-on-failure.enable": "false"}


def is_ours(s: Settings, uri: str) -> bool:
    """Whether `uri` names the HDFS `up` starts."""
    return uri == s.hdfs_uri or uri.startswith(s.hdfs_uri + "/")


# -- I/O ----------------------------------------------------------------------------------------------
def pids(s: Settings) -> dict[str, list[int]]:
    """{"namenode": pids, "datanode": pids} of our daemons, found by their class path (it names
    this run folder's conf/) and main class."""
    conf = str(conf_dir(s)).encode()
    out: dict[str, list[int]] = {name: [] for name in DAEMONS}
    for pid, cmd in daemons.command_lines():
        if not any(arg.startswith(conf + b":") for arg in cmd):
            continue
        for name, cls in DAEMONS.items():
            if cls.encode() in cmd:
                out[name].append(pid)
    return out


def _jmx(s: Settings, bean: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{web_url(s)}/jmx?qry=Hadoop:service=NameNode,name={bean}", timeout=2) as r:
            beans = json.load(r).get("beans") or [{}]
            return beans[0]
    except (OSError, ValueError):
        return None


def state(s: Settings) -> dict | None:
    """The NameNode's view: {"safemode": text ("" when off), "live_datanodes": n}, None when it
    does not answer."""
    info, fs = _jmx(s, "NameNodeInfo"), _jmx(s, "FSNamesystemState")
    if info is None or fs is None:
        return None
    return {"safemode": info.get("Safemode", "?"), "live_datanodes": int(fs.get("NumLiveDataNodes", 0))}


def ready(st: dict | None) -> bool:
    return bool(st) and st["safemode"] == "" and st["live_datanodes"] >= 1


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _env() -> dict[str, str]:
    """The daemons outlive whoever started them: none of CardStream's settings in their environment."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CARDSTREAM_")}


def _spawn(s: Settings, name: str) -> int:
    with open(s.hdfs_dir / f"{name}.log", "wb") as log:  # one log per start
        proc = subprocess.Popen(command(s, DAEMONS[name]), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=_env(),
                                cwd=str(s.hdfs_dir))
    return proc.pid


def _format(s: Settings) -> None:
    """Format the NameNode's metadata folder on the first start (an existing one is kept)."""
    if (s.hdfs_dir / "name" / "current" / "VERSION").exists():
        return
    proc = subprocess.run(command(s, NAMENODE_CLASS, "-format", "-nonInteractive", "-force"),
                          capture_output=True, text=True, env=_env(), cwd=str(s.hdfs_dir))
    if proc.returncode != 0:
        raise HdfsError(f"Formatting HDFS's NameNode in {s.hdfs_dir / 'name'} failed: "
                        f"{(proc.stderr or proc.stdout).strip()[-300:]}")


def _write_conf(s: Settings) -> None:
    conf_dir(s).mkdir(parents=True, exist_ok=True)
    for name, props in site_properties(s).items():
        (conf_dir(s) / name).write_text(site_xml(props))


def up(s: Settings | None = None, quiet: bool = False) -> str:
    """Start the NameNode and the DataNode not already running; the file system's URI once the
    NameNode is out of safe mode with the DataNode live. A failed start stops what it started."""
    s = s or load()
    t0 = time.monotonic()
    running = pids(s)
    todo = [name for name in DAEMONS if not running[name]]
    for name in todo:
        for what, port in ports(s).items():
            if what.startswith(name) and _port_open(port):
                raise HdfsError(f"Port {port} on 127.0.0.1 ({what}) is taken by another program, so HDFS's "
                                f"{name} cannot start; stop that program or move HDFS with HDFS_PORT.")
    if todo:
        require_java()
        if not is_complete(s.jars_dir / "hadoop", "hadoop"):
            raise HdfsError(f"The HDFS jars in {s.jars_dir / 'hadoop'} are missing or incomplete; run `make setup`.")
        s.hdfs_dir.mkdir(parents=True, exist_ok=True)
        _write_conf(s)
        _format(s)
    started = {name: _spawn(s, name) for name in todo}
    try:
        _wait_ready(s, started)
    except HdfsError:
        daemons.stop(list(started.values()), 5)
        raise
    if not quiet:
        what = f"started {' and '.join(todo)}" if todo else "already running"
        print(f"HDFS {s.hdfs_uri} ({what}; {time.monotonic() - t0:.1f} s): WebHDFS and UI {web_url(s)}, "
              f"files and logs in {s.hdfs_dir}.")
    return s.hdfs_uri


def _wait_ready(s: Settings, started: dict[str, int]) -> None:
    """Wait until the NameNode is out of safe mode with a DataNode live; HdfsError when a daemon
    we `started` ({name: pid}) exits meanwhile, or at the timeout."""
    deadline = time.monotonic() + START_TIMEOUT_S
    st = None
    while time.monotonic() < deadline:
        st = state(s)
        if ready(st):
            return
        for name, pid in started.items():
            if not daemons.alive(pid):
                log = s.hdfs_dir / f"{name}.log"
                raise HdfsError(f"HDFS's {name} exited during start-up; {log} ends with: "
                                f"{daemons.tail(log) or '(nothing)'}")
        time.sleep(0.3)
    if st is None:
        raise HdfsError(f"HDFS's NameNode did not answer on {web_url(s)} within {START_TIMEOUT_S} s; "
                        f"see {s.hdfs_dir / 'namenode.log'}.")
    raise HdfsError(f"HDFS did not become ready within {START_TIMEOUT_S} s (safe mode: {st['safemode'] or 'off'}, "
                    f"{st['live_datanodes']} DataNode live); see {s.hdfs_dir / 'datanode.log'}.")


def down(s: Settings | None = None, quiet: bool = False) -> None:
    """Stop the DataNode and the NameNode (SIGTERM at once, SIGKILL after STOP_TIMEOUT_S)."""
    s = s or load()
    found = pids(s)
    killed = daemons.stop([p for name in DAEMONS for p in found[name]], STOP_TIMEOUT_S)
    if not quiet:
        print("HDFS stopped." + (" (It had to be killed.)" if killed else ""))


def status(s: Settings | None = None) -> bool:
    s = s or load()
    st, found = state(s), pids(s)
    running = ", ".join(f"{name} pid {p[0]}" for name, p in found.items() if p) or "no daemon running"
    if st is None:
        print(f"No HDFS NameNode answers on {web_url(s)} ({running}).")
        return False
    print(f"HDFS {s.hdfs_uri}: safe mode {st['safemode'] or 'off'}, {st['live_datanodes']} DataNode(s) live; "
          f"{running}.")
    return ready(st)


USAGE = "usage: python -m infra.hdfs up|down|status"


def main(argv: list[str]) -> int:
    commands = {"up": lambda: up(), "down": lambda: down(), "status": lambda: status()}
    if len(argv) != 1 or argv[0] not in commands:
        print(USAGE, file=sys.stderr)
        return 2
    return 1 if commands[argv[0]]() is False else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
