package org.apache.spark.kafka010;

/** Placeholder type: no delegation-token cluster is ever configured (see KafkaConfigUpdater). */
public final class KafkaTokenClusterConf implements java.io.Serializable {
  private KafkaTokenClusterConf() {}
}
