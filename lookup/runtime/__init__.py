"""The caching runtime of one Python worker: the base every runtime extends, the partial
(function-backed) and full runtimes, and the per-process registry of runtimes,
handles and worker pins."""
