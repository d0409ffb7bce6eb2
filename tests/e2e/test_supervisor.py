"""The supervisor on real Kafka and Spark: crash and recovery time, broker-down, zombie fencing,
commands executed exactly once across a supervisor restart, clean shutdown with nothing orphaned.

One supervisor runs the usage job (its three guarantee queries) and the live auditor for the whole module
while a producer writes decisions; the tests run in order against it. The crash is pressed in the
running dashboard, in Debian's Chromium.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from controlplane import commands, ledger
from controlplane.store import connect
from infra import kafka_client
from infra.config import ROOT
from pipelines.guarantees import policy
from tests.harness.browser import SHOTS, chromium, settle, streamlit

pytestmark = pytest.mark.timeout(900)


def wait_for(what, predicate, timeout=120.0, every=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def procs_with_env(name: str, value: str) -> list[int]:
    """Pids of live processes whose environment has name=value (children, grandchildren, JVMs)."""
    needle = f"{name}={value}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                state = (proc / "stat").read_text().split()[2]
                if state != "Z":
                    found.append(int(proc.name))
        except OSError:
            continue
    return found


class Producer:
    """Writes decisions with unique txn_ids at a steady pace until stopped; counts acks."""

    def __init__(self, topic: str, rate: float = 150.0):
        self.topic, self.rate = topic, rate
        self.prefix = uuid.uuid4().hex[:6]  # a second producer must not repeat the first one's ids
        # idempotent and patient: it rides out the broker-down fault without losing or repeating
        self.producer = kafka_client.producer(None, acks="all", retries=1_000_000, enable_idempotence=True,
                                              delivery_timeout_ms=300_000, request_timeout_ms=10_000, linger_ms=5)
        self.acked = 0
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _ack(self, _):
        self.acked += 1

    def run(self):
        i = 0
        while not self.stop_flag.is_set():
            now = int(time.time() * 1000)
            for _ in range(int(self.rate / 10)):
                i += 1
                decision = {"txn_id": f"tx-{self.prefix}-{i}", "card_id": f"c-{i % 50}", "merchant_id": "m",
                            "amount_cents": 1000, "event_time": now, "produced_at": now,
                            "decided_at": now, "score_avg_ticket": 0.0, "score_proximity": 0.0,
                            "score_velocity": 0.0, "score": 0.0, "is_fraud": i % 10 == 0, "is_late": False}
                self.producer.send(self.topic, key=decision["txn_id"].encode(),
                                   value=json.dumps(decision).encode()).add_callback(self._ack)
            time.sleep(0.1)

    def stop(self):
        if self.stop_flag.is_set():
            return
        self.stop_flag.set()
        self.thread.join()
        self.producer.flush(timeout=300)
        self.producer.close()


def distinct_in_topic(topic: str) -> int:
    return len({json.loads(m.value)["txn_id"]
                for m in kafka_client.read_to_end(topic, isolation_level="read_uncommitted")})


class Supervised:
    def __init__(self, env: dict, log: Path):
        self.env, self.log = env, log
        self.proc: subprocess.Popen | None = None
        self.db = connect(env["CARDSTREAM_DB"])

    def start(self):
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipelines.supervisor", "--jobs", "usage",
                 "--usage-args=--no-windows"],
                env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    def status(self, job="usage"):
        return self.db["job_status"].get(job) if self.db["job_status"].count_where("job = ?", [job]) else None

    def eo_processed(self) -> int:
        rows = list(self.db.query("SELECT processed FROM usage_counts WHERE guarantee = 'exactly-once'"))
        return rows[0]["processed"] if rows else 0

    def wait_command(self, command_id, timeout=180.0):
        return wait_for(f"command {command_id} to finish",
                        lambda: (lambda r: r if r["status"] in ("done", "failed") else None)(
                            self.db["commands"].get(command_id)), timeout)


@pytest.fixture(scope="module")
def supervised(kafka, topic, settings, tmp_path_factory):
    work = tmp_path_factory.mktemp("supervised")
    decisions = topic("decisions")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_DB": str(work / "cardstream.db"),
           "CHECKPOINT_ROOT": str(work / "checkpoints"), "TOPIC_DECISIONS": decisions,
           "TOPIC_TRANSACTIONS": topic("transactions"), "TOPIC_LABELS": topic("labels"),
           "TRIGGER_SECONDS": "0.5", "RESTART_DELAY_SECONDS": "1", "AUDIT_INTERVAL_SECONDS": "2",
           "CARDSTREAM_RUN_DIR": str(settings.run_dir), "KAFKA_PORT": str(settings.kafka_port),
           "KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port)}
    sup = Supervised(env, work / "supervisor.log")
    sup.producer = Producer(decisions)
    sup.producer.thread.start()
    sup.decisions = decisions
    sup.start()
    yield sup
    if sup.proc and sup.proc.poll() is None:
        sup.proc.kill()
    sup.producer.stop_flag.set()
    for pid in procs_with_env("CARDSTREAM_DB", env["CARDSTREAM_DB"]):
        os.kill(pid, signal.SIGKILL)
    print((work / "supervisor.log").read_text()[-3000:])


def first_batch_with_rows(sup) -> bool:
    return bool(sup.db.execute("SELECT count(*) FROM batch_progress WHERE query = 'usage-exactly-once' "
                               "AND num_input_rows > 0").fetchone()[0])


def test_runs_the_job_and_records_its_status(supervised):
    wait_for("the usage job's first batch", lambda: first_batch_with_rows(supervised), timeout=180)
    status = supervised.status()
    assert status["status"] == "running" and status["pid"] and status["restarts"] == 0
    assert supervised.eo_processed() > 0


def eo_on_page(page) -> int:
    """The exactly-once count shown on the Guarantees page (its metric card)."""
    card = page.locator("[data-testid=stMetric]").filter(has_text="exactly-once").first
    return int(card.locator("[data-testid=stMetricValue]").inner_text().replace(",", ""))


def test_crash_pressed_in_the_dashboard_is_recovered_and_shown(supervised, tmp_path):
    old_pid = supervised.status()["pid"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    with streamlit(supervised.env, tmp_path / "streamlit.log") as base, chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(f"{base}/guarantees")
        page.locator("[data-testid=stMetric]").filter(has_text="exactly-once").first.wait_for(timeout=120_000)
        before = eo_on_page(page)

        page.goto(f"{base}/faults")
        shown = time.monotonic()
        # drawn once the page's script has run: beside the job and the broker on a slower host it
        # took more than 30 s (CI, 2026-11-28); reported, not held to a number
        page.locator(".st-key-job_crash button[aria-label=Open]").wait_for(timeout=180_000)
        print(f"the faults page showed its crash control {time.monotonic() - shown:.1f} s after it loaded")
        page.locator(".st-key-job_crash button[aria-label=Open]").click()
        page.get_by_role("option", name="usage", exact=True).click()
        page.locator(".st-key-inject_crash button").click()
        page.get_by_text("issued: crash on usage").first.wait_for(timeout=120_000)
        command_id = supervised.db.execute("SELECT max(id) FROM commands WHERE kind = 'crash'").fetchone()[0]
        row = supervised.wait_command(command_id, timeout=120)
        assert row["status"] == "done" and f"pid {old_pid}" in row["result"]
        recovery = wait_for("a recovery record", lambda: list(supervised.db["recoveries"].rows), timeout=180)[0]
        assert recovery["job"] == "usage" and recovery["fault"] == "crash" and recovery["seconds"] > 0
        status = supervised.status()
        assert status["restarts"] == 1 and status["pid"] != old_pid and status["status"] == "running"
        page.get_by_text("Recovery times").first.wait_for(timeout=120_000)
        page.get_by_text("Checkpoints & state").first.wait_for(timeout=120_000)  # the app's own navigation
        page.screenshot(path=str(SHOTS / "live-faults.png"), full_page=True)

        page.goto(f"{base}/guarantees")
        page.get_by_text("crash on usage at").first.wait_for(timeout=120_000)
        wait_for("the page's exactly-once count to move on after the recovery",
                 lambda: eo_on_page(page) > before, timeout=120, every=1)
        markers = lambda: page.locator(".js-plotly-plot .annotation-text").evaluate_all(  # noqa: E731
            "els => els.map(e => e.textContent || '')")
        wait_for("the crash marked on the error chart", lambda: any("crash" in m for m in markers()),
                 timeout=120, every=1)
        page.get_by_text("Checkpoints & state").first.wait_for(timeout=120_000)
        settle(page)  # drawn and still
        page.screenshot(path=str(SHOTS / "live-guarantees-after-crash.png"), full_page=True)


def eo_applied_twice(sup) -> list[tuple]:
    """(checkpoint, batch) keys the exactly-once sink applied more than once (must be none)."""
    keys = [(r["checkpoint_id"], r["batch_id"]) for r in ledger.batches(sup.db, policy("exactly-once").query)
            if r["outcome"] == ledger.APPLIED]
    return sorted({k for k in keys if keys.count(k) > 1})


def test_broker_down_for_10_s_loses_nothing_under_exactly_once(supervised, kafka):
    command_id = commands.issue(supervised.db, "broker-down", seconds=10)  # the broker, not a job
    row = supervised.wait_command(command_id, timeout=120)
    assert row["status"] == "done", row["result"]
    before = supervised.eo_processed()
    wait_for("batches after the outage", lambda: supervised.eo_processed() > before, timeout=180)
    supervised.producer.stop()
    truth = distinct_in_topic(supervised.decisions)
    assert truth >= supervised.producer.acked > 0
    wait_for(f"exactly-once to reach the truth ({truth})", lambda: supervised.eo_processed() >= truth, 180)
    time.sleep(3)  # a duplicate batch would land now
    assert supervised.eo_processed() == truth
    assert eo_applied_twice(supervised) == []


def test_zombie_writes_are_rejected(supervised, kafka):
    # a zombie is an instance that held the lease (at once when the tests before this one ran)
    wait_for("the usage job's first batch", lambda: first_batch_with_rows(supervised), timeout=180)
    supervised.producer.stop()
    before = supervised.eo_processed()
    command_id = commands.issue(supervised.db, "zombie", "usage", seconds=15)
    # Fresh input while the zombie is frozen, so it wakes up with a batch to write.
    producer = Producer(supervised.decisions)
    producer.thread.start()
    time.sleep(20)
    producer.stop()
    row = supervised.wait_command(command_id, timeout=300)
    print(f"zombie: {row['result']}")
    rejected = supervised.db["rejected_writes"].count
    assert row["status"] == "done", row["result"]
    # woken only once its replacement held the lease, it ends by the mechanism, whatever the load:
    # a write of it fenced (3), or its heartbeat finding the lease lost (4) - never the 120 s net
    assert "woke with a stale epoch" in row["result"] or "stopped by Spark" in row["result"], row["result"]
    assert "killed" not in row["result"], row["result"]
    if "rejected by fencing" in row["result"]:
        assert rejected >= 1
        [last] = list(supervised.db.query("SELECT * FROM rejected_writes ORDER BY id DESC LIMIT 1"))
        assert last["job"] == "usage" and last["epoch"] < last["current_epoch"]
    truth = distinct_in_topic(supervised.decisions)
    wait_for("exactly-once to reach the truth after the zombie",
             lambda: supervised.eo_processed() >= truth, timeout=180)
    assert supervised.eo_processed() == truth > before
    # nothing the zombie wrote after waking reached the ledger: no batch was applied twice, and a
    # rejected epoch has no ledger row later than the first one of a newer epoch
    assert eo_applied_twice(supervised) == []
    rows = ledger.batches(supervised.db, policy("exactly-once").query)
    for (stale,) in supervised.db.execute("SELECT DISTINCT epoch FROM rejected_writes WHERE job = 'usage'"):
        newer = [r["ts"] for r in rows if r["epoch"] > stale]
        assert newer and all(r["ts"] <= min(newer) for r in rows if r["epoch"] == stale), stale


def test_a_command_runs_exactly_once_across_a_supervisor_kill(supervised):
    done_before = supervised.db["commands"].count_where("status = 'done'")
    child_pid, restarts_before = supervised.status()["pid"], supervised.status()["restarts"]
    supervised.proc.send_signal(signal.SIGKILL)
    supervised.proc.wait()
    # PR_SET_PDEATHSIG: the job dies with its supervisor, and so does its Spark JVM.
    wait_for("the job and its JVM to die with the supervisor",
             lambda: not procs_with_env("CARDSTREAM_DB", supervised.env["CARDSTREAM_DB"]), timeout=60)
    command_id = commands.issue(supervised.db, "crash", "usage")  # issued while nobody listens
    supervised.start()
    wait_for("the restarted supervisor to run the job",
             lambda: (supervised.status() or {}).get("pid") not in (None, child_pid), timeout=60)
    row = supervised.wait_command(command_id, timeout=120)
    assert row["status"] == "done"
    time.sleep(3)
    runs = supervised.db["commands"].count_where("status = 'done'")
    assert runs == done_before + 1  # the new one ran once; the old ones did not run again
    assert supervised.db["commands"].count_where("status IN ('pending', 'started')") == 0
    # counted on from the killed supervisor's record (not from 0), whatever the tests before left there
    assert supervised.status()["restarts"] == restarts_before + 1


def test_sigterm_stops_everything_cleanly(supervised):
    supervised.proc.send_signal(signal.SIGTERM)
    assert supervised.proc.wait(timeout=60) == 0
    assert not procs_with_env("CARDSTREAM_DB", supervised.env["CARDSTREAM_DB"])
    assert supervised.status()["status"] == "stopped"
