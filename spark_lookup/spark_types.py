"""Names for annotations that span both kinds of Spark session.

A classic ``pyspark.sql.SparkSession`` and a Spark Connect
``pyspark.sql.connect.session.SparkSession`` share no base class in PySpark 4, and
neither do their table functions, so an entry point that takes either is annotated with
these unions. Their members are forward references to classes imported under
``TYPE_CHECKING`` only: the Connect client needs packages (grpcio, ...) that a classic
installation may lack. DataFrames need no alias: both kinds subclass
``pyspark.sql.DataFrame``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, Union

if TYPE_CHECKING:
    from pyspark.sql import SparkSession as ClassicSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    from pyspark.sql.connect.udtf import UserDefinedTableFunction as ConnectTableFunction
    from pyspark.sql.udtf import UserDefinedTableFunction as ClassicTableFunction

__all__ = ["AnySparkSession", "AnyTableFunction"]

AnySparkSession: TypeAlias = Union["ClassicSession", "ConnectSession"]
"""A SparkSession of either kind: classic or Spark Connect."""

AnyTableFunction: TypeAlias = Union["ClassicTableFunction", "ConnectTableFunction"]
"""A registered Python table function (UDTF) of either kind of session."""
