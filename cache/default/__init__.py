"""DefaultLookupCache: Flink's partial cache (size, bytes and TTL eviction), columnar, with
its rows in Arrow segments."""
