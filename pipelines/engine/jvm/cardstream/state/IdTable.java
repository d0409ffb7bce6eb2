package cardstream.state;

import java.util.Arrays;

import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;

/**
 * The dedupe's ids, each with an 8-byte value (its first copy's time): the entries appended to
 * slabs, found through slots of one long each, the id's 32-bit hash beside a 32-bit reference to
 * its entry. Why one long: a new id costs a probe of a slot not in the cache, and the slots'
 * footprint decides how many of those miss; at 8 bytes a slot four partitions' tables of a
 * quarter million ids each take 16 MB, at the state store table's 16 (a reference and a hash) 32,
 * and ids held in 32-byte slots 64 (measured: bench/RESULTS.md#throughput). A slot is compared by
 * its hash first, so a probe reads an entry only when the hashes agree; a table grows by moving
 * slots alone (the hash is in them). No removal but `retainFrom` (the snapshot's expiry copies
 * the live entries into a fresh table), so no tombstones.
 */
final class IdTable {
  private static final long BASE = Platform.BYTE_ARRAY_OFFSET;
  private static final int UNIT_BITS = 3;            // entries start on 8-byte boundaries
  private static final int OFFSET_BITS = 19;         // 8-byte units in a slab: slabs of 4 MB at most
  private static final int MAX_SLAB = 1 << (OFFSET_BITS + UNIT_BITS);
  private static final int MAX_SLABS = 1 << (32 - OFFSET_BITS); // 8,192 slabs: 32 GB of entries
  private static final int FIRST_SLAB = 1 << 16;
  private static final int MIN_CAPACITY = 64;

  private byte[][] slabs = new byte[8][];
  private int slabCount;
  private int fill;                                  // bytes used in the last slab
  private long slabBytes;
  private long[] slots = new long[MIN_CAPACITY];     // 0: empty
  int size;

  /** The hash `find` and `insert` take: the state store table's (murmur3 of the bytes). */
  static int hash(Object base, long offset, int size) {
    return InPlaceStateStoreProvider.Table.hashOf(base, offset, size);
  }

  private static int ref(long slot) {
    return (int) slot;
  }

  private byte[] slab(int ref) {
    return slabs[ref >>> OFFSET_BITS];
  }

  private static long at(int ref) {
    return BASE + ((long) (ref & ((1 << OFFSET_BITS) - 1)) << UNIT_BITS);
  }

  // an entry: its value (8 bytes), the id's size (4), the id's bytes, padding to 8

  long valueOf(int ref) {
    return Platform.getLong(slab(ref), at(ref));
  }

  int keySize(int ref) {
    return Platform.getInt(slab(ref), at(ref) + 8);
  }

  private int append(Object base, long offset, int size, long value) {
    if (size < 0 || size > MAX_SLAB - 20) { // ids are at most MAX_ID_BYTES; a file saying otherwise is not ours
      throw new IllegalArgumentException("IdTable: an id of " + size + " bytes");
    }
    int n = (12 + size + 7) & ~7;
    if (slabCount == 0 || fill + n > slabs[slabCount - 1].length) {
      if (slabCount == MAX_SLABS) {
        throw new IllegalStateException("IdTable: more than " + ((long) MAX_SLABS * MAX_SLAB >> 30)
            + " GB of ids in one partition");
      }
      int capacity = slabCount == 0 ? FIRST_SLAB : Math.min(MAX_SLAB, slabs[slabCount - 1].length * 2);
      if (slabCount == slabs.length) {
        slabs = Arrays.copyOf(slabs, slabCount * 2);
      }
      slabs[slabCount++] = new byte[Math.max(capacity, n)];
      slabBytes += slabs[slabCount - 1].length;
      fill = slabCount == 1 ? 8 : 0; // reference 0 means "none"
    }
    byte[] slab = slabs[slabCount - 1];
    Platform.putLong(slab, BASE + fill, value);
    Platform.putInt(slab, BASE + fill + 8, size);
    Platform.copyMemory(base, offset, slab, BASE + fill + 12, size);
    int ref = ((slabCount - 1) << OFFSET_BITS) | (fill >>> UNIT_BITS);
    fill += n;
    return ref;
  }

  private boolean sameKey(int ref, Object base, long offset, int size) {
    byte[] slab = slab(ref);
    long a = at(ref);
    return Platform.getInt(slab, a + 8) == size && ByteArrayMethods.arrayEquals(slab, a + 12, base, offset, size);
  }

  /** The first slot a key of hash h probes: read ahead of `find` (its cache line on the way). */
  long slotAt(int h) {
    return slots[h & (slots.length - 1)];
  }

  /** The id's slot, or -1 - the empty slot where it would go (`insert`). */
  int find(Object base, long offset, int size, int h) {
    int mask = slots.length - 1;
    for (int i = h & mask; ; i = (i + 1) & mask) {
      long s = slots[i];
      if (s == 0) {
        return -1 - i;
      }
      if ((int) (s >>> 32) == h && sameKey(ref(s), base, offset, size)) {
        return i;
      }
    }
  }

  long value(int slot) {
    return valueOf(ref(slots[slot]));
  }

  void setValue(int slot, long value) {
    int ref = ref(slots[slot]);
    Platform.putLong(slab(ref), at(ref), value);
  }

  /** Add an id `find` did not find, at the slot it named (no other change between). */
  void insert(int empty, int h, Object base, long offset, int length, long value) {
    slots[empty] = ((long) h << 32) | (append(base, offset, length, value) & 0xFFFF_FFFFL);
    size++;
    if (this.size * 4L > slots.length * 3L) { // 75 % full
      resize(slots.length * 2);
    }
  }

  /** Set the id's value, adding the id when absent (a file read back). */
  void put(Object base, long offset, int size, long value) {
    int h = hash(base, offset, size);
    int i = find(base, offset, size, h);
    if (i >= 0) {
      setValue(i, value);
    } else {
      insert(-1 - i, h, base, offset, size, value);
    }
  }

  /** Room for `more` ids beyond those held without growing while they come (one move of the slots
   *  instead of one at each doubling). */
  void reserve(long more) {
    long want = size + more;
    int capacity = slots.length;
    while (want * 4L > capacity * 3L && capacity < (1 << 30)) {
      capacity *= 2;
    }
    if (capacity != slots.length) {
      resize(capacity);
    }
  }

  private void resize(int capacity) {
    long[] old = slots;
    slots = new long[capacity];
    int mask = capacity - 1;
    for (long s : old) {
      if (s != 0) {
        int i = (int) (s >>> 32) & mask;
        while (slots[i] != 0) {
          i = (i + 1) & mask;
        }
        slots[i] = s;
      }
    }
  }

  /** A table of only the ids whose value is at least `from` (the snapshot's expiry): fresh slabs,
   *  the expired entries' bytes freed with the old ones. */
  IdTable retainFrom(long from) {
    IdTable out = new IdTable();
    int live = 0;
    for (long s : slots) {
      if (s != 0 && valueOf(ref(s)) >= from) {
        live++;
      }
    }
    out.reserve(live);
    for (long s : slots) {
      if (s != 0) {
        int ref = ref(s);
        long value = valueOf(ref);
        if (value >= from) {
          byte[] slab = slab(ref);
          int n = keySize(ref);
          int i = out.find(slab, at(ref) + 12, n, (int) (s >>> 32));
          out.insert(-1 - i, (int) (s >>> 32), slab, at(ref) + 12, n, value);
        }
      }
    }
    return out;
  }

  /** The first held slot from `slot` on, or -1 (`next(0)`, `next(i + 1)`: every id once). */
  int next(int slot) {
    for (int i = slot; i < slots.length; i++) {
      if (slots[i] != 0) {
        return i;
      }
    }
    return -1;
  }

  /** A held id's bytes: its slab, where they start in it (an address for Platform) and how many. */
  byte[] keySlab(int slot) {
    return slab(ref(slots[slot]));
  }

  long keyAt(int slot) {
    return at(ref(slots[slot])) + 12;
  }

  int keySizeAt(int slot) {
    return keySize(ref(slots[slot]));
  }

  /** Bytes held: the slabs and the slots. */
  long bytes() {
    return slabBytes + 8L * slots.length;
  }
}
