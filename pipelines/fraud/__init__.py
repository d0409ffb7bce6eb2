"""The fraud job: three analyzers per card in Spark state, a score aggregator, and two paths —
stateful micro-batch (exactly once into the store and the `decisions` topic) and real-time."""
