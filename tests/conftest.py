"""Shared fixtures: one real Kafka broker and one SparkSession for the whole test session.

Tests live in tiers, one folder each, run fastest first: unit (plain Python and SQLite), spark
(local[2], static input), kafka (the real broker), e2e (real job processes, real crashes),
cluster (a Spark standalone master and workers, three brokers, all on loopback), browser (Chromium);
in make test's lanes the unit tier runs last (`pytest_collection_modifyitems`). Each test is marked with its folder's tier (`pytest -m unit` is
`make test-fast`); a unit test that asks for the broker or Spark fails, saying so.

Tests get their own run folder and ports (unless the environment says otherwise), so a running
demo is never touched, and unique topic names, so tests never read each other's data. Under
`pytest -n 2` (make test) each lane has its own run folder, broker and ports (LANE below).
"""
from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.harness.environment import own_settings  # noqa: E402

# the suite's settings are its own: a CardStream variable the shell exported is removed (and named
# in pytest's header), all but where things are and the ports (tests/harness/environment.py)
FROM_SHELL = own_settings(os.environ)
os.environ.setdefault("CARDSTREAM_RUN_DIR", str(ROOT / ".run" / "test"))
os.environ.setdefault("KAFKA_PORT", "19092")
os.environ.setdefault("KAFKA_CONTROLLER_PORT", "19093")
os.environ.setdefault("SPARK_MASTER", "local[2]")
os.environ.setdefault("SPARK_MASTER_PORT", "17077")      # the cluster tier's master (workers: the next ports)
os.environ.setdefault("SPARK_MASTER_UI_PORT", "18080")
os.environ.setdefault("HDFS_PORT", "39020")               # the cluster tier's HDFS (its NameNode; the next four ports too)
os.environ.setdefault("SPARK_SHUFFLE_PARTITIONS", "2")
os.environ.setdefault("TOPIC_PARTITIONS", "2")
os.environ.setdefault("USAGE_TRIGGER_SECONDS", "1")       # the usage queries as often as the fraud job (5 s in the demo)
os.environ.setdefault("DLQ_TRIGGER_SECONDS", "1")         # the dead-letter query too
os.environ.setdefault("COMPANION_TRIGGER_SECONDS", "5")   # real-time mode's stateful companion (10 s by default)
# Every Spark driver a test starts (the session's, each job's; spark-submit adds this to the JVM's
# command line) compiles with C1 alone: a test's JVM lives seconds to minutes, and C2's compiler
# threads cost more CPU than they give back. Measured on 2 cores, quiet: tests/e2e/test_usage_job.py
# 67 -> 55 s (84 -> 50 CPU-s), test_replay_crash.py and test_poison_batch.py 146 -> 130 s, tests/spark 78 s both.
# Nor does it verify the bytecode of the classes it loads from jars (the 9,000 a fraud job loads
# outside the class archive, whose own were verified as it was written): the jars are Maven
# Central's and PySpark's, and the demo's JVMs verify them. A fraud job's run over 20 transactions
# 11.7-12.5 CPU-s against 12.2-13.0 (bench/RESULTS.md#test-suite)
os.environ.setdefault("SPARK_SUBMIT_OPTS",
                      "-XX:TieredStopAtLevel=1 -XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote")
# ... and so do the executors of the cluster tier's applications (the only tests with executor JVMs)
os.environ.setdefault("SPARK_EXECUTOR_JVM_OPTS", "-XX:TieredStopAtLevel=1")
# The brokers the tests start compile with C1 alone too: over the kafka tier a broker took 8.9-10.4
# CPU-s against 15.9-16.3 with C2 (two runs each, bench/RESULTS.md#test-suite)
os.environ.setdefault("KAFKA_JVM_OPTS", "-XX:TieredStopAtLevel=1")
# ... so a fraud standby rehearses its plans over 32 transactions, not the 6,000 whose per-row code
# the demo's C2 compiles before a takeover (tests/spark/test_rehearsal.py runs the default's)
os.environ.setdefault("STANDBY_REHEARSAL_ROWS", "32")
# `make test` runs two lanes (pytest-xdist's workers gw0, gw1, each test file whole in one of them):
# the second gets a run folder inside the first's and ports 10 higher, so each has its own broker
# (a test that stops its broker stops no other test's) and its own Spark master ports
LANE = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
if LANE:
    os.environ["CARDSTREAM_RUN_DIR"] = str(Path(os.environ["CARDSTREAM_RUN_DIR"]) / f"lane-{LANE}")
    for name in ("KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "SPARK_MASTER_PORT", "SPARK_MASTER_UI_PORT", "HDFS_PORT"):
        os.environ[name] = str(int(os.environ[name]) + 10 * LANE)

import pytest  # noqa: E402

from infra import broker  # noqa: E402
from infra.config import load  # noqa: E402
from infra.topics import ensure_topics  # noqa: E402
from pipelines.engine.session import get_spark  # noqa: E402


def pytest_report_header(config):
    if FROM_SHELL:
        return f"exported in the shell, not used by the tests: {', '.join(FROM_SHELL)}"
    return None


TIERS = ("unit", "spark", "kafka", "e2e", "cluster", "browser")
HEAVY_FIXTURES = {"kafka": "the Kafka broker", "spark": "a SparkSession", "topic": "the Kafka broker"}


def _tier(item) -> str:
    path = Path(str(item.fspath))
    parts = path.relative_to(ROOT / "tests").parts if path.is_relative_to(ROOT / "tests") else ()
    return parts[0] if parts and parts[0] in TIERS else "e2e"


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier and run the tiers fastest first (stable within a tier). In
    make test's lanes the unit tier goes last: its 70-odd files of seconds each fill whichever lane
    is free, so both end together, where the browser tier's two files of a minute or more left one
    lane idle for 30-45 s (two runs, bench/RESULTS.md#test-suite)."""
    for item in items:
        item.add_marker(getattr(pytest.mark, _tier(item)))
    order = TIERS
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a lane (its own `dist` option reads "no")
        order = TIERS[1:] + TIERS[:1]
    items.sort(key=lambda item: order.index(_tier(item)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (make test's lanes) in the tiers' order, a lane taking its next test file
    only once it runs the last test of its current one: xdist's own takes the next while two tests
    are left and reorders files by their number of tests, which left a lane idle for minutes behind
    the other's queued e2e file (the heavy files hold one or two tests each)."""
    if config.getoption("dist") != "loadfile":
        return None
    # deferred: xdist is there only when `-n` is given (make test)
    from xdist.scheduler import LoadFileScheduling

    class OneFileAhead(LoadFileScheduling):
        def _reschedule(self, node):
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    config.option.loadscopereorder = False
    return OneFileAhead(config, log)


def pytest_runtest_setup(item):
    if _tier(item) == "unit":
        heavy = [HEAVY_FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in HEAVY_FIXTURES]
        if heavy:
            pytest.fail(f"{item.nodeid} is a unit test but needs {heavy[0]}: move it to the tier that has it.")


@pytest.fixture(scope="session")
def settings():
    return load()


@pytest.fixture(scope="session")
def kafka(settings):
    """The bootstrap address of a real broker: ours, started once and stopped at the end."""
    started = not settings.external_bootstrap and not broker.broker_pids(settings)
    bootstrap = broker.up(settings, quiet=True)
    yield bootstrap
    if started:
        broker.down(settings, quiet=True)


@pytest.fixture(scope="session")
def spark(settings):
    session = get_spark("cardstream-tests", settings)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def topic(kafka, settings):
    """A factory of fresh, empty topics: `topic("transactions")` -> "transactions-<random>"."""
    def make(prefix: str = "t", partitions: int | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        ensure_topics([name], partitions=partitions, s=settings)
        return name

    return make


@pytest.fixture
def store(tmp_path):
    # deferred: the store (sqlite-utils, pandas) loads only where used
    from controlplane.store import connect

    db = connect(tmp_path / "cardstream.db")
    yield db
    db.conn.close()
