"""Change feeds: the feed (configuration and its changes), the keys a notification names,
the listener thread of a process and the processes of a host that listen, and how a
partial cache (invalidation) and a full cache (overlay, debounced reloads) apply them.
The feeds of a backend (``PostgresChanges``, ``RedisKeyspaceChanges``) are in
``connectors``."""
