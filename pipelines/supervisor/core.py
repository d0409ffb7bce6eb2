"""The supervisor: runs the jobs as child processes, restarts them, and carries out faults.

    python -m pipelines.supervisor [--jobs fraud,usage] [--with-simulator] [--simulator-args "..."]

It is the one place where `crash`, `broker-down`, `worker-down` and `zombie` happen
(`pipelines.supervisor.faults`); the jobs execute their own in-batch faults and the simulator its
own, all claimed from the store's command table as the fault catalogue says. It restarts a child that exits by the one
restart policy (`pipelines.restarts`), except one that refused to start (exit 2: its store and
checkpoint disagree), which waits for a person. A live auditor runs on a thread beside it.
"""
from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
import time
from dataclasses import dataclass, field

from controlplane import fencing
from controlplane.clock import now_ms
from controlplane.store import connect
from infra import broker, cluster, heap, kafka_client, logs, storage
from infra.config import Settings, load
from infra.contracts import EXIT_REFUSED
from infra.topics import ensure_topics
from pipelines.engine import checkpoints
from pipelines.restarts import Backoff
from pipelines.supervisor.auditor import LiveAuditor
from pipelines.supervisor.faults import FaultExecutor, argv_guarantee, with_guarantee
from pipelines.supervisor.housekeeping import Housekeeper
from pipelines.supervisor.processes import Child, last_line, send, spawn, standby_waits, stop_all

JOB_MODULES = {"fraud": "pipelines.fraud", "usage": "pipelines.usage", "simulator": "simulator"}
SPARK_JOBS = ("fraud", "usage")
log = logging.getLogger("supervisor")


def query_pattern(job: str) -> str:
    """The job's queries in batch_progress (LIKE): the fraud job's decisions query, every usage query."""
    return "usage-%" if job == "usage" else job


def first_batch_pending(db, job: str, pid: int, cap_s: float) -> bool:
    """Whether the job's active (`pid`) has not taken the lease yet, or none of the job's queries has
    committed a batch with rows since it did, less than `cap_s` ago."""
    lease = db.execute("SELECT taken_at, holder FROM leases WHERE job = ?", [job]).fetchone()
    if not lease or lease[0] is None or not str(lease[1]).endswith(f":{pid}"):
        return True
    if now_ms() - lease[0] >= cap_s * 1000:
        return False
    return db.execute("SELECT 1 FROM batch_progress WHERE query LIKE ? AND ts > ? AND num_input_rows > 0 LIMIT 1",
                      [query_pattern(job), lease[0]]).fetchone() is None


@dataclass
class Supervisor:
    s: Settings
    jobs: list[str]
    job_args: dict[str, list[str]] = field(default_factory=dict)
    children: dict[str, Child] = field(default_factory=dict)
    stopping: bool = False
    with_broker: bool = False   # start the local broker first and stop it last (make demo)
    standby: bool = False       # keep a warm standby per Spark job

    def __post_init__(self):
        self.db = connect(s=self.s)
        self.log_dir = self.s.run_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.backoffs: dict[str, Backoff] = {}
        for job in self.jobs:
            argv = [sys.executable, "-m", JOB_MODULES[job], *self.job_args.get(job, [])]
            if job == "fraud":  # its real-time guarantee in its arguments: set-fraud-guarantee replaces it
                argv = with_guarantee(argv, argv_guarantee(argv, self.s))
            known = self.db["job_status"].get(job) if self.db["job_status"].count_where("job = ?", [job]) else {}
            self.children[job] = Child(job, argv, self.log_dir / f"{job}.log", restarts=known.get("restarts") or 0)
            self.backoffs[job] = Backoff(self.s.restart_delay_seconds, self.s.restart_backoff_max_seconds,
                                         window_s=120.0)
        self.standbys: dict[str, Child] = {}
        if self.standby:
            for job in self.jobs:
                if job in SPARK_JOBS:
                    active = self.children[job]
                    # the first standby too waits for its active's first batch: on two cores the
                    # demo's first decision would otherwise wait for four JVMs instead of two
                    self.standbys[job] = Child(f"{job}-standby", active.argv + ["--standby"],
                                               self.log_dir / f"{job}-standby.log", after_first_batch=True,
                                               detail=f"starts after {job}'s first batch")
        self.faults = FaultExecutor(self)
        self.auditor = LiveAuditor(self.s, lambda: self.stopping)
        self.housekeeper = Housekeeper(self.s, self.long_lived, lambda: self.stopping)
        self._last_status = 0.0
        self._topics_ready = False

    # -- children -------------------------------------------------------------------------
    def start(self, child: Child) -> None:
        child.proc = spawn(child.argv, child.log_path)
        child.started_at = time.monotonic()
        child.restart_at = None
        child.status = "running"
        child.detail = f"started pid {child.proc.pid}"
        self._write_status(child)

    def reap(self) -> None:
        for child in self.children.values():
            if child.proc is None or child.proc.poll() is None:
                continue
            code = child.proc.returncode
            lived = time.monotonic() - child.started_at
            child.proc = None
            if code == EXIT_REFUSED and not child.expected_exit:
                child.status, child.restart_at = "refused", float("inf")
                child.detail = f"refused to start: {last_line(child.log_path)}"
                log.error("%s %s", child.job, child.detail)
                self._write_status(child)
                continue
            if not child.expected_exit and child.job != "simulator":
                self.faults.unplanned_exit(child.job, standby=self.ready_standby(child.job) is not None)
            if self.promote(child, f"exited with code {code} after {lived:.0f} s"):
                continue
            delay = (self.s.restart_delay_seconds if child.expected_exit
                     else self.backoffs[child.job].failed())
            child.expected_exit = False
            child.restarts += 1
            child.restart_at = time.monotonic() + delay
            child.status = "restarting"
            child.detail = (f"exited with code {code} after {lived:.0f} s ({last_line(child.log_path)}); "
                            f"restart in {delay:.0f} s")
            log.warning("%s %s", child.job, child.detail)
            self._write_status(child)

    def ready_standby(self, job: str) -> Child | None:
        standby = self.standbys.get(job)
        return standby if standby and standby.proc and standby.proc.poll() is None else None

    def promote(self, active: Child, why: str) -> bool:
        """Hand the job to its warm standby (SIGUSR1: take the lease, start the queries); the old
        active's Child becomes the new standby slot, started again once the new active holds the
        lease. False when there is no live standby."""
        standby = self.ready_standby(active.job)
        if standby is None:
            return False
        send(standby.proc.pid, signal.SIGUSR1)
        old_pid = active.proc.pid if active.proc else None
        active.proc, active.restarts = standby.proc, active.restarts + 1
        active.started_at, active.status, active.expected_exit = standby.started_at, "running", False
        active.log_path = standby.log_path
        active.detail = f"standby pid {standby.proc.pid} took over ({why})"
        # the next standby waits for the takeover's first batch (start_standbys): on two cores its
        # JVM start and rehearsal would otherwise share the CPU with that batch
        standby.proc, standby.status, standby.after_first_batch = None, "starting", True
        standby.detail = "starts after the takeover's first batch"
        standby.log_path = self.log_dir / f"{active.job}-standby-{active.restarts}.log"
        log.warning("%s: %s%s", active.job, active.detail, f"; old pid {old_pid}" if old_pid else "")
        self._write_status(active)
        self._write_status(standby)
        return True

    def start_standbys(self) -> None:
        """A standby starts once its job's active holds a fresh lease (else it would take it) and,
        at the start and after a takeover, once that active's first batch with rows committed or
        STANDBY_START_AFTER_TAKEOVER_MAX_SECONDS passed since it took the lease."""
        for job, standby in self.standbys.items():
            if standby.proc is not None:
                if standby.proc.poll() is not None:  # it died: start another after the delay
                    standby.proc, standby.status = None, "restarting"
                    standby.restart_at = time.monotonic() + self.backoffs[job].failed()
                    standby.detail = f"exited ({last_line(standby.log_path)})"
                    self._write_status(standby)
                continue
            age = fencing.lease_age_ms(self.db, job)
            if self.children[job].proc is None or age is None or age >= 2000:
                continue
            # the cap counts from the lease of the active now running (a takeover's, or a cold restart's)
            pending = first_batch_pending(self.db, job, self.children[job].proc.pid,
                                          self.s.standby_start_after_takeover_max_s)
            if standby_waits(standby, pending, time.monotonic()):
                continue
            self.start(standby)
            standby.after_first_batch = False
            standby.status, standby.detail = "standby", f"warm standby pid {standby.proc.pid}"
            self._write_status(standby)

    def start_due(self) -> None:
        for child in self.children.values():
            if child.proc is None and (child.restart_at is None or time.monotonic() >= child.restart_at):
                if not kafka_client.answers(self.s):
                    child.status, child.detail = "waiting", "waiting for Kafka to answer"
                    child.restart_at = time.monotonic() + 1.0
                    self._write_status(child)
                    continue
                if not self._topics_ready:
                    ensure_topics(s=self.s)
                    self._topics_ready = True
                self.start(child)

    def long_lived(self) -> dict[str, tuple[int, bool]]:
        """{name: (pid, is a PySpark driver)} of the run's processes now, for the housekeeper:
        the broker, each job and standby under its role's name (`fraud`, `fraud-standby`)."""
        out = {}
        if not self.s.external_bootstrap:
            for i, pid in enumerate(broker.broker_pids(self.s)):  # node order
                out["broker" if i == 0 else f"broker-{i + 1}"] = (pid, False)
        if self.s.cluster:
            for pid in cluster.master_pids(self.s):
                out["spark-master"] = (pid, False)
            for i, pid in sorted(cluster.worker_pids(self.s).items()):
                out[f"spark-worker-{i}"] = (pid, False)
        for child in [*list(self.children.values()), *list(self.standbys.values())]:
            proc = child.proc
            if proc is not None and proc.returncode is None:  # no poll(): the loop's thread reaps
                out[child.job] = (proc.pid, child.job.split("-")[0] in SPARK_JOBS)
        return out

    # -- status -----------------------------------------------------------------------------
    def _last_batch(self, job: str) -> int | None:
        pattern = "usage-%" if job == "usage" else job
        row = self.db.execute("SELECT max(batch_id) FROM batch_progress WHERE query LIKE ?", [pattern]).fetchone()
        return row[0] if row else None

    def _write_status(self, child: Child) -> None:
        pid = child.proc.pid if child.proc else None
        self.db["job_status"].upsert({
            "job": child.job, "status": child.status, "pid": pid, "restarts": child.restarts,
            "last_batch": self._last_batch(child.job) if child.job != "simulator" else None,
            "started_at": int((time.time() - (time.monotonic() - child.started_at)) * 1000) if pid else None,
            "updated_at": now_ms(), "detail": child.detail}, pk="job")

    def refresh_status(self) -> None:
        if time.monotonic() - self._last_status < 1.0:
            return
        self._last_status = time.monotonic()
        for job, standby in self.standbys.items():
            if standby.proc and standby.status == "standby":
                row = self.db.execute("SELECT pid FROM standbys WHERE job = ?", [job]).fetchone()
                if row and row[0] == standby.proc.pid:
                    standby.status, standby.detail = "ready", f"warm standby pid {standby.proc.pid}, session up"
        for child in [*self.children.values(), *self.standbys.values()]:
            self._write_status(child)

    # -- lifecycle --------------------------------------------------------------------------
    def report_last_stop(self) -> None:
        """Say whether each job's checkpoints end on a committed batch (a clean stop) or a batch
        Spark will replay (the last run was cut short), from Spark's own logs."""
        for job in self.children:
            if job == "simulator":
                continue
            root = self.s.checkpoint_root
            folders = [root / job / "decisions", root / job / "dlq"] if job == "fraud" else \
                [root / e.name for e in sorted(storage.entries(root), key=lambda e: e.name)
                 if e.is_dir and e.name.startswith(f"{job}-") and not checkpoints.is_instance(e.name)]
            cut = [(f.name if job != "fraud" else f"{job}/{f.name}", checkpoints.position(f)) for f in folders]
            cut = [(name, pos) for name, pos in cut if pos.query_id]
            replays = [f"{name} batch {pos.planned_batch}" for name, pos in cut if pos.uncommitted]
            if not cut:
                log.info("%s: no checkpoint yet, starting fresh", job)
            elif replays:
                log.warning("%s: the last run stopped mid-batch; Spark will replay %s", job, ", ".join(replays))
            else:
                log.info("%s: the last run stopped cleanly (every batch committed); no replay", job)

    def run(self) -> None:
        if self.with_broker:  # with CLUSTER=1 the Spark standalone cluster too (infra.cluster)
            (cluster.up if self.s.cluster else broker.up)(self.s, quiet=True)
        self.report_last_stop()
        self.faults.recover_interrupted()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        log.info("running %s (logs in %s)", ", ".join(self.children), self.log_dir)
        while not self.stopping:
            self.reap()
            self.start_due()
            self.start_standbys()
            self.faults.take_commands()
            self.faults.tend_zombies()
            self.faults.detect_recoveries()
            self.refresh_status()
            self.auditor.start()
            self.housekeeper.start()
            time.sleep(0.2)
        self.shutdown()

    def _on_signal(self, *_):
        self.stopping = True

    def shutdown(self) -> None:
        """Stop every child between batches (SIGTERM), SIGKILL stragglers, record the stop."""
        procs = [c.proc for c in [*self.children.values(), *self.standbys.values()] if c.proc]
        stop_all(procs + self.faults.wake_zombies(), self.s.stop_grace_seconds)
        for child in [*self.children.values(), *self.standbys.values()]:
            child.proc, child.status, child.detail = None, "stopped", "supervisor stopped"
            self._write_status(child)
        if self.with_broker:  # last: the jobs' final commits needed it
            (cluster.down if self.s.cluster else broker.down)(self.s, quiet=True)
        log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    logs.setup()
    heap.fix_thresholds()  # before any thread allocates: the supervisor runs for days
    parser = argparse.ArgumentParser(prog="python -m pipelines.supervisor", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", default="fraud,usage", help="comma-separated jobs to run (fraud, usage)")
    parser.add_argument("--with-simulator", action="store_true", help="also run the simulator")
    parser.add_argument("--with-broker", action="store_true",
                        help="start the local Kafka broker (with CLUSTER=1 the Spark cluster too) first "
                             "and stop it last")
    parser.add_argument("--standby", action="store_true", default=None,
                        help="keep a warm standby per Spark job (default: the STANDBY setting)")
    for job, example in (("fraud", "--mode microbatch"), ("usage", "--guarantee exactly-once"),
                         ("simulator", "--rate 200")):
        parser.add_argument(f"--{job}-args", default="", help=f'arguments for the {job} job, e.g. "{example}"')
    args = parser.parse_args(argv)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = [j for j in jobs if j not in ("fraud", "usage")]
    if unknown:
        parser.error(f"unknown job {unknown[0]!r}: choose from fraud, usage")
    if args.with_simulator:
        jobs.append("simulator")
    job_args = {job: shlex.split(getattr(args, f"{job}_args")) for job in JOB_MODULES}
    s = load()
    Supervisor(s, jobs, job_args, with_broker=args.with_broker,
               standby=s.standby if args.standby is None else args.standby).run()
    return 0
