package org.apache.spark.kafka010;

import scala.Option;

/** Scala-object shape of Spark's KafkaTokenUtil: no delegation tokens, so never a match. */
public final class KafkaTokenUtil$ {
  public static final KafkaTokenUtil$ MODULE$ = new KafkaTokenUtil$();

  private KafkaTokenUtil$() {}

  public Option<KafkaTokenClusterConf> findMatchingTokenClusterConfig(
      org.apache.spark.SparkConf conf, String bootstrapServers) {
    return Option.empty();
  }

  public boolean needTokenUpdate(java.util.Map<String, Object> params, Option<KafkaTokenClusterConf> conf) {
    return false;
  }
}
