"""Kafka sources for the Spark jobs, and the JVM-side parsing and validation of their records.

Parsing and validation stay in the JVM: Spark SQL expressions and one Java function (no Python
UDF on the hot path). Every
transaction comes out either valid (`dlq_reason` null) or with the reason it breaks the contract
(infra/contracts.py states it), so the job routes it to the dead-letter topic instead of dropping
it; nothing invalid reaches `timestamp_millis`, state, windows or watermarks.

How: the Kafka value's size is its byte length; UTF-8 validity is checked on the raw bytes (by
`json_fields`' scan, is_valid_utf8 only for what it refuses);
`json_fields` (the JVM expression cardstream.parse.JsonFieldsExpression) reads the bytes as
`try_parse_json` reads the text (never raises: null for anything that is not JSON, nested too deep,
or has a duplicate name): a plain flat object, as producers write them, by a scan of its bytes,
anything else by Spark's own VariantBuilder; and gives each field's JSON type, as `schema_of_variant` names
it, and its value, as `try_variant_get` reads it, so a number where a string id belongs, or a
string where a number belongs, is told apart. (Those expressions gave the same answers for
several µs more CPU a record, bench/RESULTS.md#throughput: `try_parse_json` makes a JsonFactory per
record, and Spark's variant cast builds a Literal and a Cast for every value it converts.)
Times are compared with bounds scaled per clock unit; no arithmetic touches the value itself, so
no input can overflow. `now` is the record's own Kafka timestamp: the time the broker appended
it (every topic is created with LogAppendTime), the same clock the auditor checks records with,
so a record gets the same verdict on every replay, in every batch it could fall into, and from
the auditor. (Not `current_timestamp()`: Spark writes the batch's time into the generated code as
a constant, so every micro-batch compiled its parsing anew, about 100 ms per batch and query.)

A record carrying infra.histories.REPLAY_HEADER (a replayed history; the Kafka source reads the
headers) has its own event-time rule and may have a zero amount; a transaction without a place
(lat and lon both absent) is valid (infra/contracts.py states both).
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from infra import kafka_client
from infra.config import Settings, load
from infra.contracts import (CURRENCY_FORM, DEAD_LETTER_HEAD_BYTES, DECISION_FIELDS, DECISION_MIN_EVENT_TIME_MS,
                             ID_FIELDS, MAX_AMOUNT_CENTS, MAX_ID_BYTES, MAX_PAYLOAD_BYTES, REQUIRED_TRANSACTION_FIELDS,
                             PLACE_FIELDS, TIME_FIELDS, TRANSACTION_FIELDS)
from infra.histories import HISTORY_MIN_EVENT_TIME_MS, REPLAY_HEADER

_SPARK_TYPES = {str: T.StringType(), int: T.LongType(), float: T.DoubleType(), bool: T.BooleanType()}
_KINDS = {str: "str", int: "int", float: "float", bool: "bool"}
_VALUE_PREFIX = {str: "s", bool: "b"}
# the fields of a decision the usage job reads and checks
DECISION_CHECKED = ("txn_id", "card_id", "event_time", "is_fraud")
DECISIONS_REJECTED = "rejected_decisions"  # the observed metric of parse_decisions


def schema_of(fields: dict[str, type]) -> T.StructType:
    return T.StructType([T.StructField(name, _SPARK_TYPES[kind]) for name, kind in fields.items()])


TRANSACTION_SCHEMA = schema_of(TRANSACTION_FIELDS)


def read_kafka(spark: SparkSession, topic: str, s: Settings | None = None, *,
               starting_offsets: str = "earliest", max_offsets_per_trigger: int | None = None,
               fail_on_data_loss: bool = True, headers: bool = True, **options) -> DataFrame:
    """The Kafka source on `topic`; `headers` False when the reader never looks at them (the
    usage job's guarantee queries): the source then builds no headers array per record."""
    s = s or load()
    reader = spark.readStream.format("kafka").options(**kafka_client.spark_options(s))
    # read_committed: a transactional writer's aborted records (the fraud job's decisions of a
    # batch that failed) are never read; without transactions it changes nothing
    reader = (reader.option("subscribe", topic)
              .option("kafka.isolation.level", "read_committed")
              # Spark's reader asks for the partition's offset range after every poll, on the same
              # connection as the consumer's next (pipelined) fetch; the broker answers a
              # connection's requests in order, so at Kafka's default 500 ms long poll each ask
              # waited out that fetch: on `decisions`, whose records past the open transaction are
              # invisible, every task did (a usage batch of 700 rows took 3.4 s, its CPU 12 ms)
              .option("kafka.fetch.max.wait.ms", str(s.spark_fetch_max_wait_ms))
              # and after every poll it seeks and asks that range again (two offset requests): at
              # Kafka's 500 records a poll, every 500 records; at 5,000 a poll hands Spark about a
              # whole fetch (bench/RESULTS.md#throughput: every query faster)
              .option("kafka.max.poll.records", str(s.spark_max_poll_records))
              .option("startingOffsets", starting_offsets)
              # the records' headers (a replay's REPLAY_HEADER: its own time rule, see
              # infra/contracts.py): one more column, null for a record without headers
              .option("includeHeaders", str(headers).lower())
              .option("failOnDataLoss", str(fail_on_data_loss).lower()))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def json_fields_type(fields: dict[str, type]) -> T.StructType:
    """What `json_fields` returns for `fields`: whether the JSON is an object (`is_object`), then
    each field's JSON type `t_<name>`, whether it is absent or null (`m_`), whether its type is its
    kind's (`ok_`: a string, a boolean, a number), and its value as a string (`s_`), a boolean
    (`b_`), or a double (`d_`) and, for integers, a long (`l_`)."""
    out = [T.StructField("is_object", T.BooleanType())]
    for n, kind in fields.items():
        out += [T.StructField(f"t_{n}", T.StringType()), T.StructField(f"m_{n}", T.BooleanType()),
                T.StructField(f"ok_{n}", T.BooleanType())]
        if kind in _VALUE_PREFIX:
            out.append(T.StructField(f"{_VALUE_PREFIX[kind]}_{n}", _SPARK_TYPES[kind]))
        else:
            out.append(T.StructField(f"d_{n}", T.DoubleType()))
            if kind is int:
                out.append(T.StructField(f"l_{n}", T.LongType()))
    return T.StructType(out)


def json_fields(spark: SparkSession, fields: dict[str, type], how: str = "scan"):
    """A function of a JSON column (its UTF-8 bytes) -> the struct `json_fields_type(fields)`, null
    when it is not valid UTF-8 or not JSON. `how` (JSON_PARSE): "spark", Spark's own functions
    (`variant_fields`); "scan", the JVM expression cardstream.parse.JsonFieldsExpression over
    cardstream.parse.JsonFields (pipelines/engine/jvm), with the session's variant settings. The
    same answers as try_parse_json, then schema_of_variant and try_variant_get per field (a plain
    flat object read by a scan of its bytes, anything else parsed by Spark's own VariantBuilder),
    without a JsonFactory per record, the Literal and Cast objects Spark's variant cast makes for
    every value it converts, or a Java UDF's conversion of its input and result."""
    if how == "spark":
        return variant_fields(fields)
    jvm = spark._jvm
    function = _reader(spark, fields)
    struct = spark._jsparkSession.parseDataType(json_fields_type(fields).json())
    exprs = jvm.org.apache.spark.sql.classic.ExpressionUtils

    def call(column: Column) -> Column:
        from pyspark.sql.classic.column import Column as ClassicColumn

        binary = column.cast("binary")  # bytes stay bytes; a text becomes its UTF-8 bytes
        return ClassicColumn(exprs.column(jvm.cardstream.parse.JsonFieldsExpression(
            exprs.expression(binary._jc), function, struct)))

    return call


def _of_kind(kind: type, t: Column) -> Column:
    """Whether a value's JSON type (schema_of_variant's name) is its kind's: a string, a boolean, a number."""
    if kind is str:
        return t == F.lit("STRING")
    if kind is bool:
        return t == F.lit("BOOLEAN")
    return t.isin("BIGINT", "DOUBLE", "FLOAT") | t.startswith("DECIMAL(")


def variant_fields(fields: dict[str, type]):
    """`json_fields`' answers from Spark's own functions: try_parse_json (on valid UTF-8 only, as
    the scan reads bytes), then per field schema_of_variant and try_variant_get. The reference the
    scan is tested against, and the parse JSON_PARSE=spark runs."""
    def call(column: Column) -> Column:
        text = column.cast("binary").cast("string")
        v = F.when(F.is_valid_utf8(text), F.try_parse_json(text))
        out = [F.schema_of_variant(v).startswith("OBJECT").alias("is_object")]
        for n, kind in fields.items():
            field = F.variant_get(v, f"$.{n}", "variant")
            t = F.schema_of_variant(field)
            out += [t.alias(f"t_{n}"), F.coalesce(t.isNull() | (t == F.lit("VOID")), F.lit(True)).alias(f"m_{n}"),
                    F.coalesce(_of_kind(kind, t), F.lit(False)).alias(f"ok_{n}")]
            if kind in _VALUE_PREFIX:
                out.append(F.try_variant_get(field, "$", _SPARK_TYPES[kind].simpleString()).alias(f"{_VALUE_PREFIX[kind]}_{n}"))
            else:
                out.append(F.try_variant_get(field, "$", "double").alias(f"d_{n}"))
                if kind is int:
                    out.append(F.try_variant_get(field, "$", "bigint").alias(f"l_{n}"))
        return F.when(v.isNotNull(), F.struct(*out))

    return call


def _reader(spark: SparkSession, fields: dict[str, type]):
    """The JVM reader cardstream.parse.JsonFields of `fields`, with the session's variant settings."""
    duplicates, unicode = (spark.conf.get(f"spark.sql.variant.{k}").lower() == "true"
                           for k in ("allowDuplicateKeys", "validateUnicodeInJsonParsing"))
    gateway, jvm = spark.sparkContext._gateway, spark._jvm

    def strings(values: list[str]):
        array = gateway.new_array(jvm.java.lang.String, len(values))
        for i, v in enumerate(values):
            array[i] = v
        return array

    return jvm.cardstream.parse.JsonFields(strings(list(fields)), strings([_KINDS[k] for k in fields.values()]),
                                           duplicates, unicode)


# ------------------------------------------------------------------ the contract as expressions

def _now_ms(now_ms: int | Column | None) -> Column:
    """The processing time in ms: by default the record's Kafka append time (`kafka_ts`, see the
    module's docstring); a fixed value (tests); or a column (the real-time path passes the per-row
    wall clock)."""
    if isinstance(now_ms, Column):
        return now_ms.cast("bigint")
    return F.lit(now_ms).cast("bigint") if now_ms is not None else F.unix_millis(F.col("kafka_ts"))


def _is_finite(d: Column) -> Column:
    return ~F.isnan(d) & (F.abs(d) != F.lit(float("inf")))


def time_reason(name: str, value: Column, d: Column, low: Column, high: Column) -> Column:
    """The reason an integral time is not milliseconds in [low, high] (null: it is). `value` is
    null when the number does not fit a long; `d` is its double. Only the bounds are scaled:
    nothing multiplies the value, so no input can overflow."""
    return (F.when(value.isNull(), F.when(d > 0, F.lit(f"{name} too far in the future"))
                   .otherwise(F.lit(f"{name} too far in the past")))
            .when(value.between(low, high), F.lit(None).cast("string"))
            .when(value.between(F.floor(low / 1_000), F.floor(high / 1_000)), F.lit(f"{name} in seconds"))
            .when(value.between(low * 1_000, high * 1_000), F.lit(f"{name} in microseconds"))
            .when(value.between(low * 1_000_000, high * 1_000_000), F.lit(f"{name} in nanoseconds"))
            .when(value < low, F.lit(f"{name} too far in the past"))
            .otherwise(F.lit(f"{name} too far in the future")))


def _envelope(kafka_df: DataFrame) -> DataFrame:
    """Kafka rows -> size, the bounded head of the payload and its bytes `_json` (null unless its
    size allows parsing it; `json_fields` checks its UTF-8).

    `raw` is what a dead letter needs and no more: the first DEAD_LETTER_HEAD_BYTES bytes of the
    value (bytes, so invalid UTF-8 is never expanded) and the value's size in bytes.
    """
    size = F.octet_length("value")
    parse = (size > 0) & (size <= MAX_PAYLOAD_BYTES)
    # a replayed history's record (infra/contracts.py): it carries the replay header
    replay = (F.coalesce(F.exists("headers", lambda h: h["key"] == F.lit(REPLAY_HEADER)), F.lit(False))
              if "headers" in kafka_df.columns else F.lit(False))
    return kafka_df.select(
        F.struct(F.substring("value", 1, DEAD_LETTER_HEAD_BYTES).alias("head"), size.alias("size")).alias("raw"),
        F.col("timestamp").alias("kafka_ts"), "partition", "offset",
        (F.col("key") if "key" in kafka_df.columns else F.lit(None).cast("binary")).alias("key"),
        size.alias("_size"), replay.alias("_replay"),
        F.when(parse, F.col("value")).alias("_json"))


def _validated(df: DataFrame, fields: dict[str, type], required, low: Column, high: Column,
               times=TIME_FIELDS, replay_times=(), parse: str = "scan") -> DataFrame:
    """An `_envelope` frame -> `fields` typed (by their JSON type, never coerced) + `_reason`.

    Built in small steps (the fields' types and values in one call, then the flags, then the
    values), so each expression is computed once per row and the generated code stays small.
    """
    c = F.col
    numbers = [n for n, k in fields.items() if k in (int, float)]
    df = df.select("*", json_fields(df.sparkSession, fields, parse)(c("_json")).alias("_f"))
    # absent or null, and of its kind's JSON type, as json_fields reads them (null when not JSON)
    flags = [f for n in fields for f in (F.coalesce(c(f"_f.m_{n}"), F.lit(True)).alias(f"_m_{n}"),
                                         c(f"_f.ok_{n}").alias(f"_ok_{n}"))]
    df = df.select("*", *flags, *[c(f"_f.d_{n}").alias(f"_d_{n}") for n in numbers],
                   low.alias("_low"), high.alias("_high"),
                   # a replayed history's times: plausible, however old (infra/contracts.py)
                   *[F.when(c("_replay"), F.lit(HISTORY_MIN_EVENT_TIME_MS).cast("bigint")).otherwise(low)
                     .alias(f"_low_{n}") for n in replay_times if n in fields])
    values = []
    for n, kind in fields.items():
        ok, d = c(f"_ok_{n}"), c(f"_d_{n}")
        if kind is int:  # a JSON number with no fraction: 12, 12.0 and 1.2e3 are; 12.5 and 1e400 are not
            integral = ok & _is_finite(d) & (F.rint(d) == d)  # rint: no division (a double's % is one)
            values += [integral.alias(f"_i_{n}"), F.when(integral, c(f"_f.l_{n}")).alias(n)]
        elif kind is float:
            values.append(F.when(ok, d).alias(n))
        else:
            values.append(F.when(ok, c(f"_f.{_VALUE_PREFIX[kind]}_{n}")).alias(n))
    df = df.select("*", *values)

    keys = F.json_object_keys(c("_json").cast("string"))  # only evaluated for what is not JSON (`_f` null)
    rule = (F.when(c("_size").isNull() | (c("_size") == 0), F.lit("empty payload"))
            .when(c("_size") > MAX_PAYLOAD_BYTES, F.lit("oversized payload"))
            # json_fields gives null for invalid UTF-8 (checked in its scan): only then is it asked
            # (the bytes as they are: Spark does not re-encode them)
            .when(c("_f").isNull() & ~F.is_valid_utf8(c("_json").cast("string")), F.lit("invalid UTF-8"))
            .when(c("_f").isNull() & keys.isNotNull() & (F.size(keys) != F.size(F.array_distinct(keys))),
                  F.lit("duplicate field"))
            .when(c("_f").isNull(), F.lit("malformed JSON"))
            .when(~c("_f.is_object"), F.lit("not a JSON object")))
    for n in required:
        missing = c(f"_m_{n}")
        if n in PLACE_FIELDS and all(p in fields for p in PLACE_FIELDS):  # a place: both or neither
            other = next(p for p in PLACE_FIELDS if p != n)
            missing = missing & ~c(f"_m_{other}")
        rule = rule.when(missing, F.lit(f"missing field {n}"))
    for n in fields:
        rule = rule.when(~c(f"_m_{n}") & ~c(f"_ok_{n}"), F.lit(f"wrong type for {n}"))
    for n, kind in fields.items():
        if kind is str:
            if n in ID_FIELDS:
                # blank: trim's spaces only; trimmed (a copy) only when it starts with one
                blank = (F.octet_length(c(n)) == 0) | (c(n).startswith(" ") & (F.length(F.trim(c(n))) == 0))
                rule = rule.when(blank, F.lit(f"empty {n}"))
            rule = rule.when(F.octet_length(c(n)) > MAX_ID_BYTES, F.lit(f"{n} too long"))
    if "currency" in fields:  # optional: null passes; Java's \A..\z is the whole value (not `$`: "EUR\n")
        rule = rule.when(c("currency").isNotNull() & ~F.regexp_like(c("currency"), F.lit(rf"\A{CURRENCY_FORM}\z")),
                         F.lit("currency not ISO 4217"))
    if "amount_cents" in fields:
        amount = c("amount_cents")
        rule = (rule.when(~c("_i_amount_cents"), F.lit("amount_cents not integral"))
                .when(amount.isNull() | (amount < F.when(c("_replay"), F.lit(0)).otherwise(F.lit(1)))
                      | (amount > MAX_AMOUNT_CENTS), F.lit("amount_cents out of range")))
    if "lat" in fields:
        lat, lon = c("lat"), c("lon")
        rule = (rule.when(~_is_finite(lat) | ~_is_finite(lon), F.lit("lat/lon not finite"))
                .when((F.abs(lat) > 90) | (F.abs(lon) > 180), F.lit("lat/lon out of range")))
    for n in times:
        if n in fields:
            low = c(f"_low_{n}") if n in replay_times else c("_low")
            verdict = time_reason(n, c(n), c(f"_d_{n}"), low, c("_high"))
            rule = rule.when(~c(f"_i_{n}"), F.lit(f"{n} not integral")).when(verdict.isNotNull(), verdict)
    return df.select("*", rule.alias("_reason"))


def parse_transactions(kafka_df: DataFrame, s: Settings | None = None, *,
                       now_ms: int | Column | None = None) -> DataFrame:
    """Kafka rows -> transaction columns + `raw` (head, size) + `dlq_reason` (null when valid).

    `now_ms`: the processing time the window is around (see `_now_ms`); by default the record's
    Kafka append time.
    """
    s = s or load()
    now = _now_ms(now_ms)
    low, high = now - s.validation_past_seconds * 1000, now + s.validation_future_seconds * 1000
    df = _validated(_envelope(kafka_df), TRANSACTION_FIELDS, REQUIRED_TRANSACTION_FIELDS, low, high,
                    replay_times=("event_time",), parse=s.json_parse)
    return df.select("raw", "kafka_ts", "partition", "offset", *TRANSACTION_FIELDS, F.col("_reason").alias("dlq_reason"))


def decision_reasons(kafka_df: DataFrame, s: Settings | None = None, fields=DECISION_CHECKED, *,
                     now_ms: int | Column | None = None) -> DataFrame:
    """Kafka rows of `decisions` -> `fields` typed, `kafka_ts`, `partition`, `offset`, `key` and
    `reason` (null: valid).

    The decision contract: the fields asked for are required; txn_id and card_id non-empty strings
    of at most MAX_ID_BYTES bytes; is_fraud a boolean; event_time integral milliseconds, not
    before DECISION_MIN_EVENT_TIME_MS and not ahead of the processing time by more than
    VALIDATION_FUTURE_SECONDS (the usage job reads decisions long after they were made: replays,
    backlogs; their event time was held to the 7-day window when they were decided); size, UTF-8
    and JSON shape as for transactions.
    """
    s = s or load()
    high = _now_ms(now_ms) + s.validation_future_seconds * 1000
    df = _validated(_envelope(kafka_df), {k: DECISION_FIELDS[k] for k in fields}, list(fields),
                    F.lit(DECISION_MIN_EVENT_TIME_MS).cast("bigint"), high, times=("event_time",), parse=s.json_parse)
    return df.select(*fields, "kafka_ts", "partition", "offset", "key", F.col("_reason").alias("reason"))


def parse_decisions(kafka_df: DataFrame, fields=DECISION_CHECKED,
                    s: Settings | None = None, keep=()) -> DataFrame:
    """Kafka rows of `decisions` -> the few columns the usage job needs, plus the record's
    Kafka timestamp (`kafka_ts`), `event_ts` (JVM-side JSON parsing and validation) and the
    record's Kafka columns named in `keep` (`partition`, `offset`, `key`).

    A decision that breaks the contract (`decision_reasons`) is not counted, and not silently:
    each batch reports how many were rejected, and why, as the observed metric
    `rejected_decisions` of the query's progress (`observedMetrics`: `rejected`, `reasons`).
    """
    checked = decision_reasons(kafka_df, s, fields)
    reason = F.col("reason")
    observed = checked.observe(DECISIONS_REJECTED, F.count_if(reason.isNotNull()).alias("rejected"),
                               F.collect_set(reason).alias("reasons"))
    out = observed.where(reason.isNull()).select(*fields, "kafka_ts", *keep)
    if "event_time" in fields:
        out = out.withColumn("event_ts", F.timestamp_millis("event_time"))
    return out
