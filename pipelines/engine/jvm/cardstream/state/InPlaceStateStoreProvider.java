package cardstream.state;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.io.CompressionCodec;
import org.apache.spark.io.CompressionCodec$;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.ReadStateStore;
import org.apache.spark.sql.execution.streaming.state.StateSchemaProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;
import org.apache.spark.util.TaskCompletionListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.BoxedUnit;

/**
 * A state store kept in memory and updated in place.
 *
 * <p>Why: Spark's HDFS-backed store copies its whole map at every batch, so that the version
 * before survives an aborted batch: O(state) per batch, whatever the batch holds (a usage
 * query's dedupe keeps ten minutes of txn ids). This one keeps one table (entries in byte
 * slabs, found by open addressing), and for the batch in progress an undo list that an abort
 * replays backwards.
 * Durability is Spark's: each version's changes go to `version.delta` as the batch runs and are
 * published by an atomic rename at commit; the maintenance thread writes `version.snapshot`
 * between batches; a version not in memory (a restart, a retried batch) is rebuilt from the
 * latest snapshot and the deltas after it. The files follow the HDFS-backed store's layout (sizes,
 * row bytes, -1 for a removal and at the end, compressed with the store's codec).
 *
 * <p>Keys without a prefix, one column family, one value per key (Spark's dedupe, aggregation
 * and join state); anything else is handed to Spark's HDFS-backed store. Rows `get` returns
 * point into entry bytes that never change, so they stay valid; an iterator hands out one key row and
 * one value row pointed at each entry in turn (as RocksDB's store does). Iteration is weakly
 * consistent, as a ConcurrentHashMap's: removing entries while iterating (a watermark's
 * eviction) is allowed. One task updates a partition's table at a time: another waits for it to
 * commit or end (its completion listener aborts it), for up to `cardstream.state.openWaitMs`, as
 * RocksDB's store waits for its lock.
 */
public final class InPlaceStateStoreProvider implements StateStoreProvider {
  private static final Logger LOG = LoggerFactory.getLogger(InPlaceStateStoreProvider.class);
  private static final String DEFAULT = "default";
  /** Hadoop configuration key: dead bytes a table may hold before it is compacted (32 MB). */
  public static final String COMPACT_ABOVE = "cardstream.state.compactAboveBytes";
  /** Hadoop configuration key: how long a new batch waits for a running task's store (60 s). */
  public static final String OPEN_WAIT_MS = "cardstream.state.openWaitMs";

  private StateStoreProvider delegate;
  private StateStoreId id;
  private StateStoreConf conf;
  private Configuration hadoopConf;
  private int keyFields;
  private int valueFields;
  private Path dir;
  private CheckpointFileManager fm;
  private CompressionCodec codec;

  private long compactAbove = 32L << 20;
  private long openWaitMs = 60_000;
  private Table table = new Table(compactAbove);
  private long loadedVersion = -1; // the version `table` holds; -1: none
  private long lastSnapshot = 0;   // the newest snapshot written or read (0: none)
  private Store open;              // the store updating `table`, between getStore and commit/abort

  @Override
  public void init(StateStoreId stateStoreId, StructType keySchema, StructType valueSchema,
                   KeyStateEncoderSpec keyStateEncoderSpec, boolean useColumnFamilies,
                   StateStoreConf storeConf, Configuration hadoopConf, boolean useMultipleValuesPerKey,
                   Option<StateSchemaProvider> stateSchemaProvider) {
    this.id = stateStoreId;
    if (!(keyStateEncoderSpec instanceof NoPrefixKeyStateEncoderSpec) || useColumnFamilies
        || useMultipleValuesPerKey || storeConf.rowChecksumEnabled()) {
      delegate = new HDFSBackedStateStoreProvider();
      delegate.init(stateStoreId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies,
          storeConf, hadoopConf, useMultipleValuesPerKey, stateSchemaProvider);
      return;
    }
    this.conf = storeConf;
    this.hadoopConf = hadoopConf;
    this.compactAbove = hadoopConf.getLong(COMPACT_ABOVE, compactAbove);
    this.openWaitMs = hadoopConf.getLong(OPEN_WAIT_MS, openWaitMs);
    this.table = new Table(compactAbove);
    this.keyFields = keySchema.length();
    this.valueFields = valueSchema.length();
    this.dir = stateStoreId.storeCheckpointLocation();
    this.fm = CheckpointFileManager.create(dir, hadoopConf);
    SparkConf sparkConf = SparkEnv.get() != null ? SparkEnv.get().conf() : new SparkConf();
    this.codec = CompressionCodec$.MODULE$.createCodec(sparkConf, storeConf.compressionCodec());
    fm.mkdirs(dir);
  }

  @Override
  public StateStoreId stateStoreId() {
    return id;
  }

  @Override
  public StateStore getStore(long version, Option<String> uniqueId, boolean forceSnapshotOnCommit,
                             boolean loadEmpty) {
    if (delegate != null) {
      return delegate.getStore(version, uniqueId, forceSnapshotOnCommit, loadEmpty);
    }
    if (uniqueId.isDefined() || loadEmpty) {
      throw new UnsupportedOperationException(
          "InPlaceStateStoreProvider: state store checkpoint ids and loadEmpty are not supported");
    }
    synchronized (this) {
      // another task's store still open (a zombie or speculative attempt): the table is one, so
      // wait for that task to commit or end (its completion listener aborts it), as RocksDB's
      // store waits for its lock; a store whose task is over, this task's own, or one no task
      // opened is undone
      long deadline = System.nanoTime() + openWaitMs * 1_000_000;
      TaskContext task = TaskContext.get();
      while (open != null && open.owner != null && open.owner != task && !open.owner.isCompleted()) {
        long left = (deadline - System.nanoTime()) / 1_000_000;
        if (left <= 0) {
          throw new IllegalStateException(this + ": version " + open.version + " is still being updated by task "
              + open.owner.taskAttemptId() + " after " + openWaitMs + " ms");
        }
        try {
          wait(left);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IllegalStateException(this + ": interrupted waiting for task " + open.owner.taskAttemptId(), e);
        }
      }
      if (open != null) {  // left neither committed nor aborted: its changes go
        open.rollBack();
        open = null;
      }
      if (loadedVersion != version) {
        table = load(version);
        loadedVersion = version;
      } else if (table.wasteful()) {
        table = table.compacted();
      }
      Store store = new Store(version, table, forceSnapshotOnCommit, true, task);
      open = store;
      if (store.owner != null) {  // a failed or killed task's changes go when it ends
        store.owner.addTaskCompletionListener((TaskCompletionListener) ctx -> store.release());
      }
      return store;
    }
  }

  @Override
  public ReadStateStore getReadStore(long version, Option<String> uniqueId) {
    if (delegate != null) {
      return delegate.getReadStore(version, uniqueId);
    }
    synchronized (this) {
      // the live table when it holds that version; Spark's operators read before they write
      Table t = (loadedVersion == version && open == null) ? table : load(version);
      return new Store(version, t, false, false, null);
    }
  }

  @Override
  public void doMaintenance() {
    if (delegate != null) {
      delegate.doMaintenance();
      return;
    }
    try {
      synchronized (this) {
        if (open == null && loadedVersion > lastSnapshot
            && loadedVersion - lastSnapshot >= conf.minDeltasForSnapshot()) {
          writeFile(snapshotFile(loadedVersion), table);
          lastSnapshot = loadedVersion;
        }
      }
      cleanup();
    } catch (IOException | RuntimeException e) {
      LOG.warn("{}: snapshot or cleanup failed (the deltas stay): {}", this, e.toString());
    }
  }

  @Override
  public void close() {
    if (delegate != null) {
      delegate.close();
      return;
    }
    synchronized (this) {
      table = new Table(compactAbove);
      loadedVersion = -1;
      open = null;
    }
    fm.close();
  }

  @Override
  public scala.collection.immutable.Seq<StateStoreCustomMetric> supportedCustomMetrics() {
    return delegate != null ? delegate.supportedCustomMetrics()
        : scala.collection.immutable.List$.MODULE$.empty();
  }

  @Override
  public String toString() {
    return "InPlaceStateStoreProvider[" + id + "]";
  }

  // -- files ------------------------------------------------------------------------------------

  private Path deltaFile(long version) {
    return new Path(dir, version + ".delta");
  }

  private Path snapshotFile(long version) {
    return new Path(dir, version + ".snapshot");
  }

  /** {version: isSnapshot} of the files in the store's folder (a snapshot wins over a delta). */
  private TreeMap<Long, Boolean> files() {
    TreeMap<Long, Boolean> out = new TreeMap<>();
    if (!fm.exists(dir)) {
      return out;
    }
    for (FileStatus f : fm.list(dir)) {
      String name = f.getPath().getName();
      int dot = name.indexOf('.');
      if (dot <= 0) {
        continue;
      }
      String kind = name.substring(dot + 1);
      if (!kind.equals("delta") && !kind.equals("snapshot")) {
        continue;
      }
      long v;
      try {
        v = Long.parseLong(name.substring(0, dot));
      } catch (NumberFormatException e) {
        continue;
      }
      out.merge(v, kind.equals("snapshot"), Boolean::logicalOr);
    }
    return out;
  }

  /** The table at `version`: the newest snapshot at or before it, then each delta after it. */
  private Table load(long version) {
    Table t = new Table(compactAbove);
    if (version == 0) {
      return t;
    }
    TreeMap<Long, Boolean> files = files();
    long start = 0;
    for (var e : files.headMap(version, true).descendingMap().entrySet()) {
      if (e.getValue()) {
        start = e.getKey();
        break;
      }
    }
    try {
      if (start > 0) {
        readFile(snapshotFile(start), t);
        lastSnapshot = Math.max(lastSnapshot, start);
      }
      for (long v = start + 1; v <= version; v++) {
        if (!files.containsKey(v)) {
          throw new IllegalStateException(this + ": cannot load version " + version + ": the delta of "
              + v + " is missing from " + dir);
        }
        readFile(deltaFile(v), t);
      }
    } catch (IOException e) {
      throw new IllegalStateException(this + ": cannot load version " + version + " from " + dir, e);
    }
    LOG.info("{}: loaded version {} ({} keys; snapshot {})", this, version, t.size, start);
    return t;
  }

  private void readFile(Path path, Table t) throws IOException {
    try (DataInputStream in = new DataInputStream(codec.compressedInputStream(fm.open(path)))) {
      while (true) {
        int keySize = in.readInt();
        if (keySize == -1) {
          return;
        }
        byte[] key = new byte[keySize];
        in.readFully(key);
        int valueSize = in.readInt();
        if (valueSize < 0) {
          t.remove(key, Platform.BYTE_ARRAY_OFFSET, keySize);
        } else {
          byte[] value = new byte[valueSize];
          in.readFully(value);
          t.put(t.append(key, Platform.BYTE_ARRAY_OFFSET, keySize, value, Platform.BYTE_ARRAY_OFFSET, valueSize));
        }
      }
    } catch (EOFException e) {
      throw new IOException(path + " ends before its end mark (a torn file)", e);
    }
  }

  /** A snapshot of `t`, written atomically. */
  private void writeFile(Path path, Table t) throws IOException {
    CheckpointFileManager.CancellableFSDataOutputStream raw = fm.createAtomic(path, true);
    try {
      DataOutputStream out = new DataOutputStream(codec.compressedOutputStream(raw));
      for (long ref = t.next(0); ref != 0; ref = t.next(ref)) {
        t.write(out, ref);
      }
      out.writeInt(-1);
      out.close();
    } catch (IOException | RuntimeException e) {
      raw.cancel();
      throw e;
    }
  }

  /** Drop the files no version from `newest - minVersionsToRetain` on needs (Spark's rule). */
  private void cleanup() {
    TreeMap<Long, Boolean> files = files();
    if (files.isEmpty()) {
      return;
    }
    long earliest = files.lastKey() - conf.minVersionsToRetain();
    if (earliest <= 0) {
      return;
    }
    Long keepFrom = null;
    for (var e : files.headMap(earliest, true).descendingMap().entrySet()) {
      if (e.getValue()) {
        keepFrom = e.getKey();
        break;
      }
    }
    if (keepFrom == null) {
      return;
    }
    for (var e : files.headMap(keepFrom, false).entrySet()) {
      fm.delete(deltaFile(e.getKey()));
      fm.delete(snapshotFile(e.getKey()));
    }
  }

  // -- the store of one batch -------------------------------------------------------------------

  final class Store implements StateStore {
    private final long version;
    private final Table t;
    private final boolean forceSnapshot;
    private final boolean writable;
    private final UnsafeRowPair pair = new UnsafeRowPair(null, null);
    final TaskContext owner; // the task that opened it for updates; null outside a Spark task
    // undo: pairs of (an entry naming the key, the entry before or 0), in the order applied
    private long[] undo = new long[64];
    private int undone; // longs used in `undo`
    private CheckpointFileManager.CancellableFSDataOutputStream raw;
    private DataOutputStream delta;
    private int state = 0; // 0 updating, 1 committed, 2 aborted

    Store(long version, Table t, boolean forceSnapshot, boolean writable, TaskContext owner) {
      this.owner = owner;
      this.version = version;
      this.t = t;
      this.forceSnapshot = forceSnapshot;
      this.writable = writable;
    }

    @Override
    public StateStoreId id() {
      return id;
    }

    @Override
    public long version() {
      return version;
    }

    @Override
    public UnsafeRow get(UnsafeRow key, String colFamilyName) {
      long ref = t.get(key.getBaseObject(), key.getBaseOffset(), key.getSizeInBytes());
      if (ref == 0) {
        return null;
      }
      UnsafeRow v = new UnsafeRow(valueFields);
      t.pointValue(v, ref);
      return v;
    }

    private void remember(long named, long before) {
      if (undone + 2 > undo.length) {
        undo = java.util.Arrays.copyOf(undo, undo.length * 2);
      }
      undo[undone++] = named;
      undo[undone++] = before;
    }

    private void updating() {
      if (!writable || state != 0) {
        throw new IllegalStateException(this + " cannot be updated (" + (writable ? "no longer open" : "read-only") + ")");
      }
    }

    private DataOutputStream delta() throws IOException {
      if (delta == null) {
        raw = fm.createAtomic(deltaFile(version + 1), true);
        delta = new DataOutputStream(codec.compressedOutputStream(raw));
      }
      return delta;
    }

    @Override
    public void put(UnsafeRow key, UnsafeRow value, String colFamilyName) {
      updating();
      long ref = t.append(key.getBaseObject(), key.getBaseOffset(), key.getSizeInBytes(),
          value.getBaseObject(), value.getBaseOffset(), value.getSizeInBytes());
      remember(ref, t.put(ref));
      try {
        t.write(delta(), ref);
      } catch (IOException ex) {
        throw new IllegalStateException(this + ": cannot write the delta of version " + (version + 1), ex);
      }
    }

    @Override
    public void remove(UnsafeRow key, String colFamilyName) {
      updating();
      long before = t.remove(key.getBaseObject(), key.getBaseOffset(), key.getSizeInBytes());
      if (before == 0) {
        return;
      }
      remember(before, before);
      try {
        DataOutputStream out = delta();
        out.writeInt(key.getSizeInBytes());
        t.writeKey(out, before);
        out.writeInt(-1);
      } catch (IOException ex) {
        throw new IllegalStateException(this + ": cannot write the delta of version " + (version + 1), ex);
      }
    }

    @Override
    public long commit() {
      updating();
      try {
        DataOutputStream out = delta();
        out.writeInt(-1);
        out.close();
      } catch (IOException | RuntimeException ex) {
        abort();
        throw new IllegalStateException(this + ": cannot commit version " + (version + 1), ex);
      }
      synchronized (InPlaceStateStoreProvider.this) {
        state = 1;
        undone = 0;
        loadedVersion = version + 1;
        if (open == this) {
          open = null;
          InPlaceStateStoreProvider.this.notifyAll();
        }
        if (forceSnapshot) {
          try {
            writeFile(snapshotFile(loadedVersion), t);
            lastSnapshot = loadedVersion;
          } catch (IOException ex) {
            LOG.warn("{}: the snapshot of version {} failed (its delta stays): {}", this, loadedVersion, ex.toString());
          }
        }
      }
      if (conf.commitValidationEnabled()) { // Spark checks every partition's store committed
        StateStore.reportCommitToCoordinator(version + 1, id, hadoopConf);
      }
      return version + 1;
    }

    /** Undo this store's changes in the table (newest first) and drop its delta file. */
    void rollBack() {
      if (state != 0) {
        return;
      }
      state = 2;
      for (int i = undone - 2; i >= 0; i -= 2) {
        if (undo[i + 1] != 0) {
          t.put(undo[i + 1]);
        } else {
          t.removeKeyOf(undo[i]);
        }
      }
      undone = 0;
      if (raw != null) {
        raw.cancel();
      }
    }

    @Override
    public void abort() {
      if (!writable) {
        state = 2;
        return;
      }
      synchronized (InPlaceStateStoreProvider.this) {
        rollBack();
        if (open == this) {
          open = null;
          InPlaceStateStoreProvider.this.notifyAll();
        }
      }
    }

    @Override
    public void release() {
      if (writable && state == 0) {
        abort();
      }
    }

    @Override
    public boolean hasCommitted() {
      return state == 1;
    }

    @Override
    public StateStoreIterator<UnsafeRowPair> iterator(String colFamilyName) {
      // one key row and one value row, pointed at each entry in turn (as RocksDB's store does)
      UnsafeRow key = new UnsafeRow(keyFields);
      UnsafeRow value = new UnsafeRow(valueFields);
      java.util.Iterator<UnsafeRowPair> it = new java.util.Iterator<UnsafeRowPair>() {
        long last = 0;   // the entry handed out last (0: none yet)
        long ahead = -1; // the live entry after it, once looked for

        @Override
        public boolean hasNext() {
          if (ahead == -1) { // looked for only now: the caller may have removed entries meanwhile
            ahead = t.next(last);
          }
          return ahead != 0;
        }

        @Override
        public UnsafeRowPair next() {
          if (!hasNext()) {
            throw new java.util.NoSuchElementException();
          }
          last = ahead;
          ahead = -1;
          t.pointKey(key, last);
          t.pointValue(value, last);
          return pair.withRows(key, value);
        }
      };
      return new StateStoreIterator<>(CollectionConverters.asScala(it), () -> BoxedUnit.UNIT);
    }

    @Override
    public StateStoreMetrics metrics() {
      return new StateStoreMetrics(t.size, t.bytes(),
          scala.collection.immutable.Map$.MODULE$.empty(), scala.collection.immutable.Map$.MODULE$.empty());
    }

    @Override
    public StateStoreCheckpointInfo getStateStoreCheckpointInfo() {
      return new StateStoreCheckpointInfo(id.partitionId(), version + 1, Option.empty(), Option.empty());
    }

    @Override
    public scala.collection.immutable.Set<String> allColumnFamilyNames() {
      scala.collection.immutable.Set<String> none = scala.collection.immutable.Set$.MODULE$.<String>empty();
      return none.incl(DEFAULT);
    }

    @Override
    public String toString() {
      return "InPlaceStateStore[" + id + ", version " + version + "]";
    }

    // -- what this store does not do (the provider hands such state to Spark's own store) --------

    private UnsupportedOperationException unsupported(String what) {
      return new UnsupportedOperationException("InPlaceStateStoreProvider does not support " + what);
    }

    @Override
    public StateStoreIterator<UnsafeRowPair> prefixScan(UnsafeRow prefixKey, String colFamilyName) {
      throw unsupported("prefix scans");
    }

    @Override
    public StateStoreIterator<UnsafeRowPair> prefixScanWithMultiValues(UnsafeRow prefixKey, String colFamilyName) {
      throw unsupported("prefix scans");
    }

    @Override
    public StateStoreIterator<UnsafeRowPair> iteratorWithMultiValues(String colFamilyName) {
      throw unsupported("multiple values per key");
    }

    @Override
    public Iterator<UnsafeRow> valuesIterator(UnsafeRow key, String colFamilyName) {
      throw unsupported("multiple values per key");
    }

    @Override
    public void putList(UnsafeRow key, UnsafeRow[] values, String colFamilyName) {
      throw unsupported("multiple values per key");
    }

    @Override
    public void merge(UnsafeRow key, UnsafeRow value, String colFamilyName) {
      throw unsupported("merge");
    }

    @Override
    public void mergeList(UnsafeRow key, UnsafeRow[] values, String colFamilyName) {
      throw unsupported("merge");
    }

    @Override
    public void createColFamilyIfAbsent(String colFamilyName, StructType keySchema, StructType valueSchema,
                                        KeyStateEncoderSpec keyStateEncoderSpec, boolean useMultipleValuesPerKey,
                                        boolean isInternal) {
      throw unsupported("column families");
    }

    @Override
    public boolean removeColFamilyIfExists(String colFamilyName) {
      throw unsupported("column families");
    }
  }

  // -- the table ----------------------------------------------------------------------------------

  /**
   * Entries appended to a few large byte slabs, found by open addressing over their references
   * (slab << 32 | offset). An entry is `[key size][value size][key bytes][value bytes]` (two ints,
   * then UnsafeRow bytes at offset 8: aligned as UnsafeRow wants); its bytes never change once
   * written, but for a flag in the key size's top bit that marks it dead (replaced or removed), so
   * rows pointed into it stay valid. A scan walks the slabs in order: memory read straight through,
   * and no object per entry for the garbage collector to trace or copy. Dead bytes are reclaimed
   * by `compacted` between batches once they outweigh the live ones. Not thread-safe: one batch
   * at a time.
   */
  static final class Table {
    private static final long BASE = Platform.BYTE_ARRAY_OFFSET;
    private static final int DEAD = 0x80000000;
    private static final long TOMB = -1L;
    private static final int SEED = 42; // UnsafeRow.hashCode's
    private static final int FIRST_SLAB = 1 << 16;
    private static final int MAX_SLAB = 1 << 22;

    private byte[][] slabs = new byte[8][];
    private int[] fill = new int[8]; // bytes used in each slab
    private int slabCount;
    // two longs a slot: the entry's reference (0: empty, TOMB: removed), then its key's hash; side
    // by side, so a probe reads one cache line, not one in each of two arrays
    private long[] slots = new long[128];
    int size;
    private int used; // live slots and tombstones
    private long liveBytes;
    private long deadBytes;
    private long slabBytes;
    private final long compactAbove;

    Table(long compactAbove) {
      this.compactAbove = compactAbove;
    }

    private static int slabOf(long ref) {
      return (int) (ref >>> 32);
    }

    private static int offsetOf(long ref) {
      return (int) ref;
    }

    private int header(long ref) {
      return Platform.getInt(slabs[slabOf(ref)], BASE + offsetOf(ref));
    }

    private int keySize(long ref) {
      return header(ref) & ~DEAD;
    }

    private int valueSize(long ref) {
      return Platform.getInt(slabs[slabOf(ref)], BASE + offsetOf(ref) + 4);
    }

    private int length(long ref) {
      return 8 + keySize(ref) + valueSize(ref);
    }

    private void setDead(long ref, boolean dead) {
      int h = header(ref);
      if (((h & DEAD) != 0) == dead) {
        return;
      }
      Platform.putInt(slabs[slabOf(ref)], BASE + offsetOf(ref), dead ? h | DEAD : h & ~DEAD);
      long n = length(ref);
      liveBytes += dead ? -n : n;
      deadBytes += dead ? n : -n;
    }

    void pointKey(UnsafeRow row, long ref) {
      row.pointTo(slabs[slabOf(ref)], BASE + offsetOf(ref) + 8, keySize(ref));
    }

    void pointValue(UnsafeRow row, long ref) {
      int keySize = keySize(ref);
      row.pointTo(slabs[slabOf(ref)], BASE + offsetOf(ref) + 8 + keySize, valueSize(ref));
    }

    /** A new live entry, not yet in the table (`put` places it): its reference. */
    long append(Object keyBase, long keyOffset, int keySize, Object valueBase, long valueOffset, int valueSize) {
      int n = 8 + keySize + valueSize;
      if (slabCount == 0 || fill[slabCount - 1] + n > slabs[slabCount - 1].length) {
        int capacity = slabCount == 0 ? FIRST_SLAB : Math.min(MAX_SLAB, slabs[slabCount - 1].length * 2);
        if (slabCount == slabs.length) {
          slabs = java.util.Arrays.copyOf(slabs, slabCount * 2);
          fill = java.util.Arrays.copyOf(fill, slabCount * 2);
        }
        slabs[slabCount] = new byte[Math.max(capacity, n + 8)];
        fill[slabCount] = slabCount == 0 ? 8 : 0; // reference 0 means "none"
        slabBytes += slabs[slabCount].length;
        slabCount++;
      }
      int s = slabCount - 1;
      byte[] slab = slabs[s];
      int off = fill[s];
      Platform.putInt(slab, BASE + off, keySize);
      Platform.putInt(slab, BASE + off + 4, valueSize);
      Platform.copyMemory(keyBase, keyOffset, slab, BASE + off + 8, keySize);
      Platform.copyMemory(valueBase, valueOffset, slab, BASE + off + 8 + keySize, valueSize);
      fill[s] = off + n;
      liveBytes += n;
      return ((long) s << 32) | off;
    }

    void write(DataOutputStream out, long ref) throws IOException {
      byte[] slab = slabs[slabOf(ref)];
      int off = offsetOf(ref);
      int keySize = keySize(ref);
      int valueSize = valueSize(ref);
      out.writeInt(keySize);
      out.write(slab, off + 8, keySize);
      out.writeInt(valueSize);
      out.write(slab, off + 8 + keySize, valueSize);
    }

    void writeKey(DataOutputStream out, long ref) throws IOException {
      out.write(slabs[slabOf(ref)], offsetOf(ref) + 8, keySize(ref));
    }

    /** The live entry after `ref` in slab order (0: from the start), or 0 at the end. */
    long next(long ref) {
      int s = slabOf(ref);
      int off = ref == 0 ? 8 : offsetOf(ref) + length(ref);
      while (s < slabCount) {
        byte[] slab = slabs[s];
        while (off < fill[s]) {
          if ((Platform.getInt(slab, BASE + off) & DEAD) == 0) {
            return ((long) s << 32) | off;
          }
          off += 8 + (Platform.getInt(slab, BASE + off) & ~DEAD) + Platform.getInt(slab, BASE + off + 4);
        }
        s++;
        off = 0;
      }
      return 0;
    }

    private static int hash(Object base, long offset, int size) {
      int h = (size & 7) == 0 ? Murmur3_x86_32.hashUnsafeWords(base, offset, size, SEED)
          : Murmur3_x86_32.hashUnsafeBytes(base, offset, size, SEED);
      return h ^ (h >>> 16);
    }

    private boolean sameKey(long ref, Object base, long offset, int size) {
      return keySize(ref) == size
          && ByteArrayMethods.arrayEquals(slabs[slabOf(ref)], BASE + offsetOf(ref) + 8, base, offset, size);
    }

    private int capacity() {
      return slots.length >>> 1;
    }

    /** The slot holding the key, or -1. */
    private int find(Object base, long offset, int size, int h) {
      int mask = capacity() - 1;
      for (int i = h & mask; ; i = (i + 1) & mask) {
        long r = slots[2 * i];
        if (r == 0) {
          return -1;
        }
        if (r != TOMB && (int) slots[2 * i + 1] == h && sameKey(r, base, offset, size)) {
          return i;
        }
      }
    }

    /** The key's live entry, or 0. */
    long get(Object base, long offset, int size) {
      int i = find(base, offset, size, hash(base, offset, size));
      return i < 0 ? 0 : slots[2 * i];
    }

    /** A key's hash, as the table hashes it (the dedupe's IdTable hashes its ids so too). */
    static int hashOf(Object base, long offset, int size) {
      return hash(base, offset, size);
    }

    /** Make `ref` the key's entry (live again if it was dead); the entry it replaced (now dead), or 0. */
    long put(long ref) {
      byte[] slab = slabs[slabOf(ref)];
      long keyOffset = BASE + offsetOf(ref) + 8;
      int keySize = keySize(ref);
      int h = hash(slab, keyOffset, keySize);
      int i = find(slab, keyOffset, keySize, h);
      setDead(ref, false);
      if (i >= 0) {
        long before = slots[2 * i];
        if (before != ref) {
          setDead(before, true);
        }
        slots[2 * i] = ref;
        return before;
      }
      if ((used + 1) * 4L > capacity() * 3L) { // 75 % full, counting tombstones
        resize(size * 4L >= capacity() ? capacity() * 2 : capacity());
      }
      int mask = capacity() - 1;
      i = h & mask;
      while (slots[2 * i] != 0 && slots[2 * i] != TOMB) {
        i = (i + 1) & mask;
      }
      if (slots[2 * i] == 0) {
        used++;
      }
      slots[2 * i] = ref;
      slots[2 * i + 1] = h;
      size++;
      return 0;
    }

    /** Remove the key; the entry it held (now dead), or 0. */
    long remove(Object base, long offset, int size) {
      int i = find(base, offset, size, hash(base, offset, size));
      if (i < 0) {
        return 0;
      }
      long before = slots[2 * i];
      slots[2 * i] = TOMB;
      this.size--;
      setDead(before, true);
      return before;
    }

    void removeKeyOf(long ref) {
      remove(slabs[slabOf(ref)], BASE + offsetOf(ref) + 8, keySize(ref));
    }

    private void resize(int capacity) {
      long[] old = slots;
      slots = new long[2 * capacity];
      int mask = capacity - 1;
      for (int j = 0; j < old.length; j += 2) {
        long r = old[j];
        if (r != 0 && r != TOMB) {
          int i = (int) old[j + 1] & mask;
          while (slots[2 * i] != 0) {
            i = (i + 1) & mask;
          }
          slots[2 * i] = r;
          slots[2 * i + 1] = old[j + 1];
        }
      }
      used = size;
    }

    /** More dead bytes than live ones, and enough to matter. */
    boolean wasteful() {
      return deadBytes > compactAbove && deadBytes > liveBytes;
    }

    /** The live entries in fresh slabs (rows pointed into the old ones stay valid). */
    Table compacted() {
      Table out = new Table(compactAbove);
      for (long ref = next(0); ref != 0; ref = next(ref)) {
        byte[] slab = slabs[slabOf(ref)];
        long at = BASE + offsetOf(ref) + 8;
        int keySize = keySize(ref);
        out.put(out.append(slab, at, keySize, slab, at + keySize, valueSize(ref)));
      }
      return out;
    }

    /** Bytes held: the slabs and the slots. */
    long bytes() {
      return slabBytes + 8L * slots.length;
    }
  }
}
