package org.apache.spark.kafka010;

import java.util.HashMap;
import java.util.Map;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Stand-in for Spark's spark-token-provider-kafka module, whose jar Maven Central does not serve
 * to this workplace. It carries the calls spark-sql-kafka makes: a plain parameter map builder.
 * Kafka delegation tokens (Kerberos) are not supported; SASL and SSL settings passed as kafka.*
 * options still reach the client unchanged.
 */
public class KafkaConfigUpdater {
  private final String module;
  private final Map<String, Object> map;

  public KafkaConfigUpdater(String module, scala.collection.immutable.Map<String, Object> params) {
    this.module = module;
    this.map = new HashMap<>(CollectionConverters.asJava(params));
  }

  public KafkaConfigUpdater set(String key, Object value) {
    map.put(key, value);
    return this;
  }

  public KafkaConfigUpdater setIfUnset(String key, Object value) {
    map.putIfAbsent(key, value);
    return this;
  }

  public KafkaConfigUpdater setAuthenticationConfigIfNeeded() {
    return this;
  }

  public KafkaConfigUpdater setAuthenticationConfigIfNeeded(Option<KafkaTokenClusterConf> conf) {
    return this;
  }

  public Map<String, Object> build() {
    return map;
  }
}
