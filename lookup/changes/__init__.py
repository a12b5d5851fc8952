"""Change feeds: the feed (configuration and its changes), the listener thread of a process,
and how a partial cache (invalidation) and a full cache (overlay, debounced reloads)
apply them."""
