"""The connector layer: one place per backend (SQL databases over ADBC or DB-API; Redis
hashes, JSON and strings; Parquet and CSV files, Delta Lake and Iceberg tables).

Its modules are of two kinds. The engine owns, for each backend, column discovery,
identifier quoting, the database type to Spark type mapping, value conversion (the same
vectorized Arrow casts for every backend), the bad-value policy, and the Redis key and
value codecs, so a table gives the same values and Spark types in every cache mode:
this package's root modules (``convert``, ``errors``, ``json_keys``, ``keys``, ``policy``,
``predicates``, ``rows``), ``connectors.sql``'s catalog, connection, dialects, flavor,
pool, table and types, and ``connectors.redis``'s client, table, template and values.
The engine depends on nothing of ours but the shared base ``spark_lookup``.

The adapters plug a backend into the framework, and build on ``lookup`` and ``scan``:
the lookup functions, change feeds and Flink option tables
(``connectors.sql.{lookup_function,postgres_changes}``, ``connectors.sql.jdbc``,
``connectors.redis.{lookup_function,keyspace_changes,options}``,
``connectors.files.options``) and the scan sources (``connectors.sql.{source,chunks}``,
``connectors.redis.source``, ``connectors.files``). ``lookup`` and ``scan`` import the
engine and never an adapter: their facades name the adapters' classes by module, loaded
on first use, and a source offers what lookup needs of it (``keyed_lookup``).
"""

from connectors.keys import KeyCodec
from connectors.policy import BadValuePolicy
from connectors.predicates import Predicate

__all__ = ["BadValuePolicy", "KeyCodec", "Predicate"]
