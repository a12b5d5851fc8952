"""SQL databases over ADBC or DB-API: catalog, type table, sessions, and the table
every mode reads through."""

from connectors.sql.session import Session
from connectors.sql.table import SqlPlan, SqlTable

__all__ = ["Session", "SqlPlan", "SqlTable"]
