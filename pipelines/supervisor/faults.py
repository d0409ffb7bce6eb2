"""The faults the supervisor carries out itself (the catalogue's `supervisor` executor): `crash`,
`broker-down`, `worker-down` and `zombie`, claimed from the command table exactly once, with their outcome and
the recovery time they caused recorded in the store."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from controlplane import commands, faults, fencing
from controlplane.clock import now_ms
from infra import broker, cluster, daemons
from infra.contracts import EXIT_FENCED, EXIT_SUPERSEDED
from pipelines.guarantees import RealtimeGuarantee, rt_policy
from pipelines.supervisor.processes import last_error

ZOMBIE_TIMEOUT_S = 120.0
EXECUTOR_GRACE_S = 5.0   # a killed worker's executors exit by themselves within this, or are killed

log = logging.getLogger("supervisor")


def _flag(argv: list[str], name: str) -> str | None:
    """The last value given to `name` in argv (`--name V` or `--name=V`), as argparse keeps it."""
    value = None
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def argv_mode(argv: list[str], s) -> str:
    return _flag(argv, "--mode") or s.fraud_mode


def argv_guarantee(argv: list[str], s) -> RealtimeGuarantee:
    """The real-time guarantee the fraud job's argv (or FRAUD_RT_GUARANTEE) gives it, resolved:
    ValueError for a name that is none."""
    return rt_policy(_flag(argv, "--guarantee") or s.fraud_rt_guarantee)


def with_guarantee(argv: list[str], guarantee: RealtimeGuarantee) -> list[str]:
    """argv with its --guarantee (any form) replaced by this one's name: the job resolves it again."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--guarantee":
            skip = True
            continue
        if a.startswith("--guarantee="):
            continue
        out.append(a)
    return out + ["--guarantee", guarantee.name]


@dataclass
class Zombie:
    """A frozen instance. It is woken once its `seconds` passed AND its replacement holds a newer
    epoch than `epoch` (its own), so it always wakes stale; then it must end by the mechanism —
    its heartbeat sees the lease lost (exit 4), or a write of it is fenced (exit 3) — and
    `deadline` (ZOMBIE_TIMEOUT_S) is only a net for a bug in that mechanism."""
    job: str
    proc: subprocess.Popen
    command_id: int
    resume_at: float
    log_path: Path
    resumed_at: float | None = None
    resumed_ms: int = 0
    deadline: float = 0.0
    epoch: int = 0              # the job's epoch when it was frozen: the zombie's own
    woke_stale: bool = True     # False: woken without a newer epoch (the replacement never took the lease)


@dataclass
class PendingRecovery:
    job: str
    fault: str
    killed_at_ms: int
    command_id: int | None = None
    via: str = "restart"        # "standby": a warm standby was ready to take over


def phases(killed_at: int, lease_at: int | None, batch_end: int, batch_ms: int | None) -> dict:
    """Where a recovery's seconds went: `to_lease_s`, the kill to the new instance holding the
    lease (the supervisor noticing, then a standby promoted or a new driver and JVM started);
    `to_batch_s`, the lease to the start of the first batch with rows (sinks and their Kafka
    producers, planning and starting the queries, the trigger); `batch_s`, that batch itself
    (for a stateful job its state loaded from the checkpoint). None where it cannot be told: a
    lease older than the kill was not taken by the recovering instance."""
    start = batch_end - (batch_ms or 0)
    lease_ok = lease_at is not None and killed_at <= lease_at <= start
    return {"to_lease_s": (lease_at - killed_at) / 1000 if lease_ok else None,
            "to_batch_s": (start - lease_at) / 1000 if lease_ok else None,
            "batch_s": batch_ms / 1000 if batch_ms is not None else None}


def zombie_wakes(z: Zombie, stale: bool, replacement_starting: bool, now: float) -> bool:
    """Whether a frozen zombie is woken now (monotonic `now`): once its `seconds` passed and its
    replacement holds a newer epoch; or, when the replacement is not starting any more (it died)
    or is still starting ZOMBIE_TIMEOUT_S later, anyway (then it wakes as the lease holder)."""
    if z.resumed_at is not None or now < z.resume_at:
        return False
    return stale or not replacement_starting or now >= z.resume_at + ZOMBIE_TIMEOUT_S


def _said(path: Path, needle: str) -> str | None:
    """The last line of a log that says `needle` (its message part), None when none does."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if needle in ln]
    except OSError:
        return None
    return lines[-1].strip()[:300] if lines else None


class FaultExecutor:
    """Carries out the supervisor's faults on the supervisor's children."""

    KINDS = faults.claims(faults.SUPERVISOR)

    def __init__(self, sup):
        self.sup, self.db, self.s = sup, sup.db, sup.s
        self.zombies: list[Zombie] = []
        self.recoveries: list[PendingRecovery] = []
        self._broker_fault: threading.Thread | None = None
        self._worker_faults: dict[int, threading.Thread] = {}

    def recover_interrupted(self) -> None:
        """Commands a previous supervisor claimed but never finished: say so, never re-run them."""
        marks = ",".join("?" for _ in self.KINDS)
        for row in self.db.execute(f"SELECT id FROM commands WHERE status = 'started' AND kind IN ({marks})",
                                   list(self.KINDS)).fetchall():
            commands.finish(self.db, row[0], "interrupted: the supervisor stopped before it finished", ok=False)

    def take_commands(self) -> None:
        for cmd in commands.claim(self.db, self.KINDS):
            try:
                {"crash": self.crash, "broker-down": self.broker_down, "zombie": self.zombie, "worker-down": self.worker_down,
                 "set-fraud-guarantee": self.set_fraud_guarantee}[cmd.kind](cmd)
            except Exception as exc:  # a failed fault is recorded, never fatal to the supervisor
                commands.finish(self.db, cmd.id, f"failed: {exc}", ok=False)

    def _target(self, cmd: commands.Command):
        child = self.sup.children.get(cmd.job)
        if child is None:
            raise ValueError(f"job {cmd.job!r} is not run by this supervisor (it runs {', '.join(self.sup.children)})")
        if child.proc is None:
            raise ValueError(f"job {cmd.job!r} is not running right now ({child.status})")
        return child

    def crash(self, cmd: commands.Command) -> None:
        child = self._target(cmd)
        pid = child.proc.pid
        killed_at = now_ms()
        child.expected_exit = True
        standby = self.sup.ready_standby(child.job)
        os.kill(pid, signal.SIGKILL)
        if child.job != "simulator":
            self.recoveries.append(PendingRecovery(child.job, "crash", killed_at, cmd.id,
                                                   "standby" if standby else "restart"))
        then = (f"warm standby pid {standby.proc.pid} takes over" if standby
                else f"restart in {self.s.restart_delay_seconds:.0f} s")
        commands.finish(self.db, cmd.id, f"SIGKILL sent to {child.job} driver pid {pid}; {then}")

    def set_fraud_guarantee(self, cmd: commands.Command) -> None:
        """Restart the fraud job with the real-time guarantee asked for: its arguments (and its
        standby's) carry it from now on; the standby, started with the old one, is killed (it holds
        no lease and writes nothing) so it cannot take over; the active stops between batches and
        is restarted by `reap` with the new arguments."""
        guarantee = rt_policy(cmd.param("guarantee"))
        child = self._target(cmd)
        if argv_mode(child.argv, self.s) != "realtime":
            raise ValueError("the fraud job runs in micro-batch mode, which has no real-time path; run it in "
                             "real-time mode (FRAUD_MODE=realtime) to choose that path's guarantee")
        was = argv_guarantee(child.argv, self.s)
        child.argv = with_guarantee(child.argv, guarantee)
        standby = self.sup.standbys.get(child.job)
        if standby is not None:
            standby.argv = with_guarantee(standby.argv, guarantee)
            if standby.proc is not None and standby.proc.poll() is None:
                try:
                    os.killpg(standby.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                standby.proc.wait()
            standby.proc, standby.status = None, "restarting"
            standby.restart_at = time.monotonic() + self.s.restart_delay_seconds
        child.expected_exit = True
        os.kill(child.proc.pid, signal.SIGTERM)
        commands.finish(self.db, cmd.id, f"fraud job pid {child.proc.pid} stopping; it restarts with {guarantee} "
                                         f"on its real-time path (was {was})")

    def broker_down(self, cmd: commands.Command) -> None:
        if self.s.external_bootstrap:
            raise ValueError(f"the broker at {self.s.external_bootstrap} is not ours to stop")
        if self._broker_fault and self._broker_fault.is_alive():
            raise ValueError("the broker is already down for another broker-down command")
        seconds = float(cmd.param("seconds"))
        node, n = cmd.param("node"), self.s.kafka_brokers
        if node is not None and not 0 <= int(node) < n:
            raise ValueError(f"there is no broker node {node}: the cluster has {n} "
                             f"({f'nodes 0–{n - 1}' if n > 1 else 'node 0 only'})")
        node = None if node is None else int(node)
        # one node of several: the others keep the quorum and every partition's in-sync replicas
        what = (f"broker node {node} (127.0.0.1:{self.s.kafka_node_ports[node][0]})" if node is not None and n > 1
                else "broker" if n == 1 else f"all {n} brokers")

        def outage():
            started = time.monotonic()
            broker.down(self.s, quiet=True, node=node)
            stopped_after = time.monotonic() - started
            time.sleep(seconds)
            broker.up(self.s, quiet=True, node=node)
            commands.finish(self.db, cmd.id, f"{what} stopped ({stopped_after:.1f} s to stop), down for "
                                             f"{seconds:.0f} s, answering again")

        # The broker is started detached (its own session), so starting it from a thread is safe.
        self._broker_fault = threading.Thread(target=outage, name="broker-down", daemon=True)
        self._broker_fault.start()

    def worker_down(self, cmd: commands.Command) -> None:
        """SIGKILL one Spark worker, as if its machine were lost, and start it again after N seconds.
        Its executors exit within a second on their own (each watches its worker and exits when the
        connection drops); any still alive after EXECUTOR_GRACE_S is killed, and the outcome says so."""
        if not self.s.spark_master.startswith("spark://"):
            raise ValueError(f"the jobs run on a local Spark master ({self.s.spark_master}), which has no worker "
                             f"to stop; run the demo on the cluster with CLUSTER=1")
        i, seconds, n = int(cmd.param("worker")), float(cmd.param("seconds")), self.s.spark_workers
        if not 0 <= i < n:
            raise ValueError(f"there is no Spark worker {i}: the cluster has {n} (0–{n - 1})")
        if i in self._worker_faults and self._worker_faults[i].is_alive():
            raise ValueError(f"Spark worker {i} is already down for another worker-down command")
        if i not in cluster.worker_pids(self.s):
            raise ValueError(f"Spark worker {i} is not running here (the cluster is not ours, or the worker is down)")
        try:
            pid, executors = cluster.kill_worker(self.s, i)
        except cluster.ClusterError as exc:  # a SystemExit: never let it end the supervisor
            raise ValueError(str(exc)) from None

        def outage():
            try:
                deadline = time.monotonic() + EXECUTOR_GRACE_S
                while time.monotonic() < deadline and any(daemons.alive(p) for p in executors):
                    time.sleep(0.1)
                stragglers = [p for p in executors if daemons.alive(p)]
                for p in stragglers:
                    daemons.send_signal(p, signal.SIGKILL)
                time.sleep(max(0.0, seconds - EXECUTOR_GRACE_S))
                t0 = time.monotonic()
                cluster.start_worker(self.s, i)
                doc = cluster.wait_alive(self.s, [i])
                gone = (f"its {len(executors)} executor(s) exited with it" if not stragglers
                        else f"{len(stragglers)} of its {len(executors)} executor(s) outlived it and were killed")
                used = cluster.worker_states(doc, self.s)[i].cores_used
                commands.finish(self.db, cmd.id, f"Spark worker {i} pid {pid} SIGKILLed, {gone}; down for "
                                                 f"{seconds:.0f} s, ALIVE again {time.monotonic() - t0:.1f} s after "
                                                 f"its restart ({used} core(s) in use on it)")
            except (Exception, cluster.ClusterError) as exc:  # noqa: BLE001 - recorded; the supervisor goes on
                commands.finish(self.db, cmd.id, f"failed: Spark worker {i} pid {pid} was killed but did not "
                                                 f"come back: {exc}", ok=False)

        # The worker is started detached (its own session), so starting it from a thread is safe.
        self._worker_faults[i] = threading.Thread(target=outage, name=f"worker-down-{i}", daemon=True)
        self._worker_faults[i].start()

    def zombie(self, cmd: commands.Command) -> None:
        """Freeze the running instance, start a replacement, then let the frozen one wake up stale."""
        child = self._target(cmd)
        seconds = float(cmd.param("seconds"))
        old = child.proc
        holder = self.db.execute("SELECT holder FROM leases WHERE job = ?", [child.job]).fetchone()
        if not holder or not str(holder[0]).endswith(f":{old.pid}"):
            raise ValueError(f"{child.job} pid {old.pid} has not taken the job's lease yet (it is still starting), "
                             f"and a zombie is an instance that held it; issue the fault once the job runs")
        epoch = fencing.current_epoch(self.db, child.job)
        os.killpg(old.pid, signal.SIGSTOP)  # like a long GC pause or a suspended VM
        # the replacement (the warm standby if there is one) takes a newer lease: the frozen one is stale
        if not self.sup.promote(child, f"pid {old.pid} frozen as a zombie"):
            child.proc = None
            self.sup.start(child)
            child.detail = f"replacement pid {child.proc.pid} started; pid {old.pid} frozen as a zombie"
        now = time.monotonic()
        self.zombies.append(Zombie(child.job, old, cmd.id, now + seconds, child.log_path,
                                   deadline=now + seconds + ZOMBIE_TIMEOUT_S, epoch=epoch))
        log.warning("zombie: froze %s pid %s, replacement pid %s", child.job, old.pid, child.proc.pid)

    def tend_zombies(self) -> None:
        for z in list(self.zombies):
            now = time.monotonic()
            if z.resumed_at is None and now >= z.resume_at:
                # not before the replacement holds the lease (a cold start on a loaded machine can
                # take longer than `seconds`): woken earlier, the zombie would still be the holder.
                # A replacement that died (it could not take the lease: the zombie was frozen
                # inside a store write, holding SQLite's write lock) is not waited for.
                z.woke_stale = fencing.current_epoch(self.db, z.job) > z.epoch
                child = self.sup.children.get(z.job)
                starting = (child is not None and child.proc is not None and child.proc is not z.proc
                            and child.proc.poll() is None)
                if not zombie_wakes(z, z.woke_stale, starting, now):
                    continue
                os.killpg(z.proc.pid, signal.SIGCONT)
                z.resumed_at = now
                z.resumed_ms = now_ms()
                z.deadline = now + ZOMBIE_TIMEOUT_S
                continue
            if z.resumed_at is None:
                continue
            code = z.proc.poll()
            if code is None and now < z.deadline:
                continue
            if code is None:
                z.proc.kill()
                z.proc.wait()
            rejected = self.db.execute("SELECT count(*) FROM rejected_writes WHERE job = ? AND ts >= ?",
                                       [z.job, z.resumed_ms]).fetchone()[0]
            if code == EXIT_FENCED or rejected:
                result = (f"zombie pid {z.proc.pid} woke with a stale epoch: {rejected} write(s) rejected "
                          f"by fencing; it exited with code {code}")
            elif code == EXIT_SUPERSEDED and z.woke_stale:
                result = (f"zombie pid {z.proc.pid} woke with a stale epoch ({z.epoch}; the job's is "
                          f"{fencing.current_epoch(self.db, z.job)}) and exited (code 4) before writing: "
                          f"{_said(z.log_path, 'no longer holds the lease') or last_error(z.log_path)}")
            elif not z.woke_stale:
                result = (f"zombie pid {z.proc.pid} was woken still holding the job's epoch ({z.epoch}): its "
                          f"replacement had not taken the lease (it exited, or was still starting "
                          f"{ZOMBIE_TIMEOUT_S:.0f} s later); it exited with code {code}")
            elif code is None:
                result = f"zombie pid {z.proc.pid} still running after {ZOMBIE_TIMEOUT_S:.0f} s: killed"
            else:
                result = (f"zombie pid {z.proc.pid} was stopped by Spark before it could write "
                          f"(exit code {code}): {last_error(z.log_path)}")
            commands.finish(self.db, z.command_id, result,
                            ok=z.woke_stale and (bool(rejected) or code == EXIT_FENCED or code not in (None, 0)))
            self.zombies.remove(z)

    def wake_zombies(self) -> list[subprocess.Popen]:
        """At shutdown: let frozen instances run again so they can be stopped."""
        for z in self.zombies:
            try:
                os.killpg(z.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        return [z.proc for z in self.zombies]

    def unplanned_exit(self, job: str, standby: bool, within_ms: int = 30_000) -> None:
        """A job exited without the supervisor's SIGKILL: measure its recovery too, under the
        in-job fault that just ran for it (crash-after-sink's own kill), or as an `exit`."""
        at = now_ms()
        kinds = faults.claims(faults.JOB)
        marks = ",".join("?" for _ in kinds)
        row = self.db.execute(f"SELECT id, kind FROM commands WHERE job = ? AND kind IN ({marks}) AND status = 'done' "
                              f"AND done_at >= ? ORDER BY done_at DESC LIMIT 1", [job, *kinds, at - within_ms]).fetchone()
        self.recoveries.append(PendingRecovery(job, row[1] if row else "exit", at, row[0] if row else None,
                                               "standby" if standby else "restart"))

    def detect_recoveries(self) -> None:
        for rec in list(self.recoveries):
            pattern = "usage-%" if rec.job == "usage" else rec.job
            row = self.db.execute("SELECT ts, duration_ms FROM batch_progress WHERE query LIKE ? AND ts > ? "
                                  "AND num_input_rows > 0 ORDER BY ts LIMIT 1", [pattern, rec.killed_at_ms]).fetchone()
            if row:
                lease = self.db.execute("SELECT taken_at FROM leases WHERE job = ?", [rec.job]).fetchone()
                self.db["recoveries"].insert({"job": rec.job, "fault": rec.fault, "killed_at": rec.killed_at_ms,
                                              "recovered_at": row[0],
                                              "seconds": (row[0] - rec.killed_at_ms) / 1000,
                                              "via": rec.via, "command_id": rec.command_id,
                                              **phases(rec.killed_at_ms, lease[0] if lease else None, row[0], row[1])})
                self.recoveries.remove(rec)
            elif now_ms() - rec.killed_at_ms > 600_000:
                self.recoveries.remove(rec)
