package cardstream.state;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
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
 * query's dedupe keeps ten minutes of txn ids). This one keeps one open-addressing table of
 * byte entries, and for the batch in progress an undo list that an abort replays backwards.
 * Durability is Spark's: each version's changes go to `version.delta` as the batch runs and are
 * published by an atomic rename at commit; the maintenance thread writes `version.snapshot`
 * between batches; a version not in memory (a restart, a retried batch) is rebuilt from the
 * latest snapshot and the deltas after it. The files have the HDFS-backed store's layout (sizes,
 * row bytes, -1 for a removal and at the end, compressed with the store's codec).
 *
 * <p>Keys without a prefix, one column family, one value per key (Spark's dedupe, aggregation
 * and join state); anything else is handed to Spark's HDFS-backed store. Rows `get` returns
 * point into immutable entry arrays, so they stay valid; an iterator hands out one key row and
 * one value row pointed at each entry in turn (as RocksDB's store does). Iteration is weakly
 * consistent, as a ConcurrentHashMap's: removing entries while iterating (a watermark's
 * eviction) is allowed.
 */
public final class InPlaceStateStoreProvider implements StateStoreProvider {
  private static final Logger LOG = LoggerFactory.getLogger(InPlaceStateStoreProvider.class);
  private static final String DEFAULT = "default";

  private StateStoreProvider delegate;
  private StateStoreId id;
  private StateStoreConf conf;
  private Configuration hadoopConf;
  private int keyFields;
  private int valueFields;
  private Path dir;
  private CheckpointFileManager fm;
  private CompressionCodec codec;

  private Table table = new Table();
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
      if (open != null) {  // a store left neither committed nor aborted: its changes go
        open.rollBack();
      }
      if (loadedVersion != version) {
        table = load(version);
        loadedVersion = version;
      }
      open = new Store(version, table, forceSnapshotOnCommit, true);
      return open;
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
      return new Store(version, t, false, false);
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
      table = new Table();
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
    Table t = new Table();
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
          byte[] e = Table.entry(key, Platform.BYTE_ARRAY_OFFSET, keySize, valueSize);
          in.readFully(e, 8 + keySize, valueSize);
          t.put(e);
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
      byte[][] entries = t.entries;
      for (byte[] e : entries) {
        if (e != null && e != Table.TOMB) {
          Table.writeEntry(out, e);
        }
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
    // undo: pairs of (an entry naming the key, the entry before or null), in the order applied
    private final ArrayList<byte[]> undo = new ArrayList<>();
    private CheckpointFileManager.CancellableFSDataOutputStream raw;
    private DataOutputStream delta;
    private int state = 0; // 0 updating, 1 committed, 2 aborted

    Store(long version, Table t, boolean forceSnapshot, boolean writable) {
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
      byte[] e = t.get(key.getBaseObject(), key.getBaseOffset(), key.getSizeInBytes());
      return e == null ? null : valueOf(e);
    }

    private UnsafeRow valueOf(byte[] e) {
      int keySize = Platform.getInt(e, Platform.BYTE_ARRAY_OFFSET);
      int valueSize = Platform.getInt(e, Platform.BYTE_ARRAY_OFFSET + 4);
      UnsafeRow v = new UnsafeRow(valueFields);
      v.pointTo(e, Platform.BYTE_ARRAY_OFFSET + 8 + keySize, valueSize);
      return v;
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
      byte[] e = Table.entry(key.getBaseObject(), key.getBaseOffset(), key.getSizeInBytes(), value.getSizeInBytes());
      Platform.copyMemory(value.getBaseObject(), value.getBaseOffset(), e,
          Platform.BYTE_ARRAY_OFFSET + 8 + key.getSizeInBytes(), value.getSizeInBytes());
      byte[] before = t.put(e);
      undo.add(e);
      undo.add(before);
      try {
        Table.writeEntry(delta(), e);
      } catch (IOException ex) {
        throw new IllegalStateException(this + ": cannot write the delta of version " + (version + 1), ex);
      }
    }

    @Override
    public void remove(UnsafeRow key, String colFamilyName) {
      updating();
      byte[] before = t.remove(key.getBaseObject(), key.getBaseOffset(), key.getSizeInBytes());
      if (before == null) {
        return;
      }
      undo.add(before);
      undo.add(before);
      try {
        DataOutputStream out = delta();
        out.writeInt(key.getSizeInBytes());
        out.write(before, 8, key.getSizeInBytes());
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
        undo.clear();
        loadedVersion = version + 1;
        if (open == this) {
          open = null;
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
      for (int i = undo.size() - 2; i >= 0; i -= 2) {
        byte[] named = undo.get(i);
        byte[] before = undo.get(i + 1);
        if (before != null) {
          t.put(before);
        } else {
          int keySize = Platform.getInt(named, Platform.BYTE_ARRAY_OFFSET);
          t.remove(named, Platform.BYTE_ARRAY_OFFSET + 8, keySize);
        }
      }
      undo.clear();
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
      byte[][] entries = t.entries;
      // one key row and one value row, pointed at each entry in turn (as RocksDB's store does)
      UnsafeRow key = new UnsafeRow(keyFields);
      UnsafeRow value = new UnsafeRow(valueFields);
      java.util.Iterator<UnsafeRowPair> it = new java.util.Iterator<UnsafeRowPair>() {
        int i = advance(0);

        int advance(int from) {
          while (from < entries.length && (entries[from] == null || entries[from] == Table.TOMB)) {
            from++;
          }
          return from;
        }

        @Override
        public boolean hasNext() {
          return i < entries.length;
        }

        @Override
        public UnsafeRowPair next() {
          if (i >= entries.length) {
            throw new java.util.NoSuchElementException();
          }
          byte[] e = entries[i];
          i = advance(i + 1);
          int keySize = Platform.getInt(e, Platform.BYTE_ARRAY_OFFSET);
          key.pointTo(e, Platform.BYTE_ARRAY_OFFSET + 8, keySize);
          value.pointTo(e, Platform.BYTE_ARRAY_OFFSET + 8 + keySize, Platform.getInt(e, Platform.BYTE_ARRAY_OFFSET + 4));
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
   * Open addressing over entries `[key size][value size][key bytes][value bytes]` (ints, then
   * UnsafeRow bytes at offset 8: aligned as UnsafeRow wants). An entry is never changed once made;
   * a put replaces it, a removal leaves a tombstone. Not thread-safe: one batch at a time.
   */
  static final class Table {
    static final byte[] TOMB = new byte[0];
    private static final int SEED = 42; // UnsafeRow.hashCode's
    byte[][] entries = new byte[64][];
    int[] hashes = new int[64];
    int size;
    private int used; // live entries and tombstones
    private long payload; // bytes in live entries

    static byte[] entry(Object keyBase, long keyOffset, int keySize, int valueSize) {
      byte[] e = new byte[8 + keySize + valueSize];
      Platform.putInt(e, Platform.BYTE_ARRAY_OFFSET, keySize);
      Platform.putInt(e, Platform.BYTE_ARRAY_OFFSET + 4, valueSize);
      Platform.copyMemory(keyBase, keyOffset, e, Platform.BYTE_ARRAY_OFFSET + 8, keySize);
      return e;
    }

    static void writeEntry(DataOutputStream out, byte[] e) throws IOException {
      int keySize = Platform.getInt(e, Platform.BYTE_ARRAY_OFFSET);
      int valueSize = Platform.getInt(e, Platform.BYTE_ARRAY_OFFSET + 4);
      out.writeInt(keySize);
      out.write(e, 8, keySize);
      out.writeInt(valueSize);
      out.write(e, 8 + keySize, valueSize);
    }

    private static int hash(Object base, long offset, int size) {
      int h = (size & 7) == 0 ? Murmur3_x86_32.hashUnsafeWords(base, offset, size, SEED)
          : Murmur3_x86_32.hashUnsafeBytes(base, offset, size, SEED);
      return h ^ (h >>> 16);
    }

    private static boolean sameKey(byte[] e, Object base, long offset, int size) {
      return Platform.getInt(e, Platform.BYTE_ARRAY_OFFSET) == size
          && ByteArrayMethods.arrayEquals(e, Platform.BYTE_ARRAY_OFFSET + 8, base, offset, size);
    }

    /** The slot holding the key, or -1. */
    private int find(Object base, long offset, int size, int h) {
      int mask = entries.length - 1;
      for (int i = h & mask; ; i = (i + 1) & mask) {
        byte[] e = entries[i];
        if (e == null) {
          return -1;
        }
        if (e != TOMB && hashes[i] == h && sameKey(e, base, offset, size)) {
          return i;
        }
      }
    }

    byte[] get(Object base, long offset, int size) {
      int i = find(base, offset, size, hash(base, offset, size));
      return i < 0 ? null : entries[i];
    }

    /** Insert or replace; the entry it replaced, or null. */
    byte[] put(byte[] e) {
      int keySize = Platform.getInt(e, Platform.BYTE_ARRAY_OFFSET);
      long keyOffset = Platform.BYTE_ARRAY_OFFSET + 8;
      int h = hash(e, keyOffset, keySize);
      int i = find(e, keyOffset, keySize, h);
      if (i >= 0) {
        byte[] before = entries[i];
        entries[i] = e;
        payload += e.length - before.length;
        return before;
      }
      if ((used + 1) * 4L > entries.length * 3L) { // 75 % full, counting tombstones
        resize(size * 2L + 2 > entries.length / 2 ? entries.length * 2 : entries.length);
      }
      int mask = entries.length - 1;
      i = h & mask;
      while (entries[i] != null && entries[i] != TOMB) {
        i = (i + 1) & mask;
      }
      if (entries[i] == null) {
        used++;
      }
      entries[i] = e;
      hashes[i] = h;
      size++;
      payload += e.length;
      return null;
    }

    /** Remove the key; the entry it held, or null. */
    byte[] remove(Object base, long offset, int size) {
      int i = find(base, offset, size, hash(base, offset, size));
      if (i < 0) {
        return null;
      }
      byte[] before = entries[i];
      entries[i] = TOMB;
      this.size--;
      payload -= before.length;
      return before;
    }

    /** A new array (an iterator over the old one goes on over it); tombstones dropped. */
    private void resize(int capacity) {
      byte[][] old = entries;
      int[] oldHashes = hashes;
      entries = new byte[capacity][];
      hashes = new int[capacity];
      int mask = capacity - 1;
      for (int j = 0; j < old.length; j++) {
        byte[] e = old[j];
        if (e != null && e != TOMB) {
          int i = oldHashes[j] & mask;
          while (entries[i] != null) {
            i = (i + 1) & mask;
          }
          entries[i] = e;
          hashes[i] = oldHashes[j];
        }
      }
      used = size;
    }

    /** Bytes held: the entries with their array headers, and the table's two arrays. */
    long bytes() {
      return payload + 16L * size + 12L * entries.length;
    }
  }
}
