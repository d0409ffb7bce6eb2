"""A query stopped while its foreachBatch runs a Spark job must stop, not die of a stack overflow.

Spark (StreamExecution.isInterruptionException) tells such a stop apart by matching the Py4J
error's text, a Java stack trace of kilobytes, against `((.|\\r\\n|\\r|\\n)*)`; Java's regex walks
that with several frames per character. At the JVM's default 1 MB thread stack the stream thread
died of a StackOverflowError at every such stop (session.THREAD_STACK). Checked on the session's
own JVM, on one of its default-sized threads (Py4J's), with a message the size Spark matched.
"""
from __future__ import annotations

PATTERN = "py4j.protocol.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)(java.lang.InterruptedException)"


def test_spark_s_interruption_pattern_fits_the_driver_s_thread_stack(spark):
    frames = "\n".join(f"\tat org.apache.spark.scheduler.DAGScheduler.runJob(DAGScheduler.scala:{i})" for i in range(300))
    message = f"py4j.protocol.Py4JJavaError: An error occurred while calling o2666.collectToPython.\n{frames}\n" \
              "java.lang.InterruptedException"
    assert len(message) > 20_000
    pattern = spark._jvm.java.util.regex.Pattern.compile(PATTERN)
    assert pattern.matcher(message).find()  # raises Py4JJavaError (StackOverflowError) on a 1 MB stack
