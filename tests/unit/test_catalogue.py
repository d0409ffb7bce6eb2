"""The fault catalogue (`controlplane.faults`) drives the CLI, refuses impossible commands when they
are issued, and names for every kind exactly one executor that carries it out.

The CLI runs as a real `python -m pipelines.control` process on a store in tmp_path
(CARDSTREAM_DB / CARDSTREAM_RUN_DIR), never the demo's. No broker, no Spark.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from controlplane import commands, faults
from controlplane.store import connect
from infra.config import ROOT
from infra.contracts import GUARANTEES
from pipelines import hooks
from pipelines.supervisor.faults import FaultExecutor
from simulator import control as sim_control

EXECUTORS = (faults.SUPERVISOR, faults.JOB, faults.SIMULATOR)
JOBS = (faults.USAGE, faults.FRAUD)


def cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDSTREAM_RUN_DIR": str(tmp_path / "run"),
           "CARDSTREAM_DB": str(tmp_path / "store.db")}
    return subprocess.run([sys.executable, "-m", "pipelines.control", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def one_sentence(proc: subprocess.CompletedProcess) -> str:
    """The refusal: exit 2, one line on stderr, no traceback, nothing on stdout."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refused: ") and lines[0].endswith("."), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    return lines[0]


# ------------------------------------------------------------------ the catalogue itself

def test_faults_and_controls_split_the_catalogue():
    assert set(faults.FAULTS) | set(faults.CONTROLS) == set(faults.CATALOGUE)
    assert not set(faults.FAULTS) & set(faults.CONTROLS)
    assert {"crash", "crash-after-sink", "sink-down", "task-failure", "broker-down", "zombie",
            "worker-down", "late-burst", "bad-input", "poison-pill"} == set(faults.FAULTS)
    for kind, f in faults.CATALOGUE.items():
        assert f.kind == kind and f.executor in EXECUTORS and f.sentence, kind
        assert len({p.name for p in f.params}) == len(f.params), kind
        for p in f.params:
            assert p.default is None or p.coerce(kind, p.default) == p.default, (kind, p.name)


def test_every_kind_is_claimed_by_exactly_one_executor():
    claimed = {
        faults.SUPERVISOR: set(FaultExecutor.KINDS),
        faults.JOB: {k for job in JOBS for k in faults.claims(faults.JOB, job)},
        faults.SIMULATOR: set(sim_control.KINDS),
    }
    for kind, f in faults.CATALOGUE.items():
        owners = [executor for executor, kinds in claimed.items() if kind in kinds]
        assert owners == [f.executor], (kind, owners)
    # every job a job fault may target claims it there, and claims nothing else
    for job in JOBS:
        assert set(faults.claims(faults.JOB, job)) == {k for k, f in faults.CATALOGUE.items()
                                                        if f.executor == faults.JOB and job in f.jobs}
    assert faults.claims(faults.JOB, faults.FRAUD) == ("crash-after-sink", "poison-pill", "use-model")


def test_the_supervisor_has_a_handler_for_each_kind_it_claims():
    assert set(FaultExecutor.KINDS) == {"crash", "broker-down", "worker-down", "zombie", "set-fraud-guarantee"}
    for kind in FaultExecutor.KINDS:
        assert callable(getattr(FaultExecutor, kind.replace("-", "_"))), kind


class Recorder:
    """Stands in for the running simulator (control.Target): records what it was asked to do."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return f"{name} done"
        return call


def test_the_simulator_carries_out_each_kind_it_claims():
    required = {"rate": 250.0, "fraud_rate": 0.2, "late_rate": 0.1}
    for kind in sim_control.KINDS:
        f = faults.get(kind)
        _, params = faults.resolve(kind, "simulator", {p.name: required[p.name] for p in f.params if p.required})
        target = Recorder()
        assert sim_control.apply(target, commands.Command(1, kind, "simulator", params, 0)).endswith("done")
        assert len(target.calls) == 1, kind
    assert set(sim_control.KINDS) == set(faults.claims(faults.SIMULATOR))


def test_the_usage_job_arms_the_hooks_it_claims(tmp_path):
    usage = hooks.Faults(tmp_path / "store.db", list(GUARANTEES))
    fraud = hooks.Faults(tmp_path / "store.db", ["fraud"], job="fraud")
    usage_db = connect(tmp_path / "store.db")
    down = commands.issue(usage_db, "sink-down", "usage", seconds=5)
    failing = commands.issue(usage_db, "task-failure", "usage", guarantee="exactly-once")
    missing = hooks.Faults(tmp_path / "store.db", ["at-most-once"])
    assert fraud.poll_once(usage_db) == 0  # the fraud job claims none of the usage job's commands
    assert usage.poll_once(usage_db) == 2
    assert usage.gate.is_down() and commands.get(usage_db, down)["status"] == "done"
    assert usage.take_task_failure("exactly-once") == failing and usage.take_task_failure("at-least-once") is None
    other = commands.issue(usage_db, "crash-after-sink", "usage", guarantee="exactly-once")
    assert missing.poll_once(usage_db) == 1  # a job without that query says so instead of waiting
    row = commands.get(usage_db, other)
    assert row["status"] == "failed" and "no exactly-once query" in row["result"]


def test_crash_after_sink_kills_the_fraud_job_after_its_sink_write(tmp_path):
    """A real process arms the hook from the store and SIGKILLs itself at the next non-empty batch."""
    db = connect(tmp_path / "store.db")
    cid = commands.issue(db, "crash-after-sink", "fraud")
    script = (
        "import sys\n"
        "from controlplane.store import connect\n"
        "from pipelines.hooks import Faults\n"
        "db = connect(sys.argv[1])\n"
        "f = Faults(sys.argv[1], ['fraud'], job='fraud')\n"
        "assert f.poll_once(db) == 1\n"
        "f.after_sink(db, 'fraud', 6, 0)\n"          # an empty batch: nothing happens
        "f.after_sink(db, 'usage', 6, 10)\n"         # not its target
        "print('survived empty and foreign batches', flush=True)\n"
        "f.after_sink(db, 'fraud', 7, 10)\n"
        "print('still alive')\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "store.db")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    assert proc.stdout == "survived empty and foreign batches\n"
    row = commands.get(db, cid)
    assert row["status"] == "done" and "fraud batch 7" in row["result"]


# ------------------------------------------------------------------ commands.issue refuses

@pytest.mark.parametrize("kind, job, params, says", [
    ("sink-down", "usage", {"minutes": 3}, "sink-down takes no parameter 'minutes' (it takes seconds)."),
    ("crash", "usage", {"seconds": 1}, "crash takes no parameter 'seconds'."),
    ("sink-down", "usage", {"seconds": 0.1}, "sink-down: seconds must be at least 0.5, not 0.1."),
    ("zombie", "usage", {"seconds": 7200}, "zombie: seconds must be at most 3600, not 7200."),
    ("bad-input", "simulator", {"count": 2.5}, "bad-input: count must be a whole number, not 2.5."),
    ("late-burst", "simulator", {"count": "many"}, "late-burst: count must be a number, not 'many'."),
    ("set-rate", "simulator", {"rate": -5}, "set-rate: rate must be at least 0, not -5."),
    ("set-fraud-rate", "simulator", {}, "set-fraud-rate needs the parameter 'fraud_rate'"),
    ("sink-down", "fraud", {}, "sink-down cannot target fraud: it applies to usage."),
    ("crash-after-sink", "simulator", {}, "crash-after-sink cannot target simulator: it applies to usage, fraud."),
    ("task-failure", "usage", {"guarantee": "twice"}, "task-failure: guarantee must be one of"),
    ("crash-after-sink", "fraud", {"guarantee": "exactly-once"}, "the fraud job has none."),
    ("broker-down", "usage", {}, "broker-down applies to the Kafka broker, not to a job (usage)."),
    ("meltdown", None, {}, "There is no fault or command 'meltdown'"),
])
def test_issue_refuses_what_no_executor_can_do_and_writes_nothing(store, kind, job, params, says):
    with pytest.raises(faults.Refused) as refused:
        commands.issue(store, kind, job, **params)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)  # one sentence, on one line
    assert store["commands"].count == 0


def test_issue_fills_in_the_default_job_and_parameters(store):
    cid = commands.issue(store, "sink-down")
    row = commands.get(store, cid)
    assert (row["job"], row["params"]) == ("usage", '{"seconds": 10.0}')
    row = commands.get(store, commands.issue(store, "broker-down", seconds="4"))
    assert (row["job"], row["params"]) == (None, '{"seconds": 4.0}')
    row = commands.get(store, commands.issue(store, "task-failure", guarantee="at-most-once"))
    assert row["params"] == '{"guarantee": "at-most-once"}'


# ------------------------------------------------------------------ the CLI

def test_the_cli_lists_every_kind_with_its_sentence(tmp_path):
    proc = cli(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # argparse wraps lines
    for kind, f in faults.CATALOGUE.items():
        assert f"{kind}: {' '.join(f.sentence.split())}" in text, kind
    for name in {p.name for f in faults.CATALOGUE.values() for p in f.params}:
        assert f"--{name.replace('_', '-')}" in text, name


def test_the_cli_refuses_an_impossible_command_in_one_sentence(tmp_path):
    line = one_sentence(cli(tmp_path, "crash-after-sink", "--job", "simulator"))
    assert line == "refused: crash-after-sink cannot target simulator: it applies to usage, fraud."
    line = one_sentence(cli(tmp_path, "broker-down", "--job", "usage"))
    assert "applies to the Kafka broker" in line
    line = one_sentence(cli(tmp_path, "sink-down", "--seconds", "0"))
    assert "at least 0.5" in line
    assert connect(tmp_path / "store.db")["commands"].count == 0


def test_the_cli_issues_crash_after_sink_for_the_fraud_job(tmp_path):
    proc = cli(tmp_path, "crash-after-sink", "--job", "fraud")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "command 1: crash-after-sink for fraud issued"
    [row] = connect(tmp_path / "store.db")["commands"].rows
    assert (row["kind"], row["job"], row["status"], row["params"]) == ("crash-after-sink", "fraud", "pending", "{}")
    proc = cli(tmp_path, "broker-down", "--seconds", "3")
    assert proc.returncode == 0 and "broker-down for the broker issued" in proc.stdout


def test_the_cli_rejects_an_unknown_kind_before_touching_the_store(tmp_path):
    proc = cli(tmp_path, "meltdown")
    assert proc.returncode == 2 and "invalid choice: 'meltdown'" in proc.stderr
    assert not (tmp_path / "store.db").exists()
