"""Spark integration: lookup_join (plan, worker, assembly, the pandas wire, the metrics report),
Spark SQL functions and table joins, metrics, refreshed temp views, sessions, and the
Python a local Spark starts its workers with."""
