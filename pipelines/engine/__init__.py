"""Spark wiring shared by the jobs: the session, the Kafka sources, the progress listener, the
query runner, and Spark's checkpoint logs read as files."""
