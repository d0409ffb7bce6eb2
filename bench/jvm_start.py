"""How long a JVM of CardStream takes to start, with and without its class archive (infra/jvm.py):
`python -m bench jvm-start [--rounds N] --json`.

Each round starts, one after another and alternating which goes first, a Spark driver
(get_spark and a first small query: a shuffle and a JSON parse, in a process of its own) and a
scratch Kafka broker (`infra.broker.up` on free ports in a scratch folder: storage formatted, port
answering), once with JVM_CLASS_ARCHIVES=1 and once with 0. Figures are medians over the rounds;
`*_ratio` is with over without, taken within the same run (the machine's load moves both).
Needs the archives `make setup` writes; says so if they are missing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench.common import logger
from infra import broker, daemons
from infra.config import ROOT, load
from pipelines.engine import cds

log = logger("jvm-start")
CHILD = """
import json, time
t0 = time.monotonic()
from pyspark.sql import functions as F
from pipelines.engine.session import get_spark
spark = get_spark("cardstream-jvm-start")
t1 = time.monotonic()
spark.range(1000).select((F.col("id") % 7).alias("k")).groupBy("k").count().collect()
spark.sql("SELECT from_json('{\\"a\\": 1}', 'a int') AS j").collect()
t2 = time.monotonic()
spark.stop()
print(json.dumps({"session_s": t1 - t0, "first_query_s": t2 - t1}))
"""


def spark_start(archives: bool) -> dict:
    env = {**os.environ, "JVM_CLASS_ARCHIVES": "1" if archives else "0", "SPARK_UI": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the Spark driver did not start: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def broker_start(archives: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="cardstream-jvm-start-") as tmp:
        port, controller = daemons.free_ports(2)
        env = {"CARDSTREAM_RUN_DIR": tmp, "KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(controller),
               "JVM_CLASS_ARCHIVES": "1" if archives else "0", "KAFKA_BROKERS": "1"}
        s = load({**os.environ, **env})
        started = time.monotonic()
        broker.up(s, quiet=True)
        seconds = time.monotonic() - started
        broker.down(s, quiet=True)
        return seconds


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench jvm-start")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    s = load()
    missing = [what for what, path in (("the Spark driver", cds.archive(s)), ("the Kafka broker", broker.class_archive(s)))
               if path is None or not path.exists()]
    if missing:
        raise SystemExit(f"No class archive for {' and '.join(missing)}: run `make setup` first.")
    runs: dict[str, dict[bool, list[float]]] = {k: {True: [], False: []} for k in ("session_s", "first_query_s", "broker_up_s")}
    for r in range(args.rounds):
        for archives in ((True, False) if r % 2 == 0 else (False, True)):
            spark = spark_start(archives)
            runs["session_s"][archives].append(spark["session_s"])
            runs["first_query_s"][archives].append(spark["first_query_s"])
            runs["broker_up_s"][archives].append(broker_start(archives))
            log(f"round {r + 1}/{args.rounds}, archives {'on' if archives else 'off'}: session "
                f"{spark['session_s']:.2f} s, first query {spark['first_query_s']:.2f} s, broker up "
                f"{runs['broker_up_s'][archives][-1]:.2f} s")
    out: dict = {"rounds": args.rounds, "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}
    for key, by in runs.items():
        with_, without = statistics.median(by[True]), statistics.median(by[False])
        out[key] = {"archive": round(with_, 3), "none": round(without, 3)}
        out[key.replace("_s", "_ratio")] = round(with_ / without, 3)
    return out
