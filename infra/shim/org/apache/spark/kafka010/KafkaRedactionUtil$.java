package org.apache.spark.kafka010;

import java.util.ArrayList;
import java.util.List;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/** Scala-object shape of Spark's KafkaRedactionUtil: hides secrets when parameters are logged. */
public final class KafkaRedactionUtil$ {
  public static final KafkaRedactionUtil$ MODULE$ = new KafkaRedactionUtil$();

  private KafkaRedactionUtil$() {}

  public scala.collection.immutable.Seq<Tuple2<String, String>> redactParams(
      scala.collection.immutable.Seq<Tuple2<String, Object>> params) {
    List<Tuple2<String, String>> out = new ArrayList<>();
    for (Tuple2<String, Object> kv : CollectionConverters.asJava(params)) {
      String key = kv._1();
      String lower = key.toLowerCase();
      boolean secret = lower.contains("password") || lower.contains("secret")
          || lower.contains("jaas") || lower.contains("token");
      out.add(new Tuple2<>(key, secret ? "*********(redacted)" : String.valueOf(kv._2())));
    }
    return CollectionConverters.asScala(out).toList();
  }
}
