"""SQL databases over ADBC or DB-API: catalog, type table, connections, and the table
every mode reads through."""

from connectors.sql.connection import SqlConnection
from connectors.sql.table import SqlPlan, SqlTable

__all__ = ["SqlConnection", "SqlPlan", "SqlTable"]
