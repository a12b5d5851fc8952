"""Flink's JDBC connector in Python terms: JDBC URLs, the driver that opens one, the password
that never shows, the option table."""
