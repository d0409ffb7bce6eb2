"""The Spark driver's class archive (infra/jvm.py says why): `python -m pipelines.engine.cds`
writes it once per checkout (`make setup` does) by running a small warm-up workload
(pipelines/engine/warm_up.py) in a driver that writes the archive as it exits; every driver
get_spark starts after that maps it."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from infra import jvm
from infra.config import ROOT, Settings, load

WARM_UP_TIMEOUT_S = 600


def class_path(s: Settings) -> list[Path]:
    """The jars of the driver's class path: ours and the connector's, then PySpark's own."""
    # deferred: pyspark is imported only to find its jars folder
    import pyspark

    return sorted(s.spark_jars.glob("*.jar")) + sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))


def archive(s: Settings) -> Path | None:
    return jvm.class_archive(s.jars_dir / "cds", "spark-driver", class_path(s)) if s.spark_jars.is_dir() else None


def java_options(s: Settings) -> str:
    """The driver's JVM option that maps the archive, or "" without one."""
    return " ".join(jvm.archive_options(archive(s), s.jvm_class_archives))


def build(s: Settings) -> Path | None:
    """Writes this checkout's archive if it has none; without one Spark starts as before."""
    target = archive(s)
    if target is None or target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.stem}.{os.getpid()}.partial")
    env = {**os.environ, "JVM_CLASS_ARCHIVES": "0", "SPARK_UI": "0", "SPARK_MASTER": "local[2]",
           "CARDSTREAM_RUN_DIR": str(s.run_dir / "cds-warm-up"), "PYTHONPATH": str(ROOT),
           "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -XX:ArchiveClassesAtExit={partial}"}
    print("Writing the Spark driver's class archive (once per checkout; a minute or two) ...", flush=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipelines.engine.warm_up"], cwd=ROOT, env=env,
                          timeout=WARM_UP_TIMEOUT_S, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return jvm.finish_archive(partial, target, "the Spark driver", done.returncode, done.returncode == 0, started,
                              "\n".join(done.stdout.splitlines()[-15:]))


def main() -> int:
    s = load()
    if s.jvm_class_archives:
        build(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
