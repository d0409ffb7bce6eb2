package cardstream.state;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.DataSourceRDD;
import org.apache.spark.sql.execution.datasources.v2.DataSourceRDDPartition;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.types.UTF8String;

import cardstream.parse.DecisionCheck;
import scala.Option;

/**
 * Exactly-once's dedupe where the data already sits: each Kafka partition's txn ids, kept beside
 * the query's checkpoint and checked in the task that reads the partition.
 *
 * <p>Why: the decisions topic is keyed by txn_id, so every copy of a decision lands in the same
 * partition; Spark's own dedupe (`dropDuplicatesWithinWatermark`) first shuffles every row by
 * txn_id to its state store's partition, a second stage that cost exactly-once about a tenth of
 * its time (bench/RESULTS.md#throughput). Here the batch is counted in the stage that reads it.
 *
 * <p>What it promises, per Kafka partition: a txn_id counts once; a copy counts again only when
 * its first copy's Kafka time (append time, `kafka_ts`) is more than the retention older than the
 * newest record the partition held before the batch, so a batch's answer depends on the records
 * before it and never on how they were cached, batched or replayed.
 *
 * <p>Durability: batch N's changes (the ids it counted, with their time) go to `N.delta` in the
 * partition's folder, written to a temporary file and renamed, as Spark's state stores write
 * theirs; every `snapshotEvery` deltas the live ids go to `N.snapshot` and files older than the
 * snapshot before it are deleted. A batch is only ever run after the one before it committed, so
 * files of batch N and later found when batch N starts are an earlier attempt's, uncommitted:
 * they are deleted and the state is the latest snapshot before N plus the deltas after it (a
 * partition without rows in a batch writes no file). Tables stay loaded in the JVM between
 * batches and are rebuilt from the files only when another attempt or process wrote there.
 */
public final class PartitionDedupe {
  private static final int MAGIC = 0x43534450; // "CSDP"
  private static final int FORMAT = 1;
  private static final String KAFKA_INPUT = "org.apache.spark.sql.kafka010.KafkaBatchInputPartition";
  private static final long MAX_RESERVE = 1 << 20; // ids made room for ahead of a batch, at most
  private static final String DELTA = ".delta";
  private static final String SNAPSHOT = ".snapshot";
  private static final long WAIT_MS = 60_000;
  private static final ConcurrentHashMap<String, Partition> LOADED = new ConcurrentHashMap<>();
  /** Per state folder, each partition's last report {ids, bytes, newest Kafka time}: the state's
   *  size over all partitions, those without rows in a batch included (kept on the driver). */
  private static final ConcurrentHashMap<String, Map<Long, long[]>> REPORTED = new ConcurrentHashMap<>();

  private PartitionDedupe() {
  }

  /**
   * Count batch `batchId` of `df` (Kafka rows of `decisions`: the source's key, value, partition
   * and timestamp, by name), each valid decision's txn_id once per Kafka partition within the
   * retention; a record breaking the contract (`check`) is counted as rejected, never as a decision
   * and never in the state. Returns {counted, fraud among them, copies not counted, records whose
   * Kafka key is not their txn_id (their copies may sit in another partition), ids held, bytes they
   * take, the newest Kafka time (µs; Long.MIN_VALUE before any), records rejected}: ids, bytes and
   * newest over every partition reported. Why the check here: the batch is read, checked and
   * counted in one pass over the source's rows (no generated rule, no row built for the dedupe).
   */
  public static long[] count(Dataset<Row> df, DecisionCheck check, String dir, long batchId, long retentionMs,
                             int snapshotEvery) {
    return count(df, check, dir, batchId, retentionMs, snapshotEvery, null);
  }

  /** `count` of the rows DecisionCheck.rows(df, streamPlan) gives. */
  public static long[] count(Dataset<Row> df, DecisionCheck check, String dir, long batchId, long retentionMs,
                             int snapshotEvery, SparkPlan streamPlan) {
    if (snapshotEvery < 1 || retentionMs < 0 || batchId < 0) {
      throw new IllegalArgumentException("PartitionDedupe: batch " + batchId + ", retention " + retentionMs
          + " ms, a snapshot every " + snapshotEvery + " deltas");
    }
    final String root = Paths.get(dir).toAbsolutePath().toString();
    final long retention = retentionMs * 1000; // Spark timestamps are µs
    final int[] at = DecisionCheck.ordinals(df.schema());
    RDD<InternalRow> input = DecisionCheck.rows(df, streamPlan);
    final Map<Integer, Long> expected = expectedRows(input);
    FlatMapFunction<Iterator<InternalRow>, long[]> task = rows -> run(rows, at, check, root, batchId, retention,
        snapshotEvery, expected);
    List<long[]> parts = input.toJavaRDD().mapPartitions(task).collect();
    long[] total = new long[8];
    Map<Long, Integer> seen = new HashMap<>();
    Map<Long, long[]> reported = REPORTED.computeIfAbsent(root, k -> new ConcurrentHashMap<>());
    for (long[] p : parts) {
      total[7] += p[8];
      if (seen.merge(p[0], 1, Integer::sum) > 1) {
        // two tasks wrote the same partition's delta: neither holds the other's ids
        drop(root, (int) p[0], batchId);
        throw new IllegalStateException("PartitionDedupe: Kafka partition " + p[0] + " came in more than one task of batch "
            + batchId + "; the dedupe needs each partition's records in one task (Spark's Kafka source reads them so "
            + "unless minPartitions or maxRecordsPerPartition splits them)");
      }
      for (int i = 0; i < 4; i++) {
        total[i] += p[i + 1];
      }
      reported.put(p[0], new long[] {p[5], p[6], p[7]});
    }
    total[6] = Long.MIN_VALUE;
    for (long[] r : reported.values()) {
      total[4] += r[0];
      total[5] += r[1];
      total[6] = Math.max(total[6], r[2]);
    }
    return total;
  }

  /**
   * The records each Kafka partition brings in the batch, from the source's offset ranges (none
   * known when the rows come from elsewhere: a test's frame). Why: a partition's table then grows
   * once, before the batch, instead of doubling while it is counted (each doubling moves every id).
   */
  public static Map<Integer, Long> expectedRows(RDD<?> rdd) {
    Map<Integer, Long> out = new HashMap<>();
    try {
      RDD<?> r = rdd;
      for (int depth = 0; depth < 16; depth++) {
        if (r instanceof DataSourceRDD) {
          for (org.apache.spark.Partition p : r.partitions()) {
            if (p instanceof DataSourceRDDPartition) {
              Option<InputPartition> in = ((DataSourceRDDPartition) p).inputPartition();
              // the Kafka connector's KafkaBatchInputPartition (read by name: the engine's jar is
              // built without the connector on its class path)
              if (in.isDefined() && in.get().getClass().getName().equals(KAFKA_INPUT)) {
                Object range = in.get().getClass().getMethod("offsetRange").invoke(in.get());
                out.merge((Integer) range.getClass().getMethod("partition").invoke(range),
                    (Long) range.getClass().getMethod("size").invoke(range), Long::sum);
              }
            }
          }
          return out;
        }
        if (r.dependencies().size() != 1) {
          return out;
        }
        r = r.dependencies().head().rdd();
      }
    } catch (LinkageError | ReflectiveOperationException | RuntimeException e) { // another Spark's: no hint, the tables grow as they fill
      return new HashMap<>();
    }
    return out;
  }

  /** Forget every loaded table (the files stay): a bench between runs, a test between "restarts". */
  public static void unloadAll() {
    LOADED.clear();
    REPORTED.clear();
  }

  private static void drop(String root, int partition, long batchId) {
    Partition p = LOADED.remove(root + "/" + partition);
    if (p != null) {
      synchronized (p) {
        p.through = Partition.INVALID;
      }
    }
    try {
      Files.deleteIfExists(Paths.get(root, Integer.toString(partition), batchId + DELTA));
      Files.deleteIfExists(Paths.get(root, Integer.toString(partition), batchId + SNAPSHOT));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static Iterator<long[]> run(Iterator<InternalRow> rows, int[] at, DecisionCheck check, String root,
                                      long batchId, long retention, int snapshotEvery, Map<Integer, Long> expected)
      throws IOException {
    Map<Integer, Partition> open = new TreeMap<>();
    Partition cur = null;
    int curId = Integer.MIN_VALUE;
    try {
      while (rows.hasNext()) {
        InternalRow row = rows.next();
        int p = row.getInt(at[2]);
        if (p != curId || cur == null) {
          cur = open.get(p);
          if (cur == null) {
            cur = LOADED.computeIfAbsent(root + "/" + p, k -> new Partition(Paths.get(root, Integer.toString(p))));
            cur.begin(batchId, retention, !open.isEmpty());
            cur.ids.reserve(Math.min(expected.getOrDefault(p, 0L), MAX_RESERVE)); // room made once
            open.put(p, cur);
          }
          curId = p;
        }
        Object[] a = check.decision(row, at);
        if (a == null) { // breaks the contract: reported, never counted, no part of the state
          cur.rejected++;
          continue;
        }
        UTF8String id = check.txnId(a);
        cur.add(id, check.fraud(a), row.getLong(at[3]), Partition.keyed(row, at[0], id));
      }
      List<long[]> out = new ArrayList<>();
      for (Map.Entry<Integer, Partition> e : open.entrySet()) {
        Partition p = e.getValue();
        p.commit(snapshotEvery);
        out.add(new long[] {e.getKey(), p.counted, p.fraud, p.copies, p.unkeyed, p.ids(), p.bytes(),
            p.maxTs, p.rejected});
      }
      return out.iterator();
    } finally {
      for (Partition p : open.values()) {
        p.end();
      }
    }
  }

  /** One Kafka partition's ids: a table in the JVM and the files it is rebuilt from. */
  static final class Partition {
    static final long INVALID = -2;
    final Path dir;
    IdTable ids = new IdTable();
    long through = INVALID;           // the batch whose changes the table holds last (-1: none)
    long maxTs = Long.MIN_VALUE;      // the newest Kafka time (µs) of the records through it
    long lastSnapshot = -1;
    int deltas;                       // deltas written or read since that snapshot
    boolean busy;
    // the batch in progress
    long batchId;
    long retention;                   // µs
    long horizon;                     // a first copy older than this no longer holds its id
    long batchMaxTs;
    long counted, fraud, copies, unkeyed;
    long rejected;                    // records breaking the contract: not counted
    Path tmp;
    Out out;
    // records read but not yet counted (`add`, `drain`)
    private static final int AHEAD = 16;
    private byte[] held = new byte[AHEAD * 64];
    private final int[] heldOffset = new int[AHEAD];
    private final int[] heldSize = new int[AHEAD];
    private final int[] heldHash = new int[AHEAD];
    private final long[] heldTs = new long[AHEAD];
    private final boolean[] heldFraud = new boolean[AHEAD];
    private int n;
    private int heldBytes;
    long touched; // the slots read ahead (kept, so the reads are not optimised away)

    Partition(Path dir) {
      this.dir = dir;
    }

    synchronized void begin(long batchId, long retention, boolean holdingOthers) throws IOException {
      // another task still on it (a stopped query's, a cancelled attempt's): wait for it to end,
      // as the state stores wait for their lock; unless this task holds other partitions (then the
      // source mixes partitions across tasks, and two such tasks would wait for each other)
      if (busy && holdingOthers) {
        throw new IllegalStateException("PartitionDedupe: " + dir + " came in more than one task of batch " + batchId
            + "; the dedupe needs each Kafka partition's records in one task");
      }
      long deadline = System.nanoTime() + WAIT_MS * 1_000_000;
      while (busy) {
        long left = (deadline - System.nanoTime()) / 1_000_000;
        if (left <= 0) {
          throw new IllegalStateException("PartitionDedupe: " + dir + " is still being updated by another task after "
              + WAIT_MS + " ms");
        }
        try {
          wait(left);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IllegalStateException("PartitionDedupe: interrupted waiting for " + dir, e);
        }
      }
      busy = true;
      try {
        Files.createDirectories(dir);
        TreeMap<Long, List<String>> files = list();
        delete(files.tailMap(batchId, true)); // an uncommitted attempt's
        TreeMap<Long, List<String>> before = new TreeMap<>(files.headMap(batchId, false));
        boolean current = through != INVALID && through < batchId
            && (before.isEmpty() || before.lastKey() <= through);
        through = INVALID; // until this batch's delta is in place
        if (!current) {
          rebuild(before);
          through = INVALID;
        }
        this.retention = retention;
        this.batchId = batchId;
        this.horizon = maxTs == Long.MIN_VALUE ? Long.MIN_VALUE : maxTs - retention;
        batchMaxTs = maxTs;
        counted = fraud = copies = unkeyed = rejected = 0;
        n = heldBytes = 0;
        tmp = dir.resolve("." + batchId + DELTA + ".tmp");
        out = open(tmp, batchId);
      } catch (IOException | RuntimeException e) { // not begun: the next task finds it free, to rebuild
        through = INVALID;
        busy = false;
        notifyAll();
        throw e;
      }
    }

    /** A valid decision's id (read in place), Kafka time and fraud flag; `keyed`: its Kafka key is its id. */
    void add(UTF8String id, boolean isFraud, long ts, boolean keyed) throws IOException {
      if (ts > batchMaxTs) {
        batchMaxTs = ts;
      }
      Object base = id.getBaseObject();
      long offset = id.getBaseOffset();
      int size = id.numBytes();
      if (!keyed) {
        unkeyed++;
      }
      // held back a few records, counted together (`drain`): their slots are read one after
      // another, so the table's cache misses of several ids overlap (the rows are reused: copied)
      if (heldBytes + size > held.length) {
        held = Arrays.copyOf(held, Math.max(held.length * 2, heldBytes + size));
      }
      long at = Platform.BYTE_ARRAY_OFFSET + heldBytes;
      Platform.copyMemory(base, offset, held, at, size);
      heldOffset[n] = heldBytes;
      heldSize[n] = size;
      heldTs[n] = ts;
      heldFraud[n] = isFraud;
      heldHash[n] = IdTable.hash(held, at, size);
      heldBytes += size;
      if (++n == AHEAD) {
        drain();
      }
    }

    /** Count the held records, in the order they came. */
    private void drain() throws IOException {
      long t = 0;
      for (int k = 0; k < n; k++) {
        t += ids.slotAt(heldHash[k]);
      }
      touched += t;
      for (int k = 0; k < n; k++) {
        long offset = Platform.BYTE_ARRAY_OFFSET + heldOffset[k];
        int size = heldSize[k];
        int slot = ids.find(held, offset, size, heldHash[k]);
        if (slot >= 0 && ids.value(slot) >= horizon) {
          copies++;
          continue;
        }
        long seen = Math.max(heldTs[k], horizon); // a copy later in this batch always finds it
        if (slot >= 0) {
          ids.setValue(slot, seen);
        } else {
          ids.insert(-1 - slot, heldHash[k], held, offset, size, seen);
        }
        out.putInt(size);
        out.put(held, offset, size);
        out.putLong(seen);
        counted++;
        if (heldFraud[k]) {
          fraud++;
        }
      }
      n = 0;
      heldBytes = 0;
    }

    int ids() {
      return ids.size;
    }

    long bytes() {
      return ids.bytes();
    }

    synchronized void commit(int snapshotEvery) throws IOException {
      drain();
      maxTs = batchMaxTs;
      close(out, maxTs);
      out = null;
      Files.move(tmp, dir.resolve(batchId + DELTA), StandardCopyOption.ATOMIC_MOVE,
          StandardCopyOption.REPLACE_EXISTING);
      deltas++;
      if (deltas >= snapshotEvery) {
        snapshot();
      }
      through = batchId;
    }

    synchronized void end() {
      if (out != null) { // failed before its commit: the table is rebuilt next time
        try {
          out.close();
          Files.deleteIfExists(tmp);
        } catch (IOException ignored) {
          // a stray temporary file is never read
        }
        out = null;
        through = INVALID;
      }
      busy = false;
      notifyAll();
    }

    /** The live ids at this batch, then the files no replay can need (before the last snapshot) go. */
    private void snapshot() throws IOException {
      long horizonNext = maxTs == Long.MIN_VALUE ? Long.MIN_VALUE : horizon(maxTs);
      ids = ids.retainFrom(horizonNext);
      Path t = dir.resolve("." + batchId + SNAPSHOT + ".tmp");
      Out s = open(t, batchId);
      for (int i = ids.next(0); i >= 0; i = ids.next(i + 1)) {
        int size = ids.keySizeAt(i);
        s.putInt(size);
        s.put(ids.keySlab(i), ids.keyAt(i), size);
        s.putLong(ids.value(i));
      }
      close(s, maxTs);
      Files.move(t, dir.resolve(batchId + SNAPSHOT), StandardCopyOption.ATOMIC_MOVE,
          StandardCopyOption.REPLACE_EXISTING);
      long keepFrom = lastSnapshot;
      lastSnapshot = batchId;
      deltas = 0;
      if (keepFrom >= 0) {
        delete(list().headMap(keepFrom, false));
      }
    }

    private long horizon(long ts) {
      return ts - retention;
    }

    /** The table as the files before the batch leave it: the latest snapshot, the deltas after it. */
    private void rebuild(TreeMap<Long, List<String>> files) throws IOException {
      ids = new IdTable();
      maxTs = Long.MIN_VALUE;
      lastSnapshot = -1;
      deltas = 0;
      through = -1;
      long from = -1;
      for (Map.Entry<Long, List<String>> f : files.entrySet()) {
        if (f.getValue().contains(f.getKey() + SNAPSHOT)) {
          from = f.getKey();
        }
      }
      for (Map.Entry<Long, List<String>> f : files.tailMap(Math.max(from, 0), true).entrySet()) {
        // a batch's snapshot holds its delta's changes too
        boolean snap = f.getKey() == from;
        read(dir.resolve(f.getKey() + (snap ? SNAPSHOT : DELTA)));
        if (snap) {
          lastSnapshot = f.getKey();
        } else {
          deltas++;
        }
        through = f.getKey();
      }
    }

    private void delete(Map<Long, List<String>> files) throws IOException {
      for (List<String> names : files.values()) {
        for (String name : names) {
          Files.deleteIfExists(dir.resolve(name));
        }
      }
    }

    private void read(Path file) throws IOException {
      try (DataInputStream in = new DataInputStream(new BufferedInputStream(Files.newInputStream(file), 1 << 16))) {
        if (in.readInt() != MAGIC || in.readInt() != FORMAT) {
          throw new IOException("PartitionDedupe: " + file + " is not a dedupe file of format " + FORMAT);
        }
        in.readLong(); // its batch id, named by the file too
        byte[] key = new byte[64];
        for (int size = in.readInt(); size >= 0; size = in.readInt()) {
          if (size > key.length) {
            key = new byte[Math.max(size, key.length * 2)];
          }
          in.readFully(key, 0, size);
          long seen = in.readLong();
          ids.put(key, Platform.BYTE_ARRAY_OFFSET, size, seen);
        }
        long fileMax = in.readLong();
        if (fileMax > maxTs) {
          maxTs = fileMax;
        }
      } catch (EOFException e) {
        throw new IOException("PartitionDedupe: " + file + " is cut short", e);
      }
    }

    /** The partition's files by batch id (a batch's delta, its snapshot, or both). */
    private TreeMap<Long, List<String>> list() throws IOException {
      TreeMap<Long, List<String>> out = new TreeMap<>();
      try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
        for (Path f : ds) {
          String name = f.getFileName().toString();
          String kind = name.endsWith(DELTA) ? DELTA : name.endsWith(SNAPSHOT) ? SNAPSHOT : null;
          if (kind == null || name.startsWith(".")) {
            continue;
          }
          long id;
          try {
            id = Long.parseLong(name.substring(0, name.length() - kind.length()));
          } catch (NumberFormatException e) {
            continue;
          }
          out.computeIfAbsent(id, k -> new ArrayList<>()).add(name);
        }
      } catch (NoSuchFileException e) {
        return out;
      }
      return out;
    }

    private static Out open(Path file, long batchId) throws IOException {
      Out s = new Out(Files.newOutputStream(file));
      s.putInt(MAGIC);
      s.putInt(FORMAT);
      s.putLong(batchId);
      return s;
    }

    private static void close(Out s, long maxTs) throws IOException {
      s.putInt(-1);
      s.putLong(maxTs);
      s.close();
    }

    /** The record's Kafka key (column `key`) is its txn_id, compared in place in the row's bytes when it can be. */
    private static boolean keyed(InternalRow row, int key, UTF8String id) {
      if (row.isNullAt(key)) {
        return false;
      }
      Object base = id.getBaseObject();
      long offset = id.getBaseOffset();
      int size = id.numBytes();
      if (row instanceof UnsafeRow) {
        UnsafeRow u = (UnsafeRow) row;
        long offsetAndSize = u.getLong(key);
        return (int) offsetAndSize == size && ByteArrayMethods.arrayEquals(
            u.getBaseObject(), u.getBaseOffset() + (offsetAndSize >>> 32), base, offset, size);
      }
      byte[] k = row.getBinary(key);
      return k.length == size && ByteArrayMethods.arrayEquals(k, Platform.BYTE_ARRAY_OFFSET, base, offset, size);
    }
  }

  /** A file's bytes, big-endian as DataInputStream reads them, through one buffer with no lock per
   *  write (DataOutputStream over BufferedOutputStream takes one per byte of an int). */
  static final class Out implements java.io.Closeable {
    private final java.io.OutputStream out;
    private final byte[] buf = new byte[1 << 16];
    private int n;

    Out(java.io.OutputStream out) {
      this.out = out;
    }

    void putInt(int v) throws IOException {
      room(4);
      buf[n] = (byte) (v >>> 24);
      buf[n + 1] = (byte) (v >>> 16);
      buf[n + 2] = (byte) (v >>> 8);
      buf[n + 3] = (byte) v;
      n += 4;
    }

    void putLong(long v) throws IOException {
      putInt((int) (v >>> 32));
      putInt((int) v);
    }

    void put(Object base, long offset, int size) throws IOException {
      if (size > buf.length) {
        flush();
        byte[] big = new byte[size];
        Platform.copyMemory(base, offset, big, Platform.BYTE_ARRAY_OFFSET, size);
        out.write(big);
        return;
      }
      room(size);
      Platform.copyMemory(base, offset, buf, Platform.BYTE_ARRAY_OFFSET + n, size);
      n += size;
    }

    private void room(int size) throws IOException {
      if (n + size > buf.length) {
        flush();
      }
    }

    private void flush() throws IOException {
      out.write(buf, 0, n);
      n = 0;
    }

    @Override
    public void close() throws IOException {
      try {
        flush();
      } finally {
        out.close();
      }
    }
  }
}
