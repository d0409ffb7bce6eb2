package cardstream.parse;

import java.io.IOException;
import java.io.Serializable;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.variant.SchemaOfVariant;
import org.apache.spark.types.variant.Variant;
import org.apache.spark.types.variant.VariantBuilder;
import org.apache.spark.types.variant.VariantUtil;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.unsafe.types.VariantVal;

/**
 * A JSON text parsed as try_parse_json parses it, and the top-level fields of the object it holds,
 * each with its JSON type and its typed value, in one call per record; null when the text is not
 * JSON (as try_parse_json gives null).
 *
 * <p>Why: the contract's parsing (pipelines/engine/sources.py) was try_parse_json, then per field
 * variant_get, schema_of_variant and try_variant_get. try_parse_json makes a new JsonFactory for
 * every record (a fresh symbol table: each field name hashed, interned and added again), and
 * Spark's variant cast builds a Literal and a Cast expression for every scalar it converts:
 * together most of the usage job's CPU. This reads a plain flat object (`plain`: what producers
 * write) by one scan of its UTF-8 bytes, and anything else with Spark's own VariantBuilder (so what
 * is valid JSON is decided by the same code, with the session's duplicate-key and Unicode settings)
 * through one shared factory; the input is the record's bytes, and the answers are those
 * expressions', as Spark holds them in a row (`internal`, JsonFieldsExpression's per record):
 *
 * <ul>
 *   <li>{@code is_object}: the JSON is an object;
 *   <li>{@code t_<name>}: schema_of_variant of the field (null when absent, VOID for a JSON null);
 *   <li>{@code m_<name>}: the field is absent or a JSON null; {@code ok_<name>}: it holds its kind's
 *       JSON type (a string, a boolean, a number); what the contract asks of the type, as booleans
 *       (comparing type names costs the contract's rules a string comparison each);
 *   <li>a string field: {@code s_<name>}, its value when it is a JSON string;
 *   <li>a boolean field: {@code b_<name>}, its value when it is a JSON boolean;
 *   <li>an integer field: {@code d_<name>} (try_variant_get as double) and {@code l_<name>}
 *       (try_variant_get as bigint: a double or decimal truncated, null when it does not fit);
 *   <li>a float field: {@code d_<name>}.
 * </ul>
 *
 * Kinds: {@code str}, {@code bool}, {@code int}, {@code float}; the Python side builds the
 * matching struct type (pipelines/engine/sources.py, {@code json_fields_type}).
 */
public final class JsonFields implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final double LONG_MAX = (double) Long.MAX_VALUE;
  private static final double LONG_MIN = (double) Long.MIN_VALUE;
  /** Jackson's defaults, as VariantBuilder.parseJson's `new JsonFactory()`, but with no symbol
   *  table: shared by every record, one would gather every field name any producer sends, and
   *  Jackson refuses a document when a table's collision chain grows too long, which a per-record
   *  factory never meets. Canonicalizing names changes nothing a parse accepts. Thread-safe. */
  private static final JsonFactory FACTORY =
      JsonFactory.builder().disable(JsonFactory.Feature.CANONICALIZE_FIELD_NAMES).build();

  private final String[] names;
  private final byte[][] nameBytes;
  private final int[] nameHashes; // each name's nameHash, as the scan hashes a name it reads
  private final char[] kinds;
  private final int width;
  private final Object[] absent; // an object's answers before its fields are read: each one absent
  private final boolean allowDuplicateKeys;
  private final boolean validateUnicode;

  /** `allowDuplicateKeys`, `validateUnicode`: the session's spark.sql.variant.allowDuplicateKeys and
   *  spark.sql.variant.validateUnicodeInJsonParsing, which try_parse_json passes to the builder. */
  public JsonFields(String[] names, String[] kinds, boolean allowDuplicateKeys, boolean validateUnicode) {
    if (names.length != kinds.length) {
      throw new IllegalArgumentException("one kind per field name");
    }
    this.names = names.clone();
    this.kinds = new char[kinds.length];
    int w = 0;
    for (int i = 0; i < kinds.length; i++) {
      switch (kinds[i]) {
        case "str": this.kinds[i] = 's'; w += 4; break;
        case "bool": this.kinds[i] = 'b'; w += 4; break;
        case "int": this.kinds[i] = 'i'; w += 5; break;
        case "float": this.kinds[i] = 'f'; w += 4; break;
        default: throw new IllegalArgumentException("unknown kind " + kinds[i] + " for " + names[i]);
      }
    }
    this.width = w + 1; // the root-is-an-object flag first
    this.absent = new Object[width];
    absent[0] = true;
    for (int f = 0, k = 1; f < kinds.length; k += slots(f), f++) {
      absent[k + 1] = true; // m_: absent
      absent[k + 2] = false; // ok_
    }
    this.nameBytes = new byte[names.length][];
    this.nameHashes = new int[names.length];
    for (int i = 0; i < names.length; i++) {
      this.nameBytes[i] = names[i].getBytes(StandardCharsets.UTF_8);
      this.nameHashes[i] = nameHash(nameBytes[i], 0, nameBytes[i].length);
    }
    this.allowDuplicateKeys = allowDuplicateKeys;
    this.validateUnicode = validateUnicode;
  }

  /** try_parse_json: the text's first JSON value as a variant, null when it is not JSON. */
  Variant parse(String text) {
    if (text == null || text.isEmpty()) {
      return null;
    }
    try (JsonParser parser = FACTORY.createParser(text)) {
      parser.nextToken();
      return VariantBuilder.parseJson(parser, allowDuplicateKeys, validateUnicode);
    } catch (IOException | RuntimeException e) {  // Spark's try_ gives null for any non-fatal failure
      return null;
    }
  }

  /** A record's bytes -> the answers, as Spark holds them in a row (UTF8String for text): what
   *  JsonFieldsExpression returns; null when the bytes are not valid UTF-8 (is_valid_utf8) or not
   *  JSON. Why the UTF-8 check here: the scan sees every byte anyway, so a record pays for it only
   *  when a string holds non-ASCII bytes (a separate check read every record's bytes again). */
  public InternalRow internal(byte[] bytes) {
    Object[] out = answers(bytes);
    return out == null ? null : new GenericInternalRow(out);
  }

  /** `internal`'s answers as an array. */
  public Object[] answers(byte[] bytes) {
    return answers(bytes, 0, bytes.length);
  }

  /** `answers` of the record in t[from, to): the scan reads it in place (its strings are views of
   *  t); anything else is copied out first. */
  public Object[] answers(byte[] t, int from, int to) {
    Object[] out = plain(t, from, to);
    if (out != null) {
      return out;
    }
    if (!UTF8String.fromBytes(t, from, to - from).isValid()) {
      return null; // is_valid_utf8's answer: the contract's rule names it (the scan checks its strings so)
    }
    // as Spark decodes a text: the bytes as UTF-8
    out = built(new String(t, from, to - from, StandardCharsets.UTF_8));
    if (out == null) {
      return null;
    }
    for (int i = 0; i < out.length; i++) {
      if (out[i] instanceof String) {
        out[i] = UTF8String.fromString((String) out[i]);
      }
    }
    return out;
  }

  /** Where field `name`'s answers start (its `t_`; then `m_`, `ok_` and its value or values), and
   *  its kind ("str", "bool", "int", "float"); IllegalArgumentException when it is not read. */
  public int slotOf(String name, String kind) {
    for (int f = 0, k = 1; f < names.length; k += slots(f), f++) {
      if (names[f].equals(name)) {
        if (kinds[f] != kind.charAt(0) || !("str".equals(kind) || "bool".equals(kind) || "int".equals(kind)
            || "float".equals(kind))) {
          throw new IllegalArgumentException(name + " is read as " + kinds[f] + ", not " + kind);
        }
        return k;
      }
    }
    throw new IllegalArgumentException(name + " is not a field this reader reads");
  }

  /** The answers from the variant Spark's builder makes of the text (null when it is not JSON). */
  private Object[] built(String text) {
    Variant root = parse(text);
    if (root == null) {
      return null;
    }
    boolean object = root.getType() == VariantUtil.Type.OBJECT;
    Variant[] found = object ? fields(root) : new Variant[names.length];
    Object[] out = new Object[width];
    out[0] = object;
    int k = 1;
    for (int i = 0; i < names.length; i++) {
      Variant v = found[i];
      VariantUtil.Type type = v == null ? null : v.getType();
      out[k++] = v == null ? null : typeName(v, type);
      out[k++] = v == null || type == VariantUtil.Type.NULL;
      out[k++] = type != null && (kinds[i] == 's' ? type == VariantUtil.Type.STRING
          : kinds[i] == 'b' ? type == VariantUtil.Type.BOOLEAN
          : type == VariantUtil.Type.LONG || type == VariantUtil.Type.DOUBLE || type == VariantUtil.Type.FLOAT
            || type == VariantUtil.Type.DECIMAL);
      switch (kinds[i]) {
        case 's':
          out[k++] = type == VariantUtil.Type.STRING ? v.getString() : null;
          break;
        case 'b':
          out[k++] = type == VariantUtil.Type.BOOLEAN ? v.getBoolean() : null;
          break;
        case 'i':
          out[k++] = asDouble(v, type);
          out[k++] = asLong(v, type);
          break;
        default:
          out[k++] = asDouble(v, type);
      }
    }
    return out;
  }

  /**
   * The fields of a plain flat object read straight from its bytes, without building a variant;
   * null for anything else, which `parse` then decides. Plain: one object of unique names in
   * printable ASCII without escapes; values that are strings (escapes other than \\u allowed
   * outside the fields asked for), true, false, null or numbers; a field asked for holds a string
   * without escapes, a boolean, null, an integer or a decimal (no exponent) of at most 18 digits;
   * whitespace only around the tokens and after the object. Jackson and the builder accept every
   * such text and give these values and types (tests/spark/test_json_fields.py compares them); a
   * string is a view of its bytes, as Spark holds a text; a string with non-ASCII bytes must be
   * valid UTF-8 (UTF8String.isValid), else null (`internal` then gives null too). Why: a record the producers write
   * costs a scan instead of a parse and a variant.
   */
  public Object[] plain(byte[] t) {
    return plain(t, 0, t.length);
  }

  /** `plain` of the record in t[start, end) (a view of a row's bytes: nothing copied). */
  public Object[] plain(byte[] t, int start, int end) {
    int n = end;
    Object[] out = absent.clone();
    // the names off the layout, for the repeat check, and where their gaps start and end (on the
    // layout, a record's names are the layout's first ones: nothing allocated but the answers)
    int[] keyStart = null;
    int[] keyEnd = null;
    int[] keyHash = null;
    int[] gapStart = null;
    int[] gapEnd = null;
    int keys = 0;
    int onLayout = 0; // names met on the layout (the first ones)
    Layout lay = layout;
    boolean on = lay != null;
    int i = start;
    while (true) {
      int c;
      int field = -1;
      int slot = 1;
      if (on && keys < lay.names.length && fits(t, i, n, lay.gaps[keys]) && i + lay.gaps[keys].length < n
          && t[i + lay.gaps[keys].length] > ' ') {
        // the bytes up to the next value are the layout's (no more space follows): its next name,
        // valid, and no repeat (the layout's names are unique, and this record's names so far its
        // first ones)
        i += lay.gaps[keys].length;
        field = lay.fields[keys];
        slot = lay.slots[keys];
        onLayout++;
        keys++;
      } else if (on && keys == lay.names.length && n - i == lay.gaps[keys].length && fits(t, i, n, lay.gaps[keys])) {
        return out; // the layout's end
      } else {
        on = false;
        int gs = i;
        i = skipSpace(t, i, n);
        if (i >= n) {
          return null;
        }
        if (keys == 0) {
          if (t[i] != '{') {
            return null;
          }
          i = skipSpace(t, i + 1, n);
          if (i < n && t[i] == '}') {
            return skipSpace(t, i + 1, n) == n ? out : null;
          }
        } else {
          if (t[i] == '}') {
            if (skipSpace(t, i + 1, n) != n) {
              return null;
            }
            layout = learn(t, lay, onLayout, keyStart, keyEnd, keyHash, gapStart, gapEnd, keys, gs, n);
            return out;
          }
          if (t[i] != ',') {
            return null;
          }
          i = skipSpace(t, i + 1, n);
        }
        if (i >= n || t[i] != '"') {
          return null;
        }
        int ks = ++i;
        int ke = nameEnd(t, ks, n);
        if (ke < 0) {
          return null;
        }
        if (ke - ks > 1000) {
          return null; // Jackson limits a name's length
        }
        int h = nameHash(t, ks, ke);
        for (int j = 0; j < onLayout; j++) {
          if (lay.hashes[j] == h && Arrays.equals(lay.names[j], 0, lay.names[j].length, t, ks, ke)) {
            return null; // a repeated name: the builder's setting decides
          }
        }
        for (int j = onLayout; j < keys; j++) {
          if (keyHash[j - onLayout] == h && Arrays.equals(t, keyStart[j - onLayout], keyEnd[j - onLayout], t, ks, ke)) {
            return null;
          }
        }
        for (int f = 0, k = 1; f < names.length; k += slots(f), f++) {
          if (nameHashes[f] == h && Arrays.equals(t, ks, ke, nameBytes[f], 0, nameBytes[f].length)) {
            field = f;
            slot = k;
            break;
          }
        }
        i = skipSpace(t, ke + 1, n);
        if (i >= n || t[i] != ':') {
          return null;
        }
        i = skipSpace(t, i + 1, n);
        int j = keys - onLayout;
        if (keyStart == null) {
          keyStart = new int[24];
          keyEnd = new int[24];
          keyHash = new int[24];
          gapStart = new int[24];
          gapEnd = new int[24];
        } else if (j == keyStart.length) {
          keyStart = Arrays.copyOf(keyStart, j * 2);
          keyEnd = Arrays.copyOf(keyEnd, j * 2);
          keyHash = Arrays.copyOf(keyHash, j * 2);
          gapStart = Arrays.copyOf(gapStart, j * 2);
          gapEnd = Arrays.copyOf(gapEnd, j * 2);
        }
        keyStart[j] = ks;
        keyEnd[j] = ke;
        keyHash[j] = h;
        gapStart[j] = gs;
        gapEnd[j] = i;
        keys++;
      }
      if (i >= n) {
        return null;
      }
      c = t[i];
      int vs = i;
      if (c == '"') {
        boolean ascii = true;
        for (i = plainRun(t, i + 1, n); i < n && (c = t[i]) != '"'; i = plainRun(t, i + 1, n)) {
          if (c < 0x20) {
            if (c >= 0) {
              return null;
            }
            ascii = false;
          }
          if (c == '\\') {
            if (field >= 0 || i + 1 >= n || ESCAPES.indexOf(t[i + 1]) < 0) {
              return null;
            }
            i++;
          }
        }
        if (i >= n) {
          return null;
        }
        i++;
        // non-ASCII bytes sit only inside strings here, and a multi-byte sequence never spans a
        // quote: the text is valid UTF-8 when each such string is (Spark's own check decides)
        if (!ascii && !UTF8String.fromBytes(t, vs + 1, i - 2 - vs).isValid()) {
          return null;
        }
        if (field >= 0) {
          typed(out, slot, U_STRING, kinds[field] == 's');
          if (kinds[field] == 's') {
            out[slot + 3] = UTF8String.fromBytes(t, vs + 1, i - 2 - vs); // a view: the bytes are never changed
          }
        }
      } else if (c == 't' || c == 'f' || c == 'n') {
        byte[] word = c == 't' ? TRUE : c == 'f' ? FALSE : NULL;
        if (i + word.length > n || !Arrays.equals(t, i, i + word.length, word, 0, word.length)) {
          return null;
        }
        i += word.length;
        if (field >= 0) {
          typed(out, slot, c == 'n' ? U_VOID : U_BOOLEAN, c != 'n' && kinds[field] == 'b');
          if (c != 'n' && kinds[field] == 'b') {
            out[slot + 3] = c == 't';
          }
        }
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        int digits = i + (c == '-' ? 1 : 0);
        i = digits;
        if (i < n && t[i] == '0') {
          i++;
        } else {
          i = digitRun(t, i, n);
          if (i == digits) {
            return null;
          }
        }
        int intEnd = i;
        if (i < n && t[i] == '.') {
          int from = ++i;
          while (i < n && (c = t[i]) >= '0' && c <= '9') {
            i++;
          }
          if (i == from) {
            return null;
          }
        }
        boolean exponent = i < n && (t[i] == 'e' || t[i] == 'E');
        if (exponent) {
          i++;
          if (i < n && (t[i] == '+' || t[i] == '-')) {
            i++;
          }
          int from = i;
          while (i < n && (c = t[i]) >= '0' && c <= '9') {
            i++;
          }
          if (i == from) {
            return null;
          }
        }
        if (i - vs > 100) {
          return null; // Jackson limits a number's length
        }
        if (field >= 0 && intEnd != i) {
          // a decimal without exponent of up to 18 digits: the builder keeps it as a decimal,
          // and schema_of_variant names it by its value without trailing zeros
          if (exponent || i - vs > 20) {
            return null;
          }
          BigDecimal d = new BigDecimal(new String(t, vs, i - vs, StandardCharsets.ISO_8859_1));
          if (d.precision() > 18) {
            return null;
          }
          BigDecimal named = d.stripTrailingZeros();
          if (named.scale() < 0) {
            named = named.setScale(0);
          }
          if (named.scale() > 18) {
            return null;
          }
          typed(out, slot, decimalName(Math.max(named.precision(), named.scale()), named.scale()),
              kinds[field] == 'i' || kinds[field] == 'f');
          if (kinds[field] == 'i') {
            out[slot + 3] = d.doubleValue();
            out[slot + 4] = d.setScale(0, RoundingMode.DOWN).longValueExact();
          } else if (kinds[field] == 'f') {
            out[slot + 3] = d.doubleValue();
          }
        } else if (field >= 0) {
          if (intEnd - digits > 18) {
            return null; // longs near the edges: the builder's types
          }
          long value = 0;
          for (int j = digits; j < intEnd; j++) {
            value = value * 10 + (t[j] - '0');
          }
          if (digits != vs) {
            value = -value;
          }
          typed(out, slot, U_BIGINT, kinds[field] == 'i' || kinds[field] == 'f');
          if (kinds[field] == 'i') {
            out[slot + 3] = (double) value;
            out[slot + 4] = value;
          } else if (kinds[field] == 'f') {
            out[slot + 3] = (double) value;
          }
        }
      } else {
        return null; // objects, arrays, anything else
      }
    }
  }

  /** The names of a plain object, in order, with the field each one is (-1: none asked for) and its
   *  slot, and the bytes before each value (`gaps`: a separator, the name, the colon, their
   *  spaces; the last gap the object's end). Producers write every record's names in one order
   *  and spacing: when the bytes before a value are the layout's gap, they are valid and name the
   *  layout's next field, known by comparing them eight at a time, without stepping over spaces,
   *  finding the name's end, hashing it or searching the fields. */
  private static final class Layout {
    final byte[][] names;
    final int[] hashes;
    final int[] fields;
    final int[] slots;
    final byte[][] gaps;

    Layout(int n) {
      names = new byte[n][];
      hashes = new int[n];
      fields = new int[n];
      slots = new int[n];
      gaps = new byte[n + 1][];
    }
  }

  /** The last plain object's layout (records of one producer share it); read and replaced whole. */
  private transient volatile Layout layout;

  /** This record's layout: its first `onLayout` names and gaps the layout's `lay`, the rest in the
   *  arrays; its end from `endGap` to `n`. */
  private Layout learn(byte[] t, Layout lay, int onLayout, int[] keyStart, int[] keyEnd, int[] keyHash,
                       int[] gapStart, int[] gapEnd, int keys, int endGap, int n) {
    Layout out = new Layout(keys);
    for (int j = 0; j < keys; j++) {
      if (j < onLayout) {
        out.names[j] = lay.names[j];
        out.hashes[j] = lay.hashes[j];
        out.gaps[j] = lay.gaps[j];
      } else {
        out.names[j] = Arrays.copyOfRange(t, keyStart[j - onLayout], keyEnd[j - onLayout]);
        out.hashes[j] = keyHash[j - onLayout];
        out.gaps[j] = Arrays.copyOfRange(t, gapStart[j - onLayout], gapEnd[j - onLayout]);
      }
      out.fields[j] = -1;
      for (int f = 0, k = 1; f < names.length; k += slots(f), f++) {
        if (nameHashes[f] == out.hashes[j] && Arrays.equals(out.names[j], nameBytes[f])) {
          out.fields[j] = f;
          out.slots[j] = k;
          break;
        }
      }
    }
    out.gaps[keys] = Arrays.copyOfRange(t, endGap, n);
    return out;
  }

  /** The bytes at i are `gap`'s. */
  private static boolean fits(byte[] t, int i, int n, byte[] gap) {
    int len = gap.length;
    if (i + len > n) {
      return false;
    }
    if (len < 8) {
      for (int j = 0; j < len; j++) {
        if (t[i + j] != gap[j]) {
          return false;
        }
      }
      return true;
    }
    for (int j = 0; j + 8 <= len; j += 8) {
      if ((long) LONGS.get(t, i + j) != (long) LONGS.get(gap, j)) {
        return false;
      }
    }
    return (long) LONGS.get(t, i + len - 8) == (long) LONGS.get(gap, len - 8);
  }

  /** A field's place in a row: its type, missing and of-its-kind flags, then its values. */
  private int slots(int field) {
    return kinds[field] == 'i' ? 5 : 4;
  }

  private static void typed(Object[] out, int slot, UTF8String type, boolean ofItsKind) {
    out[slot] = type;
    out[slot + 1] = type == U_VOID;
    out[slot + 2] = ofItsKind;
  }

  private static final String ESCAPES = "\"\\/bfnrt";
  private static final byte[] TRUE = "true".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] FALSE = "false".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] NULL = "null".getBytes(StandardCharsets.US_ASCII);

  private static final UTF8String U_STRING = UTF8String.fromString("STRING");
  private static final UTF8String U_VOID = UTF8String.fromString("VOID");
  private static final UTF8String U_BOOLEAN = UTF8String.fromString("BOOLEAN");
  private static final UTF8String U_BIGINT = UTF8String.fromString("BIGINT");
  private static final UTF8String[][] DECIMAL_NAMES = new UTF8String[19][19];

  /** "DECIMAL(p,s)", as schema_of_variant spells it (kept: a record's numbers share a few). */
  private static UTF8String decimalName(int precision, int scale) {
    UTF8String name = DECIMAL_NAMES[precision][scale];
    if (name == null) { // a benign race: every thread makes the same value
      name = UTF8String.fromString("DECIMAL(" + precision + "," + scale + ")");
      DECIMAL_NAMES[precision][scale] = name;
    }
    return name;
  }

  // Eight bytes at a time (SWAR): a byte is flagged in the mask's top bit of its lane; the lowest
  // flagged lane is always a true one (a borrow only runs upward from a real match)
  private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final long ONES = 0x0101010101010101L;
  private static final long HIGHS = 0x8080808080808080L;

  private static long zeroLanes(long x) {
    return (x - ONES) & ~x & HIGHS;
  }

  /** Lanes holding a quote, a backslash, a control byte or a byte of 0x80 and above. */
  private static long specialLanes(long w) {
    return zeroLanes(w ^ 0x2222222222222222L) | zeroLanes(w ^ 0x5C5C5C5C5C5C5C5CL)
        | ((w - 0x2020202020202020L) & ~w & HIGHS) | (w & HIGHS);
  }

  /** The first byte from i on that is a quote, a backslash, a control byte or not ASCII (n: none):
   *  what ends a run of plain string bytes. */
  private static int plainRun(byte[] t, int i, int n) {
    while (i + 8 <= n) {
      long special = specialLanes((long) LONGS.get(t, i));
      if (special != 0) {
        return i + (Long.numberOfTrailingZeros(special) >>> 3);
      }
      i += 8;
    }
    while (i < n) {
      int c = t[i];
      if (c == '"' || c == '\\' || c < 0x20) { // bytes are signed: anything non-ASCII is < 0
        return i;
      }
      i++;
    }
    return n;
  }

  /** The first byte from i on that is not a digit (n: none): eight bytes at a time, as numbers of
   *  milliseconds run to thirteen digits. A lane is a digit when its byte minus '0' has a zero high
   *  nibble and a low one below ten (+6 does not carry into bit 4). */
  private static int digitRun(byte[] t, int i, int n) {
    while (i + 8 <= n) {
      long x = (long) LONGS.get(t, i) ^ 0x3030303030303030L;
      long other = (x & 0xF0F0F0F0F0F0F0F0L) | ((x + 0x0606060606060606L) & 0x1010101010101010L);
      if (other != 0) {
        return i + (Long.numberOfTrailingZeros(other) >>> 3);
      }
      i += 8;
    }
    while (i < n && t[i] >= '0' && t[i] <= '9') {
      i++;
    }
    return i;
  }

  /** Where a name starting at i ends (its closing quote), or -1: not printable ASCII without escapes. */
  private static int nameEnd(byte[] t, int i, int n) {
    while (i + 8 <= n) {
      long w = (long) LONGS.get(t, i);
      long special = specialLanes(w) | zeroLanes(w ^ 0x7F7F7F7F7F7F7F7FL);
      if (special != 0) {
        i += Long.numberOfTrailingZeros(special) >>> 3;
        break;
      }
      i += 8;
    }
    for (; i < n; i++) {
      int c = t[i];
      if (c == '"') {
        return i;
      }
      if (c < 0x20 || c > 0x7E || c == '\\') { // bytes are signed: anything non-ASCII is < 0
        return -1;
      }
    }
    return -1;
  }

  /** A name's hash: its length, first and last eight bytes (equal names, equal hashes; a
   *  collision is settled by comparing the bytes). */
  private static int nameHash(byte[] t, int s, int e) {
    int len = e - s;
    if (len < 8) {
      int h = len;
      for (int j = s; j < e; j++) {
        h = 31 * h + t[j];
      }
      return h;
    }
    long x = (long) LONGS.get(t, s) * 0x9E3779B97F4A7C15L + (long) LONGS.get(t, e - 8) + len;
    return (int) (x ^ (x >>> 29));
  }

  private static int skipSpace(byte[] t, int i, int n) {
    while (i < n) {
      byte c = t[i];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
        break;
      }
      i++;
    }
    return i;
  }

  /** The object's values of `names` (null where absent), as getFieldByKey finds them, but with the
   *  names compared as bytes against the metadata's dictionary once: getFieldByKey decodes a key
   *  into a String at every comparison. Dictionary layout: a header byte (offset size - 1 in its top
   *  two bits), the key count, count + 1 offsets, then the keys' UTF-8 bytes (VariantUtil). */
  private Variant[] fields(Variant root) {
    byte[] metadata = root.getMetadata();
    int offsetSize = ((metadata[0] >> 6) & 0x3) + 1;
    int count = VariantUtil.readUnsigned(metadata, 1, offsetSize);
    int strings = 1 + (count + 2) * offsetSize;
    int[] ids = new int[names.length];
    Arrays.fill(ids, -1);
    int wanted = names.length;
    for (int id = 0; id < count && wanted > 0; id++) {
      int start = strings + VariantUtil.readUnsigned(metadata, 1 + (id + 1) * offsetSize, offsetSize);
      int end = strings + VariantUtil.readUnsigned(metadata, 1 + (id + 2) * offsetSize, offsetSize);
      for (int i = 0; i < names.length; i++) {
        if (ids[i] < 0 && Arrays.equals(metadata, start, end, nameBytes[i], 0, nameBytes[i].length)) {
          ids[i] = id;
          wanted--;
          break;
        }
      }
    }
    Variant[] out = new Variant[names.length];
    if (wanted == names.length) {
      return out;
    }
    int size = root.objectSize();
    for (int j = 0; j < size; j++) {
      int id = root.getDictionaryIdAtIndex(j);
      for (int i = 0; i < names.length; i++) {
        if (ids[i] == id) {
          out[i] = root.getFieldAtIndex(j).value;
        }
      }
    }
    return out;
  }

  /** schema_of_variant's answer: spelled out for the scalars records carry, Spark's own for the rest. */
  static String typeName(Variant v, VariantUtil.Type type) {
    switch (type) {
      case NULL: return "VOID";
      case BOOLEAN: return "BOOLEAN";
      case LONG: return "BIGINT";
      case STRING: return "STRING";
      case DOUBLE: return "DOUBLE";
      case FLOAT: return "FLOAT";
      default:
        VariantBuilder builder = new VariantBuilder(false);
        builder.appendVariant(v);
        Variant alone = builder.result();
        return SchemaOfVariant.schemaOfVariant(new VariantVal(alone.getValue(), alone.getMetadata())).toString();
    }
  }

  /** try_variant_get(v, '$', 'double') for a number (null for anything else). */
  static Double asDouble(Variant v, VariantUtil.Type type) {
    if (type == null) {
      return null;
    }
    switch (type) {
      case LONG: return (double) v.getLong();
      case DOUBLE: return v.getDouble();
      case FLOAT: return (double) v.getFloat();
      case DECIMAL: return v.getDecimal().doubleValue();
      default: return null;
    }
  }

  /** try_variant_get(v, '$', 'bigint') for a number: Spark's TRY cast truncates toward zero and
   *  gives null when the value does not fit a long. */
  static Long asLong(Variant v, VariantUtil.Type type) {
    if (type == null) {
      return null;
    }
    switch (type) {
      case LONG: return v.getLong();
      case DOUBLE: return doubleToLong(v.getDouble());
      case FLOAT: return doubleToLong(v.getFloat());
      case DECIMAL:
        BigDecimal whole = v.getDecimal().setScale(0, RoundingMode.DOWN);
        try {
          return whole.longValueExact();
        } catch (ArithmeticException e) {
          return null;
        }
      default: return null;
    }
  }

  private static Long doubleToLong(double d) {
    return Math.floor(d) <= LONG_MAX && Math.ceil(d) >= LONG_MIN ? (long) d : null;
  }
}
