"""The connector layer: one place per backend that knows its types and values.

For each backend (SQL databases over ADBC or DB-API; Redis hashes, JSON and strings) this
package owns column discovery, identifier quoting, the database type to Spark type
mapping, value conversion (`connectors.convert`, the same vectorized Arrow casts for
every backend), the bad-value policy, and the Redis key and value codecs. Lookup
functions (``lookup``) and scan sources (``scan``) are thin layers over it, so a table
gives the same values and Spark types in every cache mode.

Depends on nothing of ours but the shared base ``spark_lookup``; ``scan`` and ``lookup``
build on it.
"""

from connectors.keys import KeyCodec
from connectors.policy import BadValuePolicy
from connectors.predicates import Predicate

__all__ = ["BadValuePolicy", "KeyCodec", "Predicate"]
