"""A Spark standalone cluster on loopback, with the Kafka brokers: `make cluster-up` / `make cluster-down`.

    python -m infra.cluster up | down | status

`up` starts Kafka (`infra.broker.up`) and, with HDFS on (CLUSTER=1), HDFS (`infra.hdfs.up`: a
NameNode and a DataNode holding every checkpoint and state store), then a Spark standalone Master and SPARK_WORKERS Workers,
each a detached JVM of its own (its own session, so a worker can be SIGKILLed and restarted by
the `worker-down` fault without taking anything else with it), started through PySpark's own
`spark-class`, with logs and work folders under the run folder's `cluster/`. It returns once the
master reports every worker ALIVE. It is idempotent: what of ours already runs is left alone.
`down` stops the workers (and their executors), the master, then HDFS and Kafka.

Jobs reach the master with CLUSTER=1 (SPARK_MASTER=spark://127.0.0.1:SPARK_MASTER_PORT); they
ship their jars and Python packages with the application (pipelines/engine/session.py), as on a
real cluster. Every process binds to 127.0.0.1: the master's and workers' UIs have no login.

Our processes are found by their command line: each names this run's `cluster/spark.conf`
(master) or its own work folder (workers), as infra/broker.py finds its broker.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra import broker, daemons, hdfs
from infra.config import Settings, load
from infra.jvm import require_java

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 20
MASTER_GONE_S = 1.0  # not found this long (two looks or more) during a start: it exited
DAEMON_HEAP = "256m"   # the master's and each worker's own JVM (executors are sized by the apps)
# what the master and workers run with: no REST submission server (one port less, and no
# unauthenticated submissions), and a worker cleans up the folders of applications long gone
DAEMON_CONF = {
    "spark.master.rest.enabled": "false",
    "spark.worker.cleanup.enabled": "true",
    "spark.worker.cleanup.appDataTtl": "86400",
    "spark.deploy.retainedApplications": "50",
    "spark.ui.killEnabled": "false",
    # a taken port is an error, not a silent move to the next one (where nobody would look)
    "spark.port.maxRetries": "0",
}


class ClusterError(SystemExit):
    """A cluster problem, said in one sentence."""


@dataclass(frozen=True)
class WorkerState:
    index: int          # which of ours (by its UI port), -1 for one we did not start
    worker_id: str
    state: str          # ALIVE, DEAD, DECOMMISSIONED, UNKNOWN
    cores: int
    cores_used: int
    memory_mb: int


# -- pure: commands, ports, the master's JSON ---------------------------------------------------------
def spark_class() -> Path:
    # deferred: pyspark (and its JVM) loads only where Spark runs
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def conf_path(s: Settings) -> Path:
    return s.cluster_dir / "spark.conf"


def worker_dir(s: Settings, i: int) -> Path:
    return s.cluster_dir / f"worker-{i}"


def worker_port(s: Settings, i: int) -> int:
    return s.spark_master_port + 1 + i


def worker_ui_port(s: Settings, i: int) -> int:
    return s.spark_master_ui_port + 1 + i


def master_ui(s: Settings) -> str:
    return f"http://127.0.0.1:{s.spark_master_ui_port}"


def ports(s: Settings) -> list[int]:
    """Every port the cluster listens on: the master's two, then each worker's two."""
    out = [s.spark_master_port, s.spark_master_ui_port]
    for i in range(s.spark_workers):
        out += [worker_port(s, i), worker_ui_port(s, i)]
    return out


def master_command(s: Settings) -> list[str]:
    return [str(spark_class()), MASTER_CLASS, "--host", "127.0.0.1", "--port", str(s.spark_master_port),
            "--webui-port", str(s.spark_master_ui_port), "--properties-file", str(conf_path(s))]


def worker_command(s: Settings, i: int) -> list[str]:
    return [str(spark_class()), WORKER_CLASS, "--host", "127.0.0.1", "--port", str(worker_port(s, i)),
            "--webui-port", str(worker_ui_port(s, i)), "--cores", str(s.spark_worker_cores),
            "--memory", s.spark_worker_memory, "--work-dir", str(worker_dir(s, i)),
            "--properties-file", str(conf_path(s)), s.spark_master_url]


def daemon_env(s: Settings, env: dict | None = None) -> dict[str, str]:
    """The master's and workers' environment: loopback only, a small heap, and neither CardStream's
    settings nor its source on PYTHONPATH (executors get the code the application ships, as on a
    real cluster; and a daemon outlives whoever started it, like the broker)."""
    env = dict(os.environ if env is None else env)
    out = {k: v for k, v in env.items()
           if not k.startswith(("CARDSTREAM_", "SPARK_", "PYSPARK_")) and k != "PYTHONPATH"}
    out.update({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": DAEMON_HEAP,
                "SPARK_LOG_DIR": str(s.cluster_dir)})
    return out


def worker_states(doc: dict, s: Settings) -> dict[int, WorkerState]:
    """Our workers as the master's /json/ lists them, by index (the newest registration of each:
    a worker restarted after a kill is listed twice, DEAD then ALIVE)."""
    by_port = {worker_ui_port(s, i): i for i in range(s.spark_workers)}
    out: dict[int, WorkerState] = {}
    for w in doc.get("workers", []):
        try:
            port = int(str(w.get("webuiaddress", "")).rsplit(":", 1)[1])
        except (IndexError, ValueError):
            continue
        i = by_port.get(port, -1)
        state = WorkerState(i, w.get("id", ""), w.get("state", "UNKNOWN"), int(w.get("cores", 0)),
                            int(w.get("coresused", 0)), int(w.get("memory", 0)))
        if i >= 0 and (i not in out or state.state == "ALIVE" or out[i].state != "ALIVE"):
            out[i] = state
    return out


def alive_workers(doc: dict, s: Settings) -> list[int]:
    return sorted(i for i, w in worker_states(doc, s).items() if w.state == "ALIVE")


def executor_apps(worker_doc: dict) -> list[str]:
    """The application of each executor a worker runs now (its UI's /json/)."""
    return [e.get("appid", "") for e in worker_doc.get("executors", [])]


# -- I/O ----------------------------------------------------------------------------------------------
def _json(url: str, timeout: float) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.load(resp)
    except (OSError, ValueError):
        return None


def master_json(s: Settings, timeout: float = 2.0) -> dict | None:
    """The master's state (its UI's /json/), or None when it does not answer."""
    return _json(f"{master_ui(s)}/json/", timeout)


def worker_json(s: Settings, i: int, timeout: float = 2.0) -> dict | None:
    """Worker `i`'s state (its UI's /json/: cores, executors), or None when it does not answer."""
    return _json(f"http://127.0.0.1:{worker_ui_port(s, i)}/json/", timeout)


def master_pids(s: Settings) -> list[int]:
    conf = str(conf_path(s)).encode()
    return [pid for pid, cmd in daemons.command_lines() if MASTER_CLASS.encode() in cmd and conf in cmd]


def worker_pids(s: Settings) -> dict[int, int]:
    """{worker index: pid} of our running workers (found by their work folder)."""
    dirs = {str(worker_dir(s, i)).encode(): i for i in range(s.spark_workers)}
    out = {}
    for pid, cmd in daemons.command_lines():
        if WORKER_CLASS.encode() in cmd:
            for arg in cmd:
                if arg in dirs:
                    out[dirs[arg]] = pid
    return out


def executor_pids(s: Settings, worker: int | None = None) -> list[int]:
    """Executors running in our workers' folders (a worker starts each in its own work folder),
    all of them or the given worker's."""
    roots = [worker_dir(s, i) for i in (range(s.spark_workers) if worker is None else [worker])]
    out = []
    for pid, cmd in daemons.command_lines():
        if EXECUTOR_CLASS.encode() not in cmd:
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if any(cwd == r or r in cwd.parents for r in roots):
            out.append(pid)
    return out


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _spawn(cmd: list[str], log: Path, s: Settings) -> int:
    with open(log, "wb") as out:  # one log per start: its last lines are this start's
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=daemon_env(s), cwd=str(s.cluster_dir))
    return proc.pid


def _tail(path: Path) -> str:
    return daemons.tail(path) or "(nothing)"


def start_worker(s: Settings, i: int) -> int:
    """Start worker `i` (not waiting for it to register); its pid."""
    for port in (worker_port(s, i), worker_ui_port(s, i)):
        if _port_open(port):
            raise ClusterError(f"Port {port} on 127.0.0.1 is taken by another program, so Spark worker {i} "
                               f"cannot start; stop that program or move the cluster with SPARK_MASTER_PORT / "
                               f"SPARK_MASTER_UI_PORT.")
    worker_dir(s, i).mkdir(parents=True, exist_ok=True)
    return _spawn(worker_command(s, i), s.cluster_dir / f"worker-{i}.log", s)


@dataclass
class Lookout:
    """A process looked for again and again: gone only once not found for `gone_s`. Why: one look
    can miss it, as the master's start execs three times (env, bash, java) and a process in the
    middle of an exec shows no command line for that moment."""
    gone_s: float = MASTER_GONE_S
    missed_at: float | None = None  # when it was first not found, since it was last found

    def gone(self, found: bool, now: float) -> bool:
        if found:
            self.missed_at = None
            return False
        if self.missed_at is None:
            self.missed_at = now
        return now - self.missed_at >= self.gone_s


def wait_alive(s: Settings, workers: list[int], timeout: float = START_TIMEOUT_S) -> dict:
    """Wait until the master answers and lists each of `workers` ALIVE; its JSON."""
    deadline = time.monotonic() + timeout
    doc = None
    master = Lookout()
    while time.monotonic() < deadline:
        doc = master_json(s)
        if doc and doc.get("status") == "ALIVE" and set(workers) <= set(alive_workers(doc, s)):
            return doc
        if master.gone(bool(master_pids(s)), time.monotonic()):
            raise ClusterError(f"The Spark master exited during start-up; {s.cluster_dir / 'master.log'} "
                               f"ends with: {_tail(s.cluster_dir / 'master.log')}")
        time.sleep(0.5)
    if doc is None:
        raise ClusterError(f"The Spark master did not answer on {master_ui(s)} within {timeout:.0f} s; "
                           f"{s.cluster_dir / 'master.log'} ends with: {_tail(s.cluster_dir / 'master.log')}")
    missing = sorted(set(workers) - set(alive_workers(doc, s)))
    log = s.cluster_dir / f"worker-{missing[0]}.log"
    raise ClusterError(f"Spark worker {missing[0]} did not register with the master within {timeout:.0f} s; "
                       f"{log} ends with: {_tail(log)}")


def _in_background(fn, *args) -> concurrent.futures.Future:
    """`fn(*args)` on a thread of its own; its future (the thread ends with it)."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)


def up(s: Settings | None = None, quiet: bool = False, kafka: bool = True) -> str:
    """Start Kafka (unless `kafka` is False), HDFS (with `s.hdfs`), the master and the missing
    workers; the master's URL. A start that fails stops the Spark processes it started (not Kafka
    or HDFS) before it says why."""
    s = s or load()
    t0 = time.monotonic()
    masters, workers = master_pids(s), worker_pids(s)
    taken = [p for p in ports(s)[:2] if not masters and _port_open(p)]
    if taken:  # said before anything starts, so a refused start leaves nothing running
        raise ClusterError(f"Port {taken[0]} on 127.0.0.1 is taken by another program, so the Spark master "
                           f"cannot start; stop that program or pick free ports with SPARK_MASTER_PORT / "
                           f"SPARK_MASTER_UI_PORT.")
    if kafka:
        broker.up(s, quiet=quiet)
    # HDFS starts beside the Spark daemons (each waits on its own JVMs: ~10 s saved on two cores)
    hdfs_start = _in_background(hdfs.up, s, quiet) if s.hdfs else None
    s.cluster_dir.mkdir(parents=True, exist_ok=True)
    require_java()
    conf_path(s).write_text("".join(f"{k} {v}\n" for k, v in DAEMON_CONF.items()))
    started: dict[str, int] = {}
    try:
        if not masters:
            started["master"] = _spawn(master_command(s), s.cluster_dir / "master.log", s)
        for i in range(s.spark_workers):
            if i not in workers:
                started[f"worker {i}"] = start_worker(s, i)
        doc = wait_alive(s, list(range(s.spark_workers)))
        if hdfs_start is not None:
            hdfs_start.result()  # raises its HdfsError, if it failed
    except (ClusterError, hdfs.HdfsError):
        daemons.stop(list(started.values()), 5)
        if hdfs_start is not None:
            concurrent.futures.wait([hdfs_start])  # not left half-started behind the error
        raise
    if not quiet:
        what = f"started {', '.join(started)}" if started else "already running"
        print(f"Spark master {s.spark_master_url} ({what}; {time.monotonic() - t0:.1f} s): "
              f"{len(alive_workers(doc, s))} workers ALIVE with {doc.get('cores')} cores and "
              f"{doc.get('memory')} MB; UI {master_ui(s)}, logs in {s.cluster_dir}.")
    return s.spark_master_url


def kill_worker(s: Settings, i: int) -> tuple[int, list[int]]:
    """SIGKILL worker `i` (no clean shutdown: a machine lost); (its pid, its executors' pids then)."""
    pid = worker_pids(s).get(i)
    if pid is None:
        raise ClusterError(f"Spark worker {i} is not running.")
    executors = executor_pids(s, i)
    daemons.send_signal(pid, signal.SIGKILL)
    return pid, executors


def down(s: Settings | None = None, quiet: bool = False, kafka: bool = True) -> None:
    """Stop the workers (a worker stops its executors), the master, stray executors, then HDFS
    (whatever HDFS of this run folder runs, whether or not `s.hdfs` says so: nothing left behind)
    and Kafka."""
    s = s or load()
    killed = daemons.stop(list(worker_pids(s).values()), STOP_TIMEOUT_S)
    killed |= daemons.stop(master_pids(s), STOP_TIMEOUT_S)
    killed |= daemons.stop(executor_pids(s), 5)
    if s.hdfs or any(hdfs.pids(s).values()):
        hdfs.down(s, quiet=quiet)
    if kafka:
        broker.down(s, quiet=quiet)
    if not quiet:
        print("Spark cluster stopped." + (" (Something had to be killed.)" if killed else ""))


def status(s: Settings | None = None) -> bool:
    s = s or load()
    doc = master_json(s)
    if not doc:
        print(f"No Spark master answers on {master_ui(s)}.")
        return False
    states = worker_states(doc, s)
    print(f"Spark master {doc.get('url')} {doc.get('status')}: {doc.get('aliveworkers')} workers alive, "
          f"{doc.get('coresused')}/{doc.get('cores')} cores used; {len(doc.get('activeapps', []))} applications.")
    for i in range(s.spark_workers):
        w = states.get(i)
        print(f"  worker {i}: " + (f"{w.state}, {w.cores_used}/{w.cores} cores, {w.memory_mb} MB" if w else "not registered"))
    for app in doc.get("activeapps", []):
        print(f"  application {app.get('id')} {app.get('name')}: {app.get('state')}, {app.get('cores')} cores")
    broker.status(s)
    if s.hdfs:
        return hdfs.status(s)
    return True


def main(argv: list[str]) -> int:
    commands = {"up": lambda: up(), "down": lambda: down(), "status": lambda: status()}
    if len(argv) != 1 or argv[0] not in commands:
        print("usage: python -m infra.cluster up|down|status", file=sys.stderr)
        return 2
    return 1 if commands[argv[0]]() is False else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
