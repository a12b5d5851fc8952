"""Flink's JDBC connector in Python terms: JDBC URLs, the driver that opens one, and the
option table (the password it holds is a ``spark_lookup.credentials.Secret``)."""
