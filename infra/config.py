"""CardStream's one configuration object: environment variables with sane defaults, read here only.

Every part (simulator, pipelines, dashboard, tests, benchmarks) takes its settings from
`load()`; child processes inherit the environment, so they see the same values.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from infra.storage import Location, location

ROOT = Path(__file__).resolve().parent.parent
# the state store of every stateful query of both jobs (a checkpoint keeps the provider it was
# created with: Spark records it in its offset log)
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# how the contract reads a record's JSON (JSON_PARSE): "scan", the JVM reader
# cardstream.parse.JsonFields (pipelines/engine/jvm), or "spark", Spark's own try_parse_json and
# variant functions, which it is tested to answer as (tests/spark/test_json_fields.py)
JSON_PARSERS = ("scan", "spark")


def _int(env, name, default):
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a whole number, not {raw!r}.") from None


def _words(env, name):
    """A command line's worth of words (shell quoting), or a one-sentence error."""
    try:
        return tuple(shlex.split(env.get(name) or ""))
    except ValueError as e:
        raise SystemExit(f"{name} is not a valid list of options ({e}): {env.get(name)!r}.") from None


def _positive(env, name, default):
    value = _int(env, name, default)
    if value < 1:
        raise SystemExit(f"{name} must be at least 1, not {value}.")
    return value


def _choice(env, name, default, choices):
    raw = env.get(name) or default
    if raw not in choices:
        raise SystemExit(f"{name} must be one of {', '.join(choices)}, not {raw!r}.")
    return raw


def _float(env, name, default):
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a number, not {raw!r}.") from None


@dataclass(frozen=True)
class Topics:
    transactions: str = "transactions"
    labels: str = "labels"
    decisions: str = "decisions"
    dead_letters: str = "transactions-dlq"
    # one marker per batch written to `decisions` (and the dead letters), in the same Kafka transaction
    markers: str = "decisions-batches"
    # the real-time fraud path's decisions (its own guarantee: at most or at least once)
    decisions_rt: str = "decisions-rt"
    # every stateful decision's features, score and verdict (exactly once, with its decision)
    features: str = "features"
    partitions: int = 4


@dataclass(frozen=True)
class Settings:
    run_dir: Path
    # Kafka: `external_bootstrap` set means "use that cluster, start nothing".
    external_bootstrap: str | None
    kafka_port: int
    kafka_controller_port: int
    kafka_heap: str
    kafka_jvm_opts: tuple[str, ...]
    topics: Topics
    # Kafka client security, for every client (kafka-python and Spark's); PLAINTEXT by default
    kafka_security_protocol: str
    # Spark
    spark_master: str
    shuffle_partitions: int
    spark_driver_memory: str  # each Spark session's driver heap (Spark's notation: "2g")
    spark_log_level: str      # the level Spark's own log4j logs at in every Spark process
    trigger_seconds: float
    usage_trigger_seconds: float
    dlq_trigger_seconds: float
    companion_trigger_seconds: float
    # Store and checkpoints
    store_path: Path
    # a local folder, or a Location (hdfs://, read from Python over WebHDFS: infra/storage.py)
    checkpoint_root: Path | Location
    # Fraud scoring
    fraud_threshold: float
    state_ttl_minutes: int
    # the feedback delay the fraud job's terminal features assume: a label counts for payments
    # at least this many days after the labelled one (pipelines/fraud/features.py)
    label_delay_days: int
    # the fraud-detection handbook's dataset (python -m bench handbook, its tests)
    handbook_data: Path
    fraud_state_buckets: int
    watermark_seconds: int
    session_gap_seconds: int
    # Usage job: checkpoints kept, dedupe horizon (on Kafka append time), batch size cap
    min_batches_to_retain: int
    dedupe_seconds: int
    usage_max_offsets: int
    json_parse: str  # JSON_PARSERS: the contract's JSON reader
    # Dashboard
    dashboard_host: str
    dashboard_port: int
    dashboard_token: str | None
    dashboard_refresh_seconds: float = 2.0
    dashboard_store_timeout_ms: int = 1000
    dashboard_chart_seconds: float = 10.0  # a chart with new data is rebuilt at most this often (dashboard/ui.py `chart`)
    # Supervisor
    restart_delay_seconds: float = 2.0
    restart_backoff_max_seconds: float = 30.0
    stop_grace_seconds: float = 30.0  # a job stopping between batches, before it is killed
    lease_ttl_seconds: float = 5.0    # a standby takes over when the active's heartbeat is this old
    # at the start and after a takeover the next standby starts once the active's first batch with
    # rows committed (the two would share the CPU), or after this many seconds (120 s, tried: a slow
    # host's first decision came sooner, but the standbys then started where the stack stopped deciding
    # for 30 s; bench/RESULTS.md#first-minute)
    standby_start_after_takeover_max_s: float = 30.0
    standby: bool = False             # the supervisor keeps a warm standby per job
    # a standby runs its job's plans to their end over scratch records while it waits
    # (pipelines.fraud.job.rehearse, pipelines.usage.job.rehearse), so a takeover's first batch finds it all started
    standby_rehearsal: bool = True
    # the fraud standby's rehearsal: this many scratch transactions (and a label for every tenth), in
    # fraud.job.REHEARSAL_BATCHES batches, so the JIT has compiled the per-row code before a takeover needs it
    standby_rehearsal_rows: int = 6000
    # how much nicer a standby runs until it takes over (its JVM start, warm-up and rehearsal take
    # the CPU the active jobs leave); 0: as nice as the active
    standby_nice: int = 10
    # Spark's web UI in each job (the Overview links it): bound to 127.0.0.1, port 4040 or the next free
    spark_ui: bool = True
    # the broker and each Spark driver map the class archives `make setup` wrote (infra/jvm.py)
    jvm_class_archives: bool = True
    audit_interval_seconds: float = 5.0
    # what the auditor keeps of the topics beyond its folds: the Fraud page's paths look back this
    # far, and a txn_id repeated further apart counts as two transactions
    audit_horizon_minutes: float = 10.0
    # the supervisor's housekeeping: RSS of every long-lived process and the store's, checkpoints'
    # and broker's bytes sampled this often (process_memory, storage_bytes); rows of the growing
    # tables older than the retention deleted in the same pass
    memory_sample_seconds: float = 60.0
    store_retention_hours: float = 24.0
    # a transaction with no decision this long after it arrived counts as undecided on the Fraud page
    fraud_undecided_after_seconds: float = 15.0
    jars_dir: Path = field(default=ROOT / "infra" / "jars")
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: str | None = None
    kafka_ssl_cafile: str | None = None
    # the brokers CardStream starts: "name:password,..." makes their client listener SASL_PLAINTEXT
    # (PLAIN) accepting these users, the first one being the brokers' own (infra.broker)
    kafka_broker_sasl_users: str | None = None
    fraud_rt_guarantee: str = "at-least-once"  # the real-time fraud path's (at-most-once: skips)
    fraud_mode: str = "microbatch"            # the fraud job's mode (realtime: both paths)
    # ... and a keystore (PKCS12, or JKS by its .jks name) makes it SSL, or SASL_SSL with the users
    kafka_broker_ssl_keystore: str | None = None
    kafka_broker_ssl_keystore_password: str | None = None
    # where the stateful path's per-card scoring runs: "jvm" (CardScoring.java) or "python" (pandas)
    fraud_processor: str = "jvm"
    # the real-time query's batch (its checkpoint interval: at-least-once replays at most this much)
    realtime_batch_seconds: float = 300.0
    # a real-time start reads back at most this many records per partition (its profiles' seed
    # may be older: then they miss what lies between, and the decisions' profile_age_ms says so)
    realtime_max_replay: int = 50_000
    # real-time mode: the nice level of the stateful path's Python workers (0: not lowered)
    realtime_worker_nice: int = 10
    topic_replication: int = 1
    # topics' min.insync.replicas: with acks=all, a write needs this many replicas (1 local, 2 cluster)
    topic_min_insync: int = 1
    # the local cluster (`make cluster-up`, CLUSTER=1): brokers started by infra.broker (node i
    # listens on KAFKA_PORT + 2i, its controller on KAFKA_CONTROLLER_PORT + 2i, all voters), and a
    # Spark standalone master with workers, each worker bounded to a share of this machine; a
    # worker's cores are task slots, not CPUs: four, so both jobs and their warm standbys (each
    # application takes one core on every worker) fit
    cluster: bool = False
    kafka_brokers: int = 1
    spark_master_port: int = 7077
    spark_master_ui_port: int = 8080
    spark_workers: int = 2
    spark_worker_cores: int = 4
    spark_worker_memory: str = "2g"
    spark_executor_jvm_opts: tuple[str, ...] = ()  # an application's executors' JVM options on a standalone master
    # HDFS on loopback (`make cluster-up` with CLUSTER=1, infra/hdfs.py): a NameNode on HDFS_PORT
    # (RPC) and HDFS_PORT + 1 (its web UI and WebHDFS), a DataNode on the next three; with it the
    # checkpoint root is hdfs://127.0.0.1:HDFS_PORT/cardstream/checkpoints
    hdfs: bool = False
    hdfs_port: int = 8020
    hdfs_heap: str = "256m"
    hdfs_jvm_opts: tuple[str, ...] = ()
    topic_retention_hours: float = 168.0
    # how long a transactional send may wait for the broker before the batch fails (and replays)
    kafka_delivery_timeout_ms: int = 120_000
    spark_fetch_max_wait_ms: int = 10
    spark_max_poll_records: int = 5000
    # Validation: event_time / produced_at must be milliseconds inside [now - past, now + future]
    validation_past_seconds: int = 7 * 24 * 3600
    validation_future_seconds: int = 300
    # The fraud job's default bound on Kafka records per micro-batch (--max-offsets-per-trigger)
    max_offsets_per_trigger: int = 20_000
    # The poison-batch rule: this many identical failures of one batch in a row, and the job
    # dead-letters that batch's records that fail on their own (pipelines/engine/poison.py)
    poison_batch_failures: int = 3

    @property
    def kafka_bootstrap(self) -> str:
        return self.external_bootstrap or ",".join(f"127.0.0.1:{port}" for port, _ in self.kafka_node_ports)

    @property
    def kafka_node_ports(self) -> list[tuple[int, int]]:
        """(client port, controller port) of each broker CardStream starts, node 0 first."""
        return [(self.kafka_port + 2 * i, self.kafka_controller_port + 2 * i) for i in range(self.kafka_brokers)]

    @property
    def cluster_dir(self) -> Path:
        """The local Spark standalone cluster's logs and work folders."""
        return self.run_dir / "cluster"

    @property
    def spark_master_url(self) -> str:
        """The standalone master `make cluster-up` starts (SPARK_MASTER names the one jobs use)."""
        return f"spark://127.0.0.1:{self.spark_master_port}"

    @property
    def hdfs_dir(self) -> Path:
        """The local HDFS's configuration, metadata, blocks and logs."""
        return self.run_dir / "hdfs"

    @property
    def fraud_files(self) -> Path:
        """The fraud job's real-time serving, seed and terminal files, which its JVM reads by local
        path: in its checkpoint folder when that is local, else in the run folder."""
        if isinstance(self.checkpoint_root, Path):
            return self.checkpoint_root / "fraud"
        return self.run_dir / "fraud-files"

    @property
    def hdfs_uri(self) -> str:
        """The file system URI of the HDFS `make cluster-up` starts."""
        return f"hdfs://127.0.0.1:{self.hdfs_port}"

    @property
    def kafka_dir(self) -> Path:
        return self.run_dir / "kafka"

    @property
    def kafka_jars(self) -> Path:
        return self.jars_dir / "kafka"

    @property
    def spark_jars(self) -> Path:
        return self.jars_dir / "spark"


HANDBOOK_FILE = Path("shared") / "datasets" / "handbook" / "transactions.parquet"


def _handbook_default() -> Path:
    """The handbook's dataset beside the checkout (../shared/...), or beside one of its parents (a
    clone made elsewhere on the same machine, /work/shared/...); the first that exists, else the
    first place, which the error then names."""
    places = [parent / HANDBOOK_FILE for parent in ROOT.resolve().parents] + [Path("/work") / HANDBOOK_FILE]
    return next((p for p in places if p.exists()), places[0])


def _checkpoint_root(env, run_dir: Path, hdfs: bool, hdfs_port: int) -> Path | Location:
    """CHECKPOINT_ROOT (a folder or a URI), else the local HDFS's /cardstream/checkpoints with HDFS
    on (CLUSTER=1), else the run folder's checkpoints/. A URI's files are read from Python over
    WEBHDFS, which defaults to the local NameNode's for its own URIs."""
    own = f"hdfs://127.0.0.1:{hdfs_port}"
    text = env.get("CHECKPOINT_ROOT") or (f"{own}/cardstream/checkpoints" if hdfs else str(run_dir / "checkpoints"))
    web = env.get("WEBHDFS") or (f"http://127.0.0.1:{hdfs_port + 1}" if text.startswith(own + "/") else None)
    return location(text, web, env.get("HADOOP_USER_NAME") or "cardstream")


def load(env: dict | None = None) -> Settings:
    env = os.environ if env is None else env
    run_dir = Path(env.get("CARDSTREAM_RUN_DIR") or ROOT / ".run").resolve()
    cluster = (env.get("CLUSTER") or "0").lower() in ("1", "true", "yes", "on")
    brokers = _int(env, "KAFKA_BROKERS", 3 if cluster else 1)
    spark_master_port = _int(env, "SPARK_MASTER_PORT", 7077)
    hdfs = (env.get("HDFS") or ("1" if cluster else "0")).lower() in ("1", "true", "yes", "on")
    hdfs_port = _int(env, "HDFS_PORT", 8020)
    return Settings(
        run_dir=run_dir,
        external_bootstrap=env.get("KAFKA_BOOTSTRAP") or None,
        kafka_port=_int(env, "KAFKA_PORT", 9092),
        kafka_controller_port=_int(env, "KAFKA_CONTROLLER_PORT", 9093),
        kafka_heap=env.get("KAFKA_HEAP", "768m"),  # per broker, also each of a cluster's
        kafka_jvm_opts=_words(env, "KAFKA_JVM_OPTS"),
        topics=Topics(
            transactions=env.get("TOPIC_TRANSACTIONS", "transactions"),
            labels=env.get("TOPIC_LABELS", "labels"),
            decisions=env.get("TOPIC_DECISIONS", "decisions"),
            dead_letters=env.get("TOPIC_DLQ", "transactions-dlq"),
            markers=env.get("TOPIC_MARKERS", "decisions-batches"),
            decisions_rt=env.get("TOPIC_DECISIONS_RT", "decisions-rt"),
            features=env.get("TOPIC_FEATURES", "features"),
            partitions=_int(env, "TOPIC_PARTITIONS", 4),
        ),
        kafka_security_protocol=env.get("KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT",
        kafka_sasl_mechanism=env.get("KAFKA_SASL_MECHANISM") or None,
        kafka_sasl_username=env.get("KAFKA_SASL_USERNAME") or None,
        kafka_sasl_password=env.get("KAFKA_SASL_PASSWORD") or None,
        kafka_ssl_cafile=env.get("KAFKA_SSL_CAFILE") or None,
        kafka_broker_sasl_users=env.get("KAFKA_BROKER_SASL_USERS") or None,
        kafka_delivery_timeout_ms=_int(env, "KAFKA_DELIVERY_TIMEOUT_MS", 120_000),
        spark_fetch_max_wait_ms=_int(env, "SPARK_KAFKA_FETCH_MAX_WAIT_MS", 10),
        spark_max_poll_records=_positive(env, "SPARK_KAFKA_MAX_POLL_RECORDS", 5000),
        kafka_broker_ssl_keystore=env.get("KAFKA_BROKER_SSL_KEYSTORE") or None,
        kafka_broker_ssl_keystore_password=env.get("KAFKA_BROKER_SSL_KEYSTORE_PASSWORD") or None,
        validation_past_seconds=_int(env, "VALIDATION_PAST_SECONDS", 7 * 24 * 3600),
        validation_future_seconds=_int(env, "VALIDATION_FUTURE_SECONDS", 300),
        max_offsets_per_trigger=_int(env, "MAX_OFFSETS_PER_TRIGGER", 20_000),
        poison_batch_failures=_int(env, "POISON_BATCH_FAILURES", 3),
        cluster=cluster,
        kafka_brokers=brokers,
        topic_replication=_int(env, "TOPIC_REPLICATION", 3 if cluster else 1),
        topic_min_insync=_int(env, "TOPIC_MIN_INSYNC", 2 if cluster else 1),
        spark_master_port=spark_master_port,
        spark_master_ui_port=_int(env, "SPARK_MASTER_UI_PORT", 8080),
        spark_workers=_int(env, "SPARK_WORKERS", 2),
        spark_worker_cores=_int(env, "SPARK_WORKER_CORES", 4),
        spark_worker_memory=env.get("SPARK_WORKER_MEMORY") or "2g",
        spark_executor_jvm_opts=_words(env, "SPARK_EXECUTOR_JVM_OPTS"),
        fraud_rt_guarantee=env.get("FRAUD_RT_GUARANTEE") or "at-least-once",
        realtime_batch_seconds=_float(env, "REALTIME_BATCH_SECONDS", 300.0),
        realtime_max_replay=_int(env, "REALTIME_MAX_REPLAY", 50_000),
        realtime_worker_nice=_int(env, "REALTIME_WORKER_NICE", 10),
        fraud_mode=env.get("FRAUD_MODE") or "microbatch",
        fraud_processor=env.get("FRAUD_PROCESSOR") or "jvm",
        fraud_undecided_after_seconds=_float(env, "FRAUD_UNDECIDED_AFTER_SECONDS", 15.0),
        topic_retention_hours=_float(env, "TOPIC_RETENTION_HOURS", 168.0),
        spark_master=env.get("SPARK_MASTER") or (f"spark://127.0.0.1:{spark_master_port}" if cluster else "local[*]"),
        shuffle_partitions=_int(env, "SPARK_SHUFFLE_PARTITIONS", 2),
        spark_driver_memory=env.get("SPARK_DRIVER_MEMORY") or "2g",
        spark_log_level=env.get("SPARK_LOG_LEVEL") or "ERROR",
        trigger_seconds=_float(env, "TRIGGER_SECONDS", 1.0),
        usage_trigger_seconds=_float(env, "USAGE_TRIGGER_SECONDS", 5.0),
        dlq_trigger_seconds=_float(env, "DLQ_TRIGGER_SECONDS", 5.0),
        companion_trigger_seconds=_float(env, "COMPANION_TRIGGER_SECONDS", 10.0),
        store_path=Path(env.get("CARDSTREAM_DB") or run_dir / "cardstream.db").resolve(),
        checkpoint_root=_checkpoint_root(env, run_dir, hdfs, hdfs_port),
        hdfs=hdfs,
        hdfs_port=hdfs_port,
        hdfs_heap=env.get("HDFS_HEAP") or "256m",
        hdfs_jvm_opts=_words(env, "HDFS_JVM_OPTS"),
        fraud_threshold=_float(env, "FRAUD_THRESHOLD", 0.7),
        state_ttl_minutes=_int(env, "STATE_TTL_MINUTES", 24 * 60),
        label_delay_days=_int(env, "LABEL_DELAY_DAYS", 7),
        handbook_data=Path(env.get("HANDBOOK_DATA") or _handbook_default()).resolve(),
        fraud_state_buckets=_int(env, "FRAUD_STATE_BUCKETS", 64),
        watermark_seconds=_int(env, "WATERMARK_SECONDS", 30),
        session_gap_seconds=_int(env, "SESSION_GAP_SECONDS", 60),
        min_batches_to_retain=_int(env, "MIN_BATCHES_TO_RETAIN", 20),
        dedupe_seconds=_int(env, "DEDUPE_SECONDS", 600),
        usage_max_offsets=_int(env, "USAGE_MAX_OFFSETS", 500_000),
        json_parse=_choice(env, "JSON_PARSE", "scan", JSON_PARSERS),
        dashboard_host=env.get("DASHBOARD_HOST", "127.0.0.1"),
        dashboard_port=_int(env, "DASHBOARD_PORT", 8501),
        dashboard_token=env.get("DASHBOARD_TOKEN") or None,
        jars_dir=Path(env.get("CARDSTREAM_JARS_DIR") or ROOT / "infra" / "jars").resolve(),
        restart_delay_seconds=_float(env, "RESTART_DELAY_SECONDS", 2.0),
        restart_backoff_max_seconds=_float(env, "RESTART_BACKOFF_MAX_SECONDS", 30.0),
        stop_grace_seconds=_float(env, "STOP_GRACE_SECONDS", 30.0),
        lease_ttl_seconds=_float(env, "LEASE_TTL_SECONDS", 5.0),
        standby_start_after_takeover_max_s=_float(env, "STANDBY_START_AFTER_TAKEOVER_MAX_SECONDS", 30.0),
        standby=(env.get("STANDBY") or "0").lower() in ("1", "true", "yes", "on"),
        standby_rehearsal=(env.get("STANDBY_REHEARSAL") or "1").lower() in ("1", "true", "yes", "on"),
        standby_rehearsal_rows=_int(env, "STANDBY_REHEARSAL_ROWS", 6000),
        standby_nice=_int(env, "STANDBY_NICE", 10),
        spark_ui=(env.get("SPARK_UI") or "1").lower() in ("1", "true", "yes", "on"),
        jvm_class_archives=(env.get("JVM_CLASS_ARCHIVES") or "1").lower() in ("1", "true", "yes", "on"),
        audit_interval_seconds=_float(env, "AUDIT_INTERVAL_SECONDS", 5.0),
        audit_horizon_minutes=_float(env, "AUDIT_HORIZON_MINUTES", 10.0),
        memory_sample_seconds=_float(env, "MEMORY_SAMPLE_SECONDS", 60.0),
        store_retention_hours=_float(env, "STORE_RETENTION_HOURS", 24.0),
        dashboard_refresh_seconds=_float(env, "DASHBOARD_REFRESH_SECONDS", 2.0),
        dashboard_store_timeout_ms=_int(env, "DASHBOARD_STORE_TIMEOUT_MS", 1000),
        dashboard_chart_seconds=_float(env, "DASHBOARD_CHART_SECONDS", 10.0),
    )

