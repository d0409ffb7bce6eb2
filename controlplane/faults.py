"""The fault catalogue: every fault and simulator command, who carries it out, and its parameters.

One declaration drives the control CLI (`python -m pipelines.control`), the dashboard's Faults
and Controls pages, each executor's claim list and the README's fault table (a test compares
them). A command is checked against it when it is issued, so an impossible combination (a fault
for a job that has no executor for it) is refused at once with one sentence instead of waiting
`pending` forever.

Executors:
- `supervisor`: process-level faults (kill, freeze, stop the broker), carried out by
  `pipelines.supervisor`;
- `job`: in-batch faults, claimed by the job process they name (`pipelines.usage`,
  `pipelines.fraud`) and carried out between its sink write and Spark's commit;
- `simulator`: traffic faults and controls, claimed by the running simulator.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from infra.contracts import GUARANTEES, RT_GUARANTEES

SUPERVISOR, JOB, SIMULATOR = "supervisor", "job", "simulator"
FRAUD, USAGE = "fraud", "usage"


class Refused(ValueError):
    """The command cannot be carried out as asked; the message is one sentence saying why."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: type                 # float, int or str
    default: object = None     # None: optional, the executor decides (or required, see below)
    unit: str = ""
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    required: bool = False

    def coerce(self, kind_name: str, value):
        """The value as this parameter's type, within its range; Refused otherwise."""
        if self.kind is str:
            text = str(value)
            if self.choices and text not in self.choices:
                raise Refused(f"{kind_name}: {self.name} must be one of {', '.join(self.choices)}, not {text!r}.")
            return text
        try:
            number = self.kind(value)
        except (TypeError, ValueError):
            raise Refused(f"{kind_name}: {self.name} must be a number, not {value!r}.") from None
        if self.kind is int and number != float(value):
            raise Refused(f"{kind_name}: {self.name} must be a whole number, not {value!r}.")
        if self.minimum is not None and number < self.minimum:
            raise Refused(f"{kind_name}: {self.name} must be at least {self.minimum:g}, not {value!r}.")
        if self.maximum is not None and number > self.maximum:
            raise Refused(f"{kind_name}: {self.name} must be at most {self.maximum:g}, not {value!r}.")
        return number


@dataclass(frozen=True)
class Fault:
    kind: str
    executor: str
    jobs: tuple[str, ...]      # what it may target; the first is the default. () = no job (the broker)
    sentence: str
    params: tuple[Param, ...] = field(default_factory=tuple)
    is_fault: bool = True      # False: a simulator control (pause, rates), not a failure
    target: str = "the broker"  # what a fault with no job acts on

    @property
    def default_job(self) -> str | None:
        return self.jobs[0] if self.jobs else None

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params if p.default is not None}


def _seconds(default: float, what: str) -> Param:
    return Param("seconds", float, default, "s", what, minimum=0.5, maximum=3600)


def _count(default: int, what: str) -> Param:
    return Param("count", int, default, "events", what, minimum=1, maximum=100_000)


def _rate(name: str, what: str, maximum: float) -> Param:
    return Param(name, float, None, "tx/s" if name == "rate" else "share", what, minimum=0.0,
                 maximum=maximum, required=True)


_TARGET = Param("guarantee", str, None, "", "the usage query it targets (default: at-least-once for "
                "crash-after-sink, every query for task-failure)", choices=GUARANTEES)

CATALOGUE: dict[str, Fault] = {f.kind: f for f in (
    Fault("crash", SUPERVISOR, (USAGE, FRAUD, SIMULATOR),
          "the job's driver gets SIGKILL; its warm standby takes over, or without one the supervisor "
          "restarts it after RESTART_DELAY_SECONDS; the recovery time (kill to first new batch with rows) "
          "is recorded"),
    Fault("crash-after-sink", JOB, (USAGE, FRAUD),
          "the job kills itself after its next sink write, before Spark commits the batch",
          (_TARGET,)),
    Fault("sink-down", JOB, (USAGE,), "the usage sink rejects writes for N seconds",
          (_seconds(10.0, "how long the sink rejects writes"),)),
    Fault("task-failure", JOB, (USAGE,), "processing of the next batch raises inside a Spark task",
          (_TARGET,)),
    Fault("poison-pill", JOB, (FRAUD,),
          "the job sends itself a valid-looking transaction its code then fails on in every batch that "
          "holds it (a bug meeting a record); after POISON_BATCH_FAILURES identical failures the record "
          "is dead-lettered with the exception as reason and the job moves on"),
    Fault("broker-down", SUPERVISOR, (), "the Kafka broker (one node of a cluster, or all) stops for N seconds, "
          "then restarts",
          (_seconds(10.0, "how long the broker stays down"),
           Param("node", int, None, "", "which broker of the cluster stops, 0 first (default: all of them)",
                 minimum=0))),
    Fault("worker-down", SUPERVISOR, (),
          "one Spark worker gets SIGKILL (a machine lost: its executors exit with it); the jobs carry on "
          "with their executors on the other workers, and the worker restarts after N seconds and gets "
          "executors again (CLUSTER=1 only)",
          (Param("worker", int, 0, "", "which Spark worker, 0 first", minimum=0, maximum=63),
           _seconds(20.0, "how long the worker stays down")), target="a Spark worker"),
    Fault("late-burst", SIMULATOR, (SIMULATOR,),
          "the simulator emits a burst of late and out-of-order events",
          (_count(200, "ordinary payments sent late"),)),
    Fault("bad-input", SIMULATOR, (SIMULATOR,),
          "the simulator emits malformed messages; they land in transactions-dlq with the reason",
          (_count(50, "malformed messages"),)),
    Fault("zombie", SUPERVISOR, (USAGE, FRAUD),
          "the running instance is frozen (SIGSTOP, like a long GC pause) and a replacement starts on "
          "the same checkpoint and sink (at-most-once and the real-time path, which start over on every "
          "run, in a fresh folder of the replacement's own); the frozen one is woken after N seconds, "
          "and not before the replacement holds the lease (so it always wakes stale), and must be "
          "fenced: a write of it rejected (exit 3), or its heartbeat finding the lease lost (exit 4)",
          (_seconds(15.0, "how long the old instance stays frozen"),)),
    Fault("pause", SIMULATOR, (SIMULATOR,), "stop sending (what is in flight is still delivered)",
          is_fault=False),
    Fault("resume", SIMULATOR, (SIMULATOR,), "go on sending", is_fault=False),
    Fault("set-rate", SIMULATOR, (SIMULATOR,), "pace the stream at this rate from now on",
          (_rate("rate", "transactions per second", 100_000),), is_fault=False),
    Fault("set-fraud-rate", SIMULATOR, (SIMULATOR,), "share of fraud from the next block of events on",
          (_rate("fraud_rate", "share of fraud, 0..1", 1.0),), is_fault=False),
    Fault("set-late-rate", SIMULATOR, (SIMULATOR,), "share of late events from the next block on",
          (_rate("late_rate", "share of late events, 0..1", 1.0),), is_fault=False),
    Fault("use-model", JOB, (FRAUD,),
          "switch the fraud job's score aggregator to this model version between two batches, without a "
          "restart of the job (0: the rules)",
          (Param("version", int, None, "", "the model version (python -m pipelines.fraud.train makes them)",
                 minimum=0, maximum=1_000_000, required=True),), is_fault=False),
    Fault("set-fraud-guarantee", SUPERVISOR, (FRAUD,),
          "restart the fraud job with this guarantee on its real-time path (real-time mode): at-most-once "
          "skips what arrives while it restarts, at-least-once replays from its checkpoint",
          (Param("guarantee", str, None, "", "the real-time path's guarantee", choices=RT_GUARANTEES,
                 required=True),), is_fault=False),
)}

FAULTS = tuple(k for k, f in CATALOGUE.items() if f.is_fault)
CONTROLS = tuple(k for k, f in CATALOGUE.items() if not f.is_fault)


def get(kind: str) -> Fault:
    try:
        return CATALOGUE[kind]
    except KeyError:
        raise Refused(f"There is no fault or command {kind!r}; the catalogue has {', '.join(CATALOGUE)}.") from None


def target(kind: str, job: str | None) -> str:
    """What a command acts on, in words: its job, or for a fault with no job the fault's target."""
    return job or (CATALOGUE[kind].target if kind in CATALOGUE else "the broker")


def resolve(kind: str, job: str | None = None, params: dict | None = None) -> tuple[str | None, dict]:
    """(job, params with defaults) for a command as issued; Refused when it cannot be carried out."""
    fault = get(kind)
    params = {k: v for k, v in (params or {}).items() if v is not None}
    if job is None:
        job = fault.default_job
    elif not fault.jobs:
        raise Refused(f"{kind} applies to {'the Kafka broker' if fault.target == 'the broker' else fault.target}, "
                      f"not to a job ({job}).")
    elif job not in fault.jobs:
        raise Refused(f"{kind} cannot target {job}: it applies to {', '.join(fault.jobs)}.")
    known = {p.name for p in fault.params}
    unknown = sorted(set(params) - known)
    if unknown:
        raise Refused(f"{kind} takes no parameter {unknown[0]!r}"
                      + (f" (it takes {', '.join(sorted(known))})." if known else "."))
    out = fault.defaults()
    for p in fault.params:
        if p.name in params:
            out[p.name] = p.coerce(kind, params[p.name])
        elif p.required:
            raise Refused(f"{kind} needs the parameter {p.name!r} ({p.help}).")
    if _TARGET in fault.params and out.get("guarantee") and job != USAGE:
        raise Refused(f"{kind}: guarantee targets a usage query; the {job} job has none.")
    return job, out


def claims(executor: str, job: str | None = None) -> tuple[str, ...]:
    """The kinds an executor claims from the command table (for `job`, when it is a job)."""
    return tuple(k for k, f in CATALOGUE.items()
                 if f.executor == executor and (job is None or job in f.jobs))
