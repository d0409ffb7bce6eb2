package cardstream.parse;

import java.math.BigDecimal;
import java.math.RoundingMode;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.catalyst.expressions.variant.SchemaOfVariant;
import org.apache.spark.types.variant.Variant;
import org.apache.spark.types.variant.VariantBuilder;
import org.apache.spark.types.variant.VariantUtil;
import org.apache.spark.unsafe.types.VariantVal;

/**
 * The top-level fields of a parsed JSON object (a VARIANT from try_parse_json), each with its JSON
 * type and its typed value, in one call per record.
 *
 * <p>Why: the contract's parsing (pipelines/engine/sources.py) read each field with
 * variant_get/schema_of_variant/try_variant_get, and Spark's variant cast builds a Literal and a
 * Cast expression for every scalar it converts: a third of the usage job's CPU. This reads the same
 * variant (so what is valid JSON is still decided by Spark's own parser) and gives the same answers
 * as those expressions, without them:
 *
 * <ul>
 *   <li>{@code t_<name>}: schema_of_variant of the field (null when absent, VOID for a JSON null);
 *   <li>a string field: {@code s_<name>}, its value when it is a JSON string;
 *   <li>a boolean field: {@code b_<name>}, its value when it is a JSON boolean;
 *   <li>an integer field: {@code d_<name>} (try_variant_get as double) and {@code l_<name>}
 *       (try_variant_get as bigint: a double or decimal truncated, null when it does not fit);
 *   <li>a float field: {@code d_<name>}.
 * </ul>
 *
 * Kinds: {@code str}, {@code bool}, {@code int}, {@code float}; the Python side builds the
 * matching struct type (pipelines/engine/sources.py, {@code variant_fields_type}).
 */
public final class VariantFields implements UDF1<VariantVal, Row> {
  private static final long serialVersionUID = 1L;
  private static final double LONG_MAX = (double) Long.MAX_VALUE;
  private static final double LONG_MIN = (double) Long.MIN_VALUE;

  private final String[] names;
  private final char[] kinds;
  private final int width;

  public VariantFields(String[] names, String[] kinds) {
    if (names.length != kinds.length) {
      throw new IllegalArgumentException("one kind per field name");
    }
    this.names = names.clone();
    this.kinds = new char[kinds.length];
    int w = 0;
    for (int i = 0; i < kinds.length; i++) {
      switch (kinds[i]) {
        case "str": this.kinds[i] = 's'; w += 2; break;
        case "bool": this.kinds[i] = 'b'; w += 2; break;
        case "int": this.kinds[i] = 'i'; w += 3; break;
        case "float": this.kinds[i] = 'f'; w += 2; break;
        default: throw new IllegalArgumentException("unknown kind " + kinds[i] + " for " + names[i]);
      }
    }
    this.width = w;
  }

  @Override
  public Row call(VariantVal input) {
    if (input == null) {
      return null;
    }
    Variant root = new Variant(input.getValue(), input.getMetadata());
    boolean object = root.getType() == VariantUtil.Type.OBJECT;
    Object[] out = new Object[width];
    int k = 0;
    for (int i = 0; i < names.length; i++) {
      Variant v = object ? root.getFieldByKey(names[i]) : null;
      VariantUtil.Type type = v == null ? null : v.getType();
      out[k++] = v == null ? null : typeName(v, type);
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
    return RowFactory.create(out);
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
