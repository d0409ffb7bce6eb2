"""The Spark standalone cluster's pure parts: the daemons' command lines and ports, the master's
JSON read into worker states, an application's executor settings, the Python zip it ships, and
the Overview's link to the master's UI."""
from __future__ import annotations

import socket
import time
import zipfile
from types import SimpleNamespace

import pytest

from controlplane import commands
from controlplane.store import connect
from dashboard.data import overview
from infra import cluster, hdfs
from infra.config import load
from pipelines.engine.session import cluster_conf, memory_mb, on_loopback_cluster, python_zip
from pipelines.supervisor.faults import FaultExecutor
from tests.unit.test_dashboard_pages import db_path, dead_broker, seed, text_of  # noqa: F401 - fixtures

ENV = {"CARDSTREAM_RUN_DIR": "/tmp/cs-test-run", "CLUSTER": "1", "SPARK_MASTER_PORT": "17077",
       "SPARK_MASTER_UI_PORT": "18080", "SPARK_WORKERS": "2", "SPARK_WORKER_CORES": "4",
       "SPARK_WORKER_MEMORY": "2g"}


@pytest.fixture
def s():
    return load(ENV)


def test_master_and_worker_command_lines(s):
    assert s.spark_master == s.spark_master_url == "spark://127.0.0.1:17077"
    master = cluster.master_command(s)
    assert master[0].endswith("pyspark/bin/spark-class") and master[1] == cluster.MASTER_CLASS
    assert master[2:] == ["--host", "127.0.0.1", "--port", "17077", "--webui-port", "18080",
                          "--properties-file", "/tmp/cs-test-run/cluster/spark.conf"]
    worker = cluster.worker_command(s, 1)
    assert worker[1:] == [cluster.WORKER_CLASS, "--host", "127.0.0.1", "--port", "17079", "--webui-port", "18082",
                          "--cores", "4", "--memory", "2g", "--work-dir", "/tmp/cs-test-run/cluster/worker-1",
                          "--properties-file", "/tmp/cs-test-run/cluster/spark.conf", "spark://127.0.0.1:17077"]
    assert cluster.ports(s) == [17077, 18080, 17078, 18081, 17079, 18082]


def test_daemons_get_loopback_and_no_project_environment(s):
    env = cluster.daemon_env(s, {"PATH": "/bin", "PYTHONPATH": "/work/main", "CARDSTREAM_RUN_DIR": "/x",
                                 "SPARK_MASTER": "local[2]", "PYSPARK_PYTHON": "/p", "JAVA_HOME": "/j"})
    assert env == {"PATH": "/bin", "JAVA_HOME": "/j", "SPARK_LOCAL_IP": "127.0.0.1",
                   "SPARK_DAEMON_MEMORY": cluster.DAEMON_HEAP, "SPARK_LOG_DIR": "/tmp/cs-test-run/cluster"}


def _worker(port, state, used=0, wid="w"):
    return {"id": wid, "webuiaddress": f"http://127.0.0.1:{port}", "state": state, "cores": 4,
            "coresused": used, "memory": 2048}


def test_worker_states_from_the_master_json(s):
    doc = {"status": "ALIVE", "workers": [
        _worker(18081, "DEAD", wid="old-0"), _worker(18082, "ALIVE", 2, "w1"), _worker(18081, "ALIVE", 1, "new-0"),
        _worker(9999, "ALIVE", wid="not-ours"), {"id": "no-ui", "state": "ALIVE"}]}
    states = cluster.worker_states(doc, s)
    assert sorted(states) == [0, 1]
    assert (states[0].worker_id, states[0].state, states[0].cores_used) == ("new-0", "ALIVE", 1)
    assert cluster.alive_workers(doc, s) == [0, 1]
    # the restarted one listed before its dead predecessor: still the live one
    doc["workers"] = [_worker(18081, "ALIVE", wid="new-0"), _worker(18081, "DEAD", wid="old-0")]
    assert cluster.worker_states(doc, s)[0].worker_id == "new-0" and cluster.alive_workers(doc, s) == [0]
    doc["workers"] = [_worker(18081, "DEAD")]
    assert cluster.alive_workers(doc, s) == [] and cluster.alive_workers({}, s) == []


def test_executor_apps_of_a_worker():
    doc = {"executors": [{"id": 0, "appid": "app-1"}, {"id": 3, "appid": "app-2"}],
           "finishedexecutors": [{"id": 1, "appid": "app-1"}]}
    assert cluster.executor_apps(doc) == ["app-1", "app-2"] and cluster.executor_apps({}) == []


@pytest.mark.parametrize("text,mb", [("2g", 2048), ("512m", 512), ("1024k", 1), ("1G", 1024), ("1048576", 1)])
def test_memory_mb(text, mb):
    assert memory_mb(text) == mb


def test_memory_mb_refuses_nonsense():
    with pytest.raises(SystemExit, match="not a memory size"):
        memory_mb("lots")


def test_an_application_takes_one_core_per_worker_and_that_core_s_memory(s, tmp_path):
    conf = cluster_conf(s, tmp_path / "code.zip")
    assert conf["spark.executor.cores"] == "1" and conf["spark.cores.max"] == "2"
    assert conf["spark.executor.memory"] == "512m"            # 2g over 4 cores
    assert conf["spark.submit.pyFiles"] == str(tmp_path / "code.zip")
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    remote = load({**ENV, "SPARK_MASTER": "spark://10.0.0.5:7077"})
    assert not on_loopback_cluster(remote) and "spark.driver.host" not in cluster_conf(remote, tmp_path)


def test_python_zip_holds_the_packages_and_is_named_by_content(tmp_path):
    root = tmp_path / "tree"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (root / "pkg" / "data.jar").write_bytes(b"\0")
    first = python_zip(tmp_path / "out", root, ("pkg",))
    assert zipfile.ZipFile(first).namelist() == ["pkg/__init__.py", "pkg/mod.py"]
    assert python_zip(tmp_path / "out", root, ("pkg",)) == first          # the same tree: the same file
    (root / "pkg" / "mod.py").write_text("X = 2\n")
    second = python_zip(tmp_path / "out", root, ("pkg",))
    assert second != first and sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([first.name, second.name])


def test_overview_links_the_master_ui_only_on_the_local_cluster(s):
    assert overview.cluster_ui(s) == "http://127.0.0.1:18080"
    assert overview.cluster_ui(load({**ENV, "CLUSTER": "0"})) is None
    assert overview.cluster_ui(load({**ENV, "SPARK_MASTER": "spark://10.0.0.5:7077"})) is None


def test_overview_page_shows_the_master_ui_link(db_path, dead_broker, monkeypatch):
    # deferred: plotly only where a chart is drawn
    from tests.unit.test_dashboard_first_minute import _page

    seed(db_path)
    monkeypatch.setenv("CLUSTER", "1")
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    monkeypatch.setenv("SPARK_MASTER_UI_PORT", "18080")
    at = _page()
    assert not at.exception, at.exception
    assert "[http://127.0.0.1:18080](http://127.0.0.1:18080)" in text_of(at)
    monkeypatch.setenv("CLUSTER", "0")
    assert "standalone cluster" not in text_of(_page())


def test_a_taken_master_port_is_one_sentence(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        s = load({**ENV, "CARDSTREAM_RUN_DIR": str(tmp_path), "SPARK_MASTER_PORT": str(port)})
        with pytest.raises(cluster.ClusterError, match=rf"^Port {port} on 127.0.0.1 is taken by another program, "
                                                        r"so the Spark master cannot start; .*SPARK_MASTER_PORT"):
            cluster.up(s, quiet=True, kafka=False)
    assert not cluster.master_pids(s) and not cluster.worker_pids(s)
    assert s.hdfs and not any(hdfs.pids(s).values())  # refused before HDFS started


@pytest.mark.parametrize("env,worker,says", [
    ({"CLUSTER": "0", "SPARK_MASTER": "local[2]"}, 0,
     "failed: the jobs run on a local Spark master (local[2]), which has no worker to stop; run the demo on the "
     "cluster with CLUSTER=1"),
    ({}, 2, "failed: there is no Spark worker 2: the cluster has 2 (0–1)"),
    ({}, 1, "failed: Spark worker 1 is not running here (the cluster is not ours, or the worker is down)"),
])
def test_worker_down_is_refused_in_one_sentence(tmp_path, env, worker, says):
    db = connect(tmp_path / "store.db")
    s = load({**ENV, "CARDSTREAM_RUN_DIR": str(tmp_path), **env})
    ex = FaultExecutor(SimpleNamespace(db=db, s=s))
    cid = commands.issue(db, "worker-down", worker=worker)
    ex.take_commands()
    row = commands.get(db, cid)
    assert (row["status"], row["result"]) == (commands.FAILED, says)


def test_a_process_missed_by_one_look_is_not_gone_until_missed_for_a_second():
    """The master's start execs three times (env, bash, java): one look at /proc can miss it."""
    look = cluster.Lookout(gone_s=1.0)
    assert not look.gone(False, 10.0) and not look.gone(True, 10.5)  # missed once, then found
    assert not look.gone(False, 11.0) and not look.gone(False, 11.5)  # missed again: half a second
    assert look.gone(False, 12.0)  # a second without it


def test_a_master_that_never_started_is_said_gone_with_its_log(tmp_path):
    """No master process and nothing answering on its UI port (a free one): `wait_alive` says so,
    with the log's end, a second after its first look, not at the timeout."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        ui_port = sock.getsockname()[1]
    s = load({**ENV, "CARDSTREAM_RUN_DIR": str(tmp_path), "SPARK_MASTER_UI_PORT": str(ui_port)})
    s.cluster_dir.mkdir(parents=True)
    (s.cluster_dir / "master.log").write_text("Error: Could not find or load main class\n")
    t0 = time.monotonic()
    with pytest.raises(cluster.ClusterError, match=r"exited during start-up; .*ends with: Error: Could not find"):
        cluster.wait_alive(s, [0], timeout=60)
    assert cluster.MASTER_GONE_S <= time.monotonic() - t0 < 10
