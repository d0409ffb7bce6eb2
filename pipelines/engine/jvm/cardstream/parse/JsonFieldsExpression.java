package cardstream.parse;

import java.io.Serializable;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.Block;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.types.DataType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * JsonFields as a Catalyst expression over a record's bytes: its answers (`JsonFields.internal`)
 * returned as Spark holds a row, so no Row, no Java String and no boxing
 * converter stands between it and the contract's expressions (as a Java UDF, Spark converted
 * every record's input and result: a sixth of the usage job's CPU once the parse was a scan).
 * Interpreted (`eval`) or in the generated code (`doGenCode`) alike: one call per record.
 */
public final class JsonFieldsExpression extends Expression implements Serializable {
  private static final long serialVersionUID = 1L;
  private final Expression child;
  private final JsonFields fields;
  private final DataType type;
  private final scala.collection.immutable.Seq<Expression> children;

  /** `type`: the struct sources.json_fields_type builds for the same fields. */
  public JsonFieldsExpression(Expression child, JsonFields fields, DataType type) {
    this.child = child;
    this.fields = fields;
    this.type = type;
    this.children = CollectionConverters.asScala(List.of(child)).toList();
  }

  @Override
  public scala.collection.immutable.Seq<Expression> children() {
    return children;
  }

  @Override
  public DataType dataType() {
    return type;
  }

  @Override
  public boolean nullable() {
    return true;
  }

  @Override
  public Object eval(InternalRow input) {
    Object bytes = child.eval(input);
    return bytes == null ? null : fields.internal((byte[]) bytes);
  }

  /** In the generated code: the child's bytes, then one call (as Spark's own code"..." blocks
   *  would write it); no row is built for it, as a CodegenFallback expression needs. */
  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    ExprCode c = child.genCode(ctx);
    String ref = ctx.addReferenceObj("jsonFields", fields, JsonFields.class.getName());
    String type = CodeGenerator.javaType(dataType());
    List<String> parts = List.of("\n", "\nboolean ", " = ", ";\n" + type + " ", " = null;\nif (!", ") {\n  ",
        " = " + ref + ".internal(", ");\n  ", " = ", " == null;\n}\n");
    List<JavaCode> inputs = List.of(c.code(), ev.isNull(), c.isNull(), ev.value(), ev.isNull(), ev.value(), c.value(),
        ev.isNull(), ev.value());
    Block code = new CodeBlock(CollectionConverters.asScala(parts).toList(), CollectionConverters.asScala(inputs).toList());
    return ev.copy(code, ev.isNull(), ev.value());
  }

  @Override
  public Expression withNewChildrenInternal(scala.collection.immutable.IndexedSeq<Expression> newChildren) {
    return new JsonFieldsExpression(newChildren.apply(0), fields, type);
  }

  @Override
  public String prettyName() {
    return "cardstream_json_fields";
  }

  @Override
  public int productArity() {
    return 3;
  }

  @Override
  public Object productElement(int n) {
    switch (n) {
      case 0: return child;
      case 1: return fields;
      case 2: return type;
      default: throw new IndexOutOfBoundsException(Integer.toString(n));
    }
  }

  @Override
  public boolean canEqual(Object that) {
    return that instanceof JsonFieldsExpression;
  }
}
