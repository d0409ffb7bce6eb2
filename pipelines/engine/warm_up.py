"""The warm-up a class archive is written from (`pipelines.engine.cds` runs it with
-XX:ArchiveClassesAtExit): the classes a job loads — JSON parsing, aggregation, a stateful
streaming query on RocksDB with a checkpoint, Arrow and pandas functions."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from pipelines.engine.session import get_spark

EXIT_TIMEOUT_S = 300


def main() -> int:
    # deferred: pyspark loads with the session
    from pyspark.sql import functions as F

    spark = get_spark("cardstream-cds-warm-up")
    with tempfile.TemporaryDirectory(prefix="cardstream-cds-") as tmp:
        src = Path(tmp) / "in"
        src.mkdir()
        (src / "part.json").write_text("".join(
            f'{{"card":"c{i % 7}","amount":{i * 1.5},"ts":"2026-01-01T00:00:{i % 60:02d}Z"}}\n' for i in range(200)))
        schema = "card string, amount double, ts timestamp"
        batch = spark.read.schema(schema).json(str(src))
        batch.groupBy("card").agg(F.avg("amount"), F.count("*")).collect()
        batch.select(F.to_json(F.struct("card", "amount")).alias("j")) \
             .select(F.from_json("j", "card string, amount double").alias("r")).collect()
        batch.groupBy("card").applyInPandas(lambda df: df.head(1), schema).collect()
        query = (spark.readStream.schema(schema).json(str(src))
                 .withWatermark("ts", "1 minute").dropDuplicatesWithinWatermark(["card", "amount"])
                 .groupBy(F.window("ts", "10 seconds"), "card").count()
                 .writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", str(Path(tmp) / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
    gateway = spark.sparkContext._gateway
    spark.stop()
    # the JVM writes the archive as it exits, which it does once its stdin (the gateway's) closes
    gateway.proc.stdin.close()
    gateway.proc.wait(EXIT_TIMEOUT_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
