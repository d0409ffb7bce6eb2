"""In-job fault hooks: the faults a job process carries out itself, between its sink write and
Spark's commit. Which kinds a job claims comes from the fault catalogue
(`controlplane.faults.claims(JOB, job)`); a driver thread claims them from the command table and
arms the hooks, and the sinks consult them in foreachBatch:

- `crash-after-sink [guarantee=...]`: after the sink write of the target query's next non-empty
  batch (usage default: at-least-once when it runs, where the replay shows), the command is
  marked done and then the process SIGKILLs itself, before Spark commits the batch.
- `sink-down seconds=N`: the shared SinkGate rejects every sink write for N seconds.
- `task-failure [guarantee=...]`: the next non-empty batch of each targeted query (default: every
  query) raises inside a Spark task (F.raise_error in the batch's plan).
- `poison-pill` (fraud): the job sends itself a valid transaction (`send_poison`, set by the job)
  and, from then on, its per-record logic raises `PoisonPillError` on every batch that holds it,
  as a bug meeting one record would: the same batch fails the same way on every replay until the
  poison-batch rule dead-letters the record (`poison_done` then finishes the command).
"""
from __future__ import annotations

import logging
import os
import signal
import threading

from controlplane import commands, faults
from controlplane.store import connect
from pipelines.guarantees import AT_LEAST_ONCE, SinkGate

log = logging.getLogger(__name__)


class PoisonPillError(RuntimeError):
    """What the poison-pill fault's transaction makes the fraud job's code raise."""


class Faults:
    """Armed hooks of one job process; thread-safe, checked by every query's foreachBatch.

    `queries` are the targets a `guarantee` parameter may name (the usage job's guarantees); a
    job without them (fraud) has one target, its own name.
    """

    def __init__(self, store_path, queries: list[str], gate: SinkGate | None = None, job: str = "usage"):
        self.store_path = store_path
        self.queries = list(queries)
        self.gate = gate or SinkGate()
        self.job = job
        self._lock = threading.Lock()
        self._crash: tuple[int, str] | None = None       # (command id, target query)
        self._task_failures: dict[str, int] = {}          # target query -> command id
        self._poison: dict[str, int] = {}                  # poison txn_id -> command id
        self._model: tuple[int, int] | None = None         # (command id, model version) to switch to
        self.send_poison = None                            # job-supplied: send(txn_id) a valid transaction
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- arming ---------------------------------------------------------------------------------
    def apply(self, db, command: commands.Command) -> None:
        """Arm one claimed command (pure bookkeeping plus its `finish` when there is nothing to wait for)."""
        target = command.param("guarantee")
        if target and target not in self.queries:
            commands.finish(db, command.id, f"no {target} query runs in this usage job", ok=False)
            return
        with self._lock:
            if command.kind == "crash-after-sink":
                default = AT_LEAST_ONCE if AT_LEAST_ONCE in self.queries else self.queries[0]
                self._crash = (command.id, target or default)
            elif command.kind == "task-failure":
                for name in [target] if target else self.queries:
                    self._task_failures[name] = command.id
            elif command.kind == "poison-pill":
                self._poison[f"poison-pill-{command.id}"] = command.id  # armed before it can be read
            elif command.kind == "use-model":
                self._model = (command.id, int(command.param("version")))
            elif command.kind == "sink-down":
                seconds = float(command.param("seconds"))
                self.gate.take_down(seconds)
                commands.finish(db, command.id, f"sink rejects writes for {seconds:g} s")
                log.warning("%s: sink down for %g s", self.job, seconds)

        if command.kind == "poison-pill":
            self._send_poison(db, command.id)

    def _send_poison(self, db, command_id: int) -> None:
        txn_id = f"poison-pill-{command_id}"
        try:
            if self.send_poison is None:
                raise RuntimeError(f"the {self.job} job cannot send a poison pill")
            self.send_poison(txn_id)
        except Exception as exc:  # noqa: BLE001 - the command fails, the job goes on
            with self._lock:
                self._poison.pop(txn_id, None)
            commands.finish(db, command_id, f"could not send the poison transaction: {exc}", ok=False)
            return
        log.warning("%s: poison-pill: sent transaction %s, which the job's code fails on", self.job, txn_id)

    def poll_once(self, db) -> int:
        claimed = commands.claim(db, faults.claims(faults.JOB, self.job), job=self.job)
        for command in claimed:
            self.apply(db, command)
        return len(claimed)

    def start(self, interval: float = 0.25) -> None:
        def run():
            db = connect(self.store_path)
            while not self._stop.wait(interval):
                try:
                    self.poll_once(db)
                except Exception as exc:  # noqa: BLE001 - a busy store must not kill the poller
                    log.warning("%s: fault poller: %s", self.job, exc)
        self._thread = threading.Thread(target=run, name=f"{self.job}-faults", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def take_model_switch(self) -> tuple[int, int] | None:
        """(command id, version) of a use-model command not yet carried out, once."""
        with self._lock:
            switch, self._model = self._model, None
            return switch

    # -- consulted by the sinks -------------------------------------------------------------------
    def take_task_failure(self, query: str) -> int | None:
        with self._lock:
            return self._task_failures.pop(query, None)

    def rearm_task_failure(self, query: str, command_id: int) -> None:
        """An empty batch raises nothing: keep the hook for the next batch."""
        with self._lock:
            self._task_failures.setdefault(query, command_id)

    def task_failure_done(self, db, query: str, command_id: int, batch_id: int) -> None:
        with self._lock:
            pending = command_id in self._task_failures.values()
        if not pending:
            commands.finish(db, command_id, f"{query} batch {batch_id} failed inside a task")

    def check_poison(self, txn_ids) -> None:
        """Raise PoisonPillError when one of these transactions is an armed poison pill (called by
        the job's per-record logic, in the stream and when the rule isolates records alike)."""
        with self._lock:
            if not self._poison:
                return
            hit = next((t for t in txn_ids if t in self._poison), None)
            command_id = self._poison.get(hit) if hit is not None else None
        if hit is not None:
            raise PoisonPillError(f"transaction {hit} meets a bug in the {self.job} job's code "
                                  f"(poison-pill command {command_id})")

    def poison_done(self, db, txn_ids, result: str) -> None:
        """The poison-batch rule dead-lettered these transactions: finish their commands."""
        with self._lock:
            done = [self._poison[t] for t in txn_ids if t in self._poison]
        for command_id in done:
            commands.finish(db, command_id, result)

    def after_sink(self, db, query: str, batch_id: int, rows: int) -> None:
        """Called right after a sink write: SIGKILL this process if crash-after-sink targets it."""
        with self._lock:
            crash = self._crash
            if not crash or crash[1] != query or rows == 0:
                return
            self._crash = None
        # done BEFORE the kill, or the restarted job would claim and run it again
        commands.finish(db, crash[0], f"SIGKILL after the sink write of {query} batch {batch_id}, "
                                      f"before Spark's commit")
        log.warning("%s: crash-after-sink: SIGKILL after %s batch %s", self.job, query, batch_id)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
