"""The environment of the subprocesses tests start."""

from __future__ import annotations

import os

# PySpark marks its process as being in Spark Connect mode with these while a Connect
# session is open (the test session's, for the Connect half of the run). A child that
# inherits them would start in Connect mode, or refuse a classic SparkContext.
_SESSION_MODE = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_REMOTE")

JVM_FAST_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""``spark.driver.extraJavaOptions`` (and executors') of the JVMs the tests start (not
the batch-stop script's of test_first_run.py, which runs as a user's would): the suite
is many small jobs, which the C1 compiler alone (no C2 threads competing for the
2 CPUs) and the serial GC run about a quarter faster, and the JVM starts faster. Nothing
in the suite measures the JVM's speed (benchmarks/ does)."""


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment without PySpark's session-mode variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _SESSION_MODE}
    env.update(extra)
    return env
