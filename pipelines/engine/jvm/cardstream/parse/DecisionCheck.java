package cardstream.parse;

import java.io.Serializable;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.rdd.MapPartitionsRDD;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.execution.InputAdapter;
import org.apache.spark.sql.execution.ProjectExec;
import org.apache.spark.sql.execution.RDDScanExec;
import org.apache.spark.sql.execution.SQLExecutionRDD;
import org.apache.spark.sql.execution.datasources.v2.DataSourceRDD;
import org.apache.spark.sql.execution.datasources.v2.MicroBatchScanExec;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.WholeStageCodegenExec;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.immutable.Seq;

/**
 * Whether a Kafka record of `decisions` keeps the decision contract, in the JVM and in the pass
 * that counts it: what the usage job's guarantee queries ask of every record. The contract is
 * pipelines/engine/sources.py `decision_reasons` (Spark SQL expressions, which also name the reason
 * of a record refused); this is the same verdict over the same reader's answers (JsonFields), so a
 * query counts a batch in one pass over the Kafka rows, with no generated rule, no row built for
 * the count and no copy of the record for them (tests/spark/test_decision_check.py gives both every
 * kind of record and compares their verdicts).
 *
 * <p>A decision is valid when its value is 1..maxPayloadBytes bytes of valid UTF-8 JSON, an object
 * whose txn_id and card_id are strings of 1..maxIdBytes bytes, not spaces only, whose is_fraud is a
 * boolean and whose event_time is an integral number of milliseconds in [minEventTimeMs, the
 * record's Kafka time + futureMs].
 */
public final class DecisionCheck implements Serializable {
  private static final long serialVersionUID = 1L;
  private final JsonFields reader;
  private final int maxPayloadBytes;
  private final int maxIdBytes;
  private final long minEventTimeMs;
  private final long futureMs;
  private final int txnId;
  private final int cardId;
  private final int eventTime;
  private final int isFraud;

  /** `reader`: a JsonFields reading txn_id, card_id (str), event_time (int) and is_fraud (bool),
   *  as sources.json_fields builds it; the bounds from infra/contracts.py and the settings. */
  public DecisionCheck(JsonFields reader, int maxPayloadBytes, int maxIdBytes, long minEventTimeMs, long futureMs) {
    this.reader = reader;
    this.maxPayloadBytes = maxPayloadBytes;
    this.maxIdBytes = maxIdBytes;
    this.minEventTimeMs = minEventTimeMs;
    this.futureMs = futureMs;
    this.txnId = reader.slotOf("txn_id", "str");
    this.cardId = reader.slotOf("card_id", "str");
    this.eventTime = reader.slotOf("event_time", "int");
    this.isFraud = reader.slotOf("is_fraud", "bool");
  }

  /** A record's value -> the reader's answers, or null when its size alone refuses it or it is not
   *  valid UTF-8 JSON. */
  public Object[] read(byte[] value) {
    if (value == null || value.length == 0 || value.length > maxPayloadBytes) {
      return null;
    }
    return reader.answers(value);
  }

  /** `read` of a row's binary column, in place when the row holds its bytes in an array (the
   *  source's rows do): the value's strings are then views of the row, valid until the next row. */
  public Object[] read(InternalRow row, int ordinal) {
    if (row.isNullAt(ordinal)) {
      return null;
    }
    if (row instanceof UnsafeRow && ((UnsafeRow) row).getBaseObject() instanceof byte[]) {
      UnsafeRow u = (UnsafeRow) row;
      long offsetAndSize = u.getLong(ordinal);
      int size = (int) offsetAndSize;
      if (size == 0 || size > maxPayloadBytes) {
        return null;
      }
      int from = (int) (u.getBaseOffset() - Platform.BYTE_ARRAY_OFFSET + (offsetAndSize >>> 32));
      return reader.answers((byte[]) u.getBaseObject(), from, from + size);
    }
    return read(row.getBinary(ordinal));
  }

  /** The verdict on `read`'s answers for a record appended at `kafkaTsMicros` (`hasTs` false: the
   *  record has no Kafka time, so no time is in its bounds). */
  public boolean valid(Object[] a, boolean hasTs, long kafkaTsMicros) {
    if (a == null || !Boolean.TRUE.equals(a[0]) || !present(a, txnId) || !present(a, cardId)
        || !present(a, eventTime) || !present(a, isFraud) || !id(a[txnId + 3]) || !id(a[cardId + 3])) {
      return false;
    }
    Object d = a[eventTime + 3];
    Object l = a[eventTime + 4];
    if (!(d instanceof Double) || !(l instanceof Long) || !hasTs) {
      return false;
    }
    double x = (Double) d;
    long t = (Long) l;
    // integral as the rule's rint(d) == d; the bound as unix_millis(kafka_ts) + the future allowed
    return Double.isFinite(x) && Math.rint(x) == x && t >= minEventTimeMs
        && t <= Math.floorDiv(kafkaTsMicros, 1000L) + futureMs;
  }

  /** A Kafka row's answers when it is a valid decision, else null (`at`: `ordinals`). */
  public Object[] decision(InternalRow row, int[] at) {
    Object[] a = read(row, at[1]);
    boolean hasTs = !row.isNullAt(at[3]);
    return valid(a, hasTs, hasTs ? row.getLong(at[3]) : 0L) ? a : null;
  }

  /** The record's own verdict (tests compare it with the contract's expressions record by record). */
  public boolean valid(byte[] value, long kafkaTsMicros) {
    return valid(read(value), true, kafkaTsMicros);
  }

  /** A valid decision's txn_id (a view of its bytes). */
  public UTF8String txnId(Object[] a) {
    return (UTF8String) a[txnId + 3];
  }

  /** A valid decision's is_fraud. */
  public boolean fraud(Object[] a) {
    return (Boolean) a[isFraud + 3];
  }

  /** Absent or null (`m_`) false and of its kind's JSON type (`ok_`). */
  private static boolean present(Object[] a, int slot) {
    return Boolean.FALSE.equals(a[slot + 1]) && Boolean.TRUE.equals(a[slot + 2]);
  }

  /** Not empty, not spaces only (trim's spaces), at most maxIdBytes bytes. */
  private boolean id(Object v) {
    if (!(v instanceof UTF8String)) {
      return false;
    }
    UTF8String s = (UTF8String) v;
    int n = s.numBytes();
    return n > 0 && n <= maxIdBytes && !(s.getByte(0) == ' ' && s.trim().numBytes() == 0);
  }

  /**
   * The rows of `df` to count. A foreachBatch batch is the streaming plan's rows behind an
   * RDDScanExec, which copies every row into another UnsafeRow (both copies of the record's bytes:
   * the no-op sink's plan has neither); the count reads the streaming plan's rows themselves, as
   * they are. Any other plan (a test's frame, a batch with a column changed) runs as planned.
   */
  public static RDD<InternalRow> rows(Dataset<Row> df) {
    return rows(df, null);
  }

  /**
   * `rows(df)` of a foreachBatch batch whose streaming query's plan of this batch (`streamPlan`,
   * its lastExecution's; null: not known) is Spark's Project of the Kafka scan's own columns over
   * the scan: a copy of every row and nothing else (the plan a query that adds no step to the
   * source gets). The rows are then the scan's, before that copy (the scan's step still counts
   * them: the query's numInputRows). Anything else, `rows(df)`.
   */
  public static RDD<InternalRow> rows(Dataset<Row> df, SparkPlan streamPlan) {
    SparkPlan plan = unwrapped(df.queryExecution().executedPlan());
    if (!(plan instanceof RDDScanExec)) {
      return df.queryExecution().toRdd(); // a step added to the batch: run as planned
    }
    RDD<InternalRow> batch = ((RDDScanExec) plan).rdd();
    RDD<InternalRow> scanned = streamPlan == null ? null : scanned(batch, streamPlan);
    return scanned != null ? scanned : batch;
  }

  /** A plan without its whole-stage codegen wrapper. */
  private static SparkPlan unwrapped(SparkPlan plan) {
    return plan instanceof WholeStageCodegenExec ? ((WholeStageCodegenExec) plan).child() : plan;
  }

  /**
   * The batch of `df` for a second pass (the rejected records' reasons): read again from the
   * source, under the scan's step, when `streamPlan` is the copy alone (`rows(df, streamPlan)`);
   * else `df`. Why: that step counts the query's input rows, so a pass through it again counted
   * a batch's records twice in its progress (numInputRows, the Checkpoints page's rows).
   */
  public static Dataset<Row> again(Dataset<Row> df, SparkPlan streamPlan) {
    RDD<InternalRow> rows = rows(df, streamPlan);
    if (rows instanceof MapPartitionsRDD && only(rows) instanceof DataSourceRDD) {
      @SuppressWarnings("unchecked")
      RDD<InternalRow> source = (RDD<InternalRow>) only(rows);
      return df.sparkSession().internalCreateDataFrame(source, df.schema(), false);
    }
    return df;
  }

  /** The scan's rows under `batch` when `plan` copies them and nothing else, else null. */
  static RDD<InternalRow> scanned(RDD<InternalRow> batch, SparkPlan streamPlan) {
    SparkPlan plan = unwrapped(streamPlan);
    if (!(plan instanceof ProjectExec)) {
      return null;
    }
    ProjectExec project = (ProjectExec) plan;
    SparkPlan child = project.child();
    if (child instanceof InputAdapter) {
      child = ((InputAdapter) child).child();
    }
    if (!(child instanceof MicroBatchScanExec)) {
      return null;
    }
    Seq<NamedExpression> list = project.projectList();
    Seq<Attribute> columns = child.output();
    if (list.size() != columns.size()) {
      return null;
    }
    for (int i = 0; i < list.size(); i++) {
      if (!(list.apply(i) instanceof Attribute) || !((Attribute) list.apply(i)).semanticEquals(columns.apply(i))) {
        return null;
      }
    }
    // its RDDs: the SQL execution's, the Project's, the scan's step (counting rows), the source's
    RDD<?> r = batch instanceof SQLExecutionRDD ? only(batch) : batch;
    RDD<?> step = r instanceof MapPartitionsRDD ? only(r) : null;
    if (step instanceof MapPartitionsRDD && only(step) == ((MicroBatchScanExec) child).inputRDD()) {
      @SuppressWarnings("unchecked")
      RDD<InternalRow> out = (RDD<InternalRow>) step;
      return out;
    }
    return null;
  }

  private static RDD<?> only(RDD<?> r) {
    return r.dependencies().size() == 1 ? r.dependencies().head().rdd() : null;
  }

  /** The ordinals of the Kafka columns a count reads (key, value, partition, timestamp), by name. */
  public static int[] ordinals(StructType schema) {
    return new int[] {schema.fieldIndex("key"), schema.fieldIndex("value"), schema.fieldIndex("partition"),
        schema.fieldIndex("timestamp")};
  }

  /** A batch of Kafka rows of `decisions` (the source's columns, by name) -> {valid decisions, of
   *  them fraud, records breaking the contract}: at-most-once's and at-least-once's count, in the
   *  stage that reads the records. */
  public static long[] count(Dataset<Row> df, DecisionCheck check) {
    return count(df, check, null);
  }

  /** `count` of the rows `rows(df, streamPlan)` gives. */
  public static long[] count(Dataset<Row> df, DecisionCheck check, SparkPlan streamPlan) {
    final int[] at = ordinals(df.schema());
    FlatMapFunction<Iterator<InternalRow>, long[]> task = rows -> {
      long valid = 0;
      long fraud = 0;
      long rejected = 0;
      while (rows.hasNext()) {
        Object[] a = check.decision(rows.next(), at);
        if (a != null) {
          valid++;
          if (check.fraud(a)) {
            fraud++;
          }
        } else {
          rejected++;
        }
      }
      return List.of(new long[] {valid, fraud, rejected}).iterator();
    };
    long[] total = new long[3];
    for (long[] part : rows(df, streamPlan).toJavaRDD().mapPartitions(task).collect()) {
      for (int i = 0; i < 3; i++) {
        total[i] += part[i];
      }
    }
    return total;
  }
}
