"""Telling the two kinds of SparkSession apart without touching either one's internals.

A classic session (``pyspark.sql.SparkSession``) and a Spark Connect session
(``pyspark.sql.connect.session.SparkSession``) share no base class in PySpark 4, so code
that accepts either asks here. Runs on the driver.
"""

from __future__ import annotations

import sys

__all__ = ["is_connect", "is_session"]

_CONNECT_MODULE = "pyspark.sql.connect.session"


def is_connect(spark: object) -> bool:
    """Whether ``spark`` is a Spark Connect session.

    The Connect client module is looked up among the loaded modules rather than
    imported: when it is not loaded, no Connect session can exist, and importing it
    would fail where its dependencies (grpcio, ...) are not installed.
    """
    module = sys.modules.get(_CONNECT_MODULE)
    return module is not None and isinstance(spark, module.SparkSession)


def is_session(spark: object) -> bool:
    """Whether ``spark`` is a SparkSession of either kind."""
    from pyspark.sql import SparkSession

    return isinstance(spark, SparkSession) or is_connect(spark)
