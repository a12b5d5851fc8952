"""Shared base of spark-lookup: the exception hierarchy, its one warning class and
Flink-style option parsing.

This package depends on nothing else of ours; ``cache``, ``triggers``, ``scan`` and
``lookup`` all build on it, which keeps the dependency direction of the design intact.
"""

from spark_lookup.errors import (
    BadValueError,
    ConfigError,
    ConfigWarning,
    ConnectorError,
    KeyKindError,
    LookupLoadError,
    MetricsUnavailableError,
    SnapshotUnavailableError,
    SourceError,
    SparkLookupError,
    TransientConnectorError,
)

__all__ = [
    "BadValueError",
    "ConfigError",
    "ConfigWarning",
    "ConnectorError",
    "KeyKindError",
    "LookupLoadError",
    "MetricsUnavailableError",
    "SnapshotUnavailableError",
    "SourceError",
    "SparkLookupError",
    "TransientConnectorError",
]
__version__ = "0.1.0"
