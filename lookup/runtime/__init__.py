"""The caching runtime of one Python worker: the base every runtime extends, the partial
(function-backed) and full runtimes, one load of a full cache, the loaders over
synchronous and asynchronous functions, the per-process registry of runtimes, handles and
worker pins, and the state a Python worker keeps for Spark joins and SQL functions."""
