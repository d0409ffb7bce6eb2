"""Kafka sources for the Spark jobs, and the JVM-side parsing and validation of transactions.

Parsing stays in Spark SQL expressions (no Python UDF on the hot path). Every record comes out
either as a valid transaction (`dlq_reason` null) or with the reason it is malformed, so the job
can route it to the dead-letter topic instead of dropping it.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from infra import kafka_client
from infra.config import Settings, load
from infra.contracts import (DECISION_FIELDS, MAX_AMOUNT_CENTS, MAX_PAYLOAD_BYTES,
                             REQUIRED_TRANSACTION_FIELDS, TRANSACTION_FIELDS)

_SPARK_TYPES = {str: T.StringType(), int: T.LongType(), float: T.DoubleType(), bool: T.BooleanType()}


def schema_of(fields: dict[str, type]) -> T.StructType:
    return T.StructType([T.StructField(name, _SPARK_TYPES[kind]) for name, kind in fields.items()])


TRANSACTION_SCHEMA = schema_of(TRANSACTION_FIELDS)
# Everything read as text first, so a wrong type is told apart from a missing field.
_RAW_SCHEMA = T.StructType([T.StructField(n, T.StringType()) for n in TRANSACTION_FIELDS]
                           + [T.StructField("_corrupt_record", T.StringType())])


def read_kafka(spark: SparkSession, topic: str, s: Settings | None = None, *,
               starting_offsets: str = "earliest", max_offsets_per_trigger: int | None = None,
               fail_on_data_loss: bool = True, **options) -> DataFrame:
    s = s or load()
    reader = spark.readStream.format("kafka").options(**kafka_client.spark_options(s))
    # read_committed: a transactional writer's aborted records (the fraud job's decisions of a
    # batch that failed) are never read; without transactions it changes nothing
    reader = (reader.option("subscribe", topic)
              .option("kafka.isolation.level", "read_committed")
              .option("startingOffsets", starting_offsets)
              .option("failOnDataLoss", str(fail_on_data_loss).lower()))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def parse_transactions(kafka_df: DataFrame) -> DataFrame:
    """Kafka rows -> transaction columns + `raw` payload + `dlq_reason` (null when valid)."""
    raw = F.col("value").cast("string")
    text = F.from_json(raw, _RAW_SCHEMA, {"mode": "PERMISSIVE",
                                          "columnNameOfCorruptRecord": "_corrupt_record"})
    df = kafka_df.select(raw.alias("raw"), F.col("timestamp").alias("kafka_ts"),
                         F.col("partition"), F.col("offset"), text.alias("t"))
    typed = {name: F.col(f"t.{name}").try_cast(_SPARK_TYPES[kind]) for name, kind in TRANSACTION_FIELDS.items()}
    reason = F.when(F.length("raw") > MAX_PAYLOAD_BYTES, F.lit("oversized payload"))
    reason = reason.when(F.col("t").isNull() | F.col("t._corrupt_record").isNotNull(), F.lit("malformed JSON"))
    for name in REQUIRED_TRANSACTION_FIELDS:
        reason = reason.when(F.col(f"t.{name}").isNull(), F.lit(f"missing field {name}"))
    for name, kind in TRANSACTION_FIELDS.items():
        if kind is not str:
            reason = reason.when(F.col(f"t.{name}").isNotNull() & typed[name].isNull(),
                                 F.lit(f"wrong type for {name}"))
    reason = (reason
              .when((typed["amount_cents"] <= 0) | (typed["amount_cents"] > MAX_AMOUNT_CENTS),
                    F.lit("amount_cents out of range"))
              .when((F.abs(typed["lat"]) > 90) | (F.abs(typed["lon"]) > 180), F.lit("lat/lon out of range")))
    return df.select("raw", "kafka_ts", "partition", "offset",
                     *[col.alias(name) for name, col in typed.items()],
                     reason.alias("dlq_reason"))


def parse_decisions(kafka_df: DataFrame, fields=("txn_id", "card_id", "event_time", "is_fraud")) -> DataFrame:
    """Kafka rows of `decisions` -> the few columns the usage job needs, plus the record's
    Kafka timestamp (`kafka_ts`) and `event_ts` (JVM-side JSON parsing)."""
    schema = schema_of({k: DECISION_FIELDS[k] for k in fields})
    d = F.from_json(F.col("value").cast("string"), schema)
    return (kafka_df.select(d.alias("d"), F.col("timestamp").alias("kafka_ts"))
            .select("d.*", "kafka_ts")
            .where(F.col("txn_id").isNotNull())
            .withColumn("event_ts", F.timestamp_millis("event_time")))
